#!/usr/bin/env bash
# `make deb`: dist/clockd_<version>_amd64.deb around the one-directory build of
# packaging/build.sh. Layout:
#   /usr/lib/clockd/{clockd,_internal/}       the frozen executable and its bundle
#   /usr/bin/clockd, /usr/bin/clockctl         symlinks to it (it picks the program by argv[0])
#   /usr/lib/systemd/system/clockd{,@}.service, clockd.target
#   /usr/lib/sysusers.d/clockd.conf, /usr/lib/tmpfiles.d/clockd.conf
#   /etc/clockd/clockd.yaml                    conffile
#   /usr/share/man/man{1,5,8}/*.gz, /usr/share/doc/clockd/{copyright,changelog.gz}
# Depends comes from dpkg-shlibdeps over every ELF file in the bundle; the bundle's
# own libraries are resolved inside it. Then lintian must report no error.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
packaging/build.sh
VERSION=$($PY packaging/meta.py version)
DEB=dist/clockd_${VERSION}_amd64.deb
BUNDLE=build/pyi/dist/clockd
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

key=$(printf '%s\n' "$(cat build/dist.key)" \
  "$($PY packaging/meta.py hash packaging/deb.sh $(git ls-files -co --exclude-standard packaging/deb systemd man config/clockd.yaml Makefile))" \
  | sha256sum | cut -d' ' -f1)
if [ "$(cat build/deb.key 2>/dev/null)" = "$key" ] && [ -f "$DEB" ]; then
  echo "deb: $DEB is up to date" >&2
  exit 0
fi

ROOT=build/deb/root
rm -rf build/deb && mkdir -p "$ROOT/DEBIAN" "$ROOT/usr/lib" "$ROOT/usr/bin"
cp -a "$BUNDLE" "$ROOT/usr/lib/clockd"
ln -s ../lib/clockd/clockd "$ROOT/usr/bin/clockd"
ln -s ../lib/clockd/clockd "$ROOT/usr/bin/clockctl"

make -s install-systemd DESTDIR="$PWD/$ROOT" PREFIX=/usr BINDIR=/usr/bin UNITDIR=/usr/lib/systemd/system

install -D -m 644 config/clockd.yaml "$ROOT/etc/clockd/clockd.yaml"
echo /etc/clockd/clockd.yaml > "$ROOT/DEBIAN/conffiles"

for page in man/*.[158]; do
  section=${page##*.}
  install -d "$ROOT/usr/share/man/man$section"
  gzip -9n < "$page" > "$ROOT/usr/share/man/man$section/$(basename "$page").gz"
done

doc="$ROOT/usr/share/doc/clockd"
install -D -m 644 packaging/deb/copyright "$doc/copyright"
{
  printf 'clockd (%s) unstable; urgency=medium\n\n' "$VERSION"
  printf '  * Release %s: see the project CHANGELOG.md for what changed.\n\n' "$VERSION"
  printf ' -- clockd maintainers <maintainers@clockd.example.org>  %s\n' "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.gz"
install -D -m 644 packaging/deb/lintian-overrides "$ROOT/usr/share/lintian/overrides/clockd"

for script in postinst prerm postrm; do install -m 755 "packaging/deb/$script" "$ROOT/DEBIAN/$script"; done

# Depends: what the frozen files need from the system. Every library the bundle carries
# is looked up inside it first (-l with the installed paths, -S the staged root: as
# part of this package, no dependency), except for the bootloader executable, which the
# system's loader starts before the bundle's directory is known (it links zlib).
t0=$(date +%s)
shl=build/deb/shlibdeps
mkdir -p "$shl/debian"
stage="$PWD/$ROOT"
printf 'Source: clockd\n\nPackage: clockd\nArchitecture: amd64\n' > "$shl/debian/control"
mapfile -t libs < <(find "$stage/usr/lib/clockd/_internal" -type f -name '*.so*')
mapfile -t private < <(printf '%s\n' "${libs[@]}" | xargs -n1 dirname | sort -u | sed "s#^$stage#-l#")
boot=$(cd "$shl" && dpkg-shlibdeps -O --warnings=0 "$stage/usr/lib/clockd/clockd" | sed -n 's/^shlibs:Depends=//p')
rest=$(cd "$shl" && dpkg-shlibdeps -O --warnings=0 -S"$stage" "${private[@]}" "${libs[@]}" | sed -n 's/^shlibs:Depends=//p')
depends=$($PY packaging/meta.py depends "$boot" "$rest")
[ -n "$depends" ] || { echo "deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
echo "deb: Depends from dpkg-shlibdeps in $(($(date +%s) - t0)) s" >&2

size=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
sed -e "s/@VERSION@/$VERSION/" -e "s/@SIZE@/$size/" -e "s/@DEPENDS@/$depends/" packaging/deb/control.in > "$ROOT/DEBIAN/control"
# Modes lintian and policy expect: directories and the executable 755, everything
# else (shared objects included) 644.
find "$ROOT" -type d -exec chmod 755 {} +
find "$ROOT/usr/lib/clockd" -type f -exec chmod 644 {} +
chmod 755 "$ROOT/usr/lib/clockd/clockd" "$ROOT"/DEBIAN/{postinst,prerm,postrm}
find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

rm -f dist/clockd_*_amd64.deb
# gzip: xz took ten times the CPU (50 s against 5 s) to save 7 MB of 42.
dpkg-deb --root-owner-group -Zgzip -z9 --build "$ROOT" "$DEB" >/dev/null
t0=$(date +%s)
lintian --fail-on error "$DEB" >&2
echo "deb: lintian in $(($(date +%s) - t0)) s" >&2
echo "$key" > build/deb.key
echo "deb: $DEB ($(du -h "$DEB" | cut -f1); Depends: $depends)" >&2
