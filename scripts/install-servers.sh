#!/usr/bin/env bash
# Installs the PostgreSQL and etcd *server binaries* the test suite starts
# itself (initdb/pg_ctl/postgres, etcd), and Debian's chromium and a Java
# runtime for the dashboard's browser and HTML-validity tests. Nothing is started or enabled here:
# every test starts its own throwaway server on a free loopback port.
# Also the fault-injection tools the failure drills use: iproute2 (ip netns,
# veth), nftables (black holes, packet loss) and libfaketime (clock jumps).
set -euo pipefail

have_pg() { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; }
have_etcd() { command -v etcd >/dev/null 2>&1; }
# The dashboard's page tests drive Debian's chromium; its HTML check (vnu.jar) runs on Java.
have_chromium() { command -v chromium >/dev/null 2>&1; }
have_java() { command -v java >/dev/null 2>&1; }

missing=()
have_pg || missing+=(postgresql)
have_etcd || missing+=(etcd-server etcd-client)
have_chromium || missing+=(chromium)
have_java || missing+=(default-jre-headless)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "install-servers: need root to apt-get install ${missing[*]}; run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
else SUDO=""; fi

echo "install-servers: apt-get install ${missing[*]}" >&2
# policy-rc.d keeps the packages' own services from starting: tests must not
# depend on (or collide with) a system-wide PostgreSQL on 5432 or etcd on 2379.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
