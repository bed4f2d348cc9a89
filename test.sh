#!/usr/bin/env bash
# Runs every test. On a fresh Debian machine it first installs what the tests need:
#   - kubectl (the image's dispatcher, or Debian's when none is on PATH)
#   - Debian's kubectl 1.20 (kubernetes-client), unpacked into .cache/ as the oldest client we support
#   - etcd-server, for the etcd datastore tests
#   - iproute2 (ip), for the network-partition test, which builds its own network namespaces
#   - npm dependencies (npm ci), then a build of dist/
set -euo pipefail
cd "$(dirname "$0")"

KUBECTL_120_DIR=.cache/kubectl-1.20
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=0
apt_update_once() {
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
}

if ! command -v kubectl >/dev/null 2>&1; then
  echo "test.sh: installing kubectl (Debian kubernetes-client)"
  apt_update_once
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null
fi

if [ ! -x "$KUBECTL_120_DIR/usr/bin/kubectl" ]; then
  echo "test.sh: fetching Debian's kubectl 1.20 into $KUBECTL_120_DIR"
  apt_update_once
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download kubernetes-client >/dev/null)
  mkdir -p "$KUBECTL_120_DIR"
  dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$KUBECTL_120_DIR"
  rm -rf "$tmp"
fi

if ! command -v etcd >/dev/null 2>&1; then
  echo "test.sh: installing etcd-server"
  apt_update_once
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
fi

if ! command -v ip >/dev/null 2>&1; then
  echo "test.sh: installing iproute2"
  apt_update_once
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
fi

echo "test.sh: npm ci"
npm ci --no-audit --no-fund
npx tsc -p tsconfig.test.json

shopt -s nullglob
tests=(test/*.test.ts)
echo "test.sh: running ${#tests[@]} test files"
exec node --import tsx --test --test-concurrency=2 --test-timeout=600000 "${tests[@]}"
