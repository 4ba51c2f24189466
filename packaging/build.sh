#!/usr/bin/env bash
# `make dist`: freeze clockd with PyInstaller into
#   build/pyi/dist/clockd/                   one directory (what the .deb installs)
#   dist/clockd-<version>-linux-x86_64       one file (for downloads)
# from a build venv holding exactly pyproject's dependencies plus the pinned freezer
# (packaging/requirements-build.txt), all from the package registry.
# Skipped when nothing it reads changed since the last build (build/dist.key): the
# key hashes the sources, the packaging files, the commit and the venv's key.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VERSION=$($PY packaging/meta.py version)
ONEFILE=dist/clockd-$VERSION-linux-x86_64
VENV=build/venv

venv_key=$($PY packaging/meta.py hash pyproject.toml packaging/requirements-build.txt)
if [ "$(cat $VENV/.key 2>/dev/null)" != "$venv_key" ]; then
  echo "build: creating $VENV (pyproject dependencies + PyInstaller)" >&2
  rm -rf $VENV
  $PY -m venv $VENV
  $VENV/bin/pip install -q --disable-pip-version-check -r <($PY packaging/meta.py deps) -r packaging/requirements-build.txt
  echo "$venv_key" > $VENV/.key
fi

commit=$(git describe --always --dirty --abbrev=12 --exclude='*' 2>/dev/null || echo unknown)
mapfile -t inputs < <(git ls-files -co --exclude-standard clockd cli pyproject.toml packaging/{build.sh,clockd.spec,entry.py,meta.py,requirements-build.txt} | grep -v '__pycache__')
key=$(printf '%s\n' "$commit" "$venv_key" "$($PY packaging/meta.py hash "${inputs[@]}")" | sha256sum | cut -d' ' -f1)
if [ "$(cat build/dist.key 2>/dev/null)" = "$key" ] && [ -x "$ONEFILE" ] && [ -x build/pyi/dist/clockd/clockd ]; then
  echo "build: $ONEFILE is up to date" >&2
  exit 0
fi

mkdir -p build/pyi dist
printf '%s\n' "$commit" > build/pyi/COMMIT
start=$(date +%s)
# A fixed hash seed and the commit's date keep the bytes as stable as PyInstaller allows.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
PYTHONHASHSEED=0 \
PYTHONPATH="$PWD:$PWD/cli" \
CLOCKD_VERSION="$VERSION" \
CLOCKD_COMMIT_FILE="$PWD/build/pyi/COMMIT" \
  $VENV/bin/pyinstaller --noconfirm --log-level WARN \
    --distpath build/pyi/dist --workpath build/pyi/work packaging/clockd.spec
rm -f dist/clockd-*-linux-x86_64
cp build/pyi/dist/"$(basename "$ONEFILE")" "$ONEFILE"

# The spec drops build-machine RUNPATHs from what it collects; PyInstaller adds a few
# bootstrap extensions itself (_struct, zlib), so the one directory gets the same pass
# here: only $ORIGIN entries may stay (lintian: custom-library-search-path).
while IFS= read -r -d '' f; do
  rpath=$(patchelf --print-rpath "$f" 2>/dev/null) || continue
  [ -n "$rpath" ] || continue
  keep=$(tr ':' '\n' <<<"$rpath" | grep '^\$ORIGIN' | paste -sd: - || true)
  [ "$rpath" = "$keep" ] && continue
  if [ -n "$keep" ]; then patchelf --set-rpath "$keep" "$f"; else patchelf --remove-rpath "$f"; fi
done < <(find build/pyi/dist/clockd -type f \( -name '*.so' -o -name '*.so.*' \) -print0)

# Smoke: both layouts start, report this release and find the bundled zone data.
for exe in "$ONEFILE" build/pyi/dist/clockd/clockd; do
  out=$(env -i "$exe" version)
  case "$out" in "clockd $VERSION (commit $commit, tzdata "*) ;; *) echo "build: $exe version printed: $out" >&2; exit 1 ;; esac
done
echo "$key" > build/dist.key
echo "build: $ONEFILE ($(du -h "$ONEFILE" | cut -f1), $(($(date +%s) - start)) s)" >&2
