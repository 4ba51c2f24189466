#!/usr/bin/env bash
# Installs what `make dist` / `make deb` and tests/packaging need beyond Python, from apt,
# like scripts/install-servers.sh does for PostgreSQL and etcd: dpkg-dev (dpkg-shlibdeps),
# lintian, patchelf (strips build-machine RUNPATHs), binutils (objdump), man-db (man -l),
# systemd (systemd-analyze). Nothing is started here.
set -euo pipefail

declare -A tool_pkg=(
  [dpkg-shlibdeps]=dpkg-dev [lintian]=lintian [patchelf]=patchelf [objdump]=binutils
  [man]=man-db [systemd-analyze]=systemd
)
missing=()
for tool in "${!tool_pkg[@]}"; do command -v "$tool" >/dev/null 2>&1 || missing+=("${tool_pkg[$tool]}"); done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "install-build-tools: need root to apt-get install ${missing[*]}; run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
else SUDO=""; fi

echo "install-build-tools: apt-get install ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
