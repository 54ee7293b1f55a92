#!/bin/sh
# install-deps.sh - what Gantry's demo and tests need on a Debian 12 machine (run as root).
# Installs only what is missing, from Debian's packages.
set -eu
need=""
have() { command -v "$1" >/dev/null 2>&1; }
have runc || need="$need runc"
have skopeo || need="$need skopeo"
have umoci || need="$need umoci"
have docker-registry || need="$need docker-registry"
[ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || need="$need busybox-static"
dpkg -s busybox-static >/dev/null 2>&1 || need="$need busybox-static"
have jq || need="$need jq"
have curl || need="$need curl"
have htpasswd || need="$need apache2-utils"
# The SIF image tests make squashfs root filesystems.
have mksquashfs || need="$need squashfs-tools"
[ -x /usr/bin/tini-static ] || need="$need tini"
# The agent compiles its seccomp profile with libseccomp (linked at build time).
[ -e /usr/include/seccomp.h ] || need="$need libseccomp-dev"
have ip || need="$need iproute2"
# Container networking for services: the CNI bridge and host-local plugins, and iptables for
# their NAT rules.
[ -x /usr/lib/cni/bridge ] || need="$need containernetworking-plugins"
have iptables || need="$need iptables"
# The agents' tenant firewall: one nftables table per agent keeps workflows apart.
[ -x /usr/sbin/nft ] || need="$need nftables"
# The node-health stack (`gantry up --monitoring`, its tests, scripts/check-monitoring.sh).
[ -x /usr/bin/prometheus ] || need="$need prometheus"
[ -x /usr/bin/prometheus-alertmanager ] || need="$need prometheus-alertmanager"
[ -x /usr/bin/prometheus-node-exporter ] || need="$need prometheus-node-exporter"
# The web UI's browser tests (crates/gantry/tests/web.rs): headless chromium driven by node.
[ -x /usr/bin/chromium ] || need="$need chromium"
have node || need="$need nodejs"
have npm || need="$need npm"
# The store's PostgreSQL backend is tested against a real server, which scripts/test-images.sh
# starts from Debian's binaries (/usr/lib/postgresql/N/bin).
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need="$need postgresql"
# The replicas' failover test puts three servers behind HAProxy, as a site would.
[ -x /usr/sbin/haproxy ] || need="$need haproxy"
# The multinode tests' MPI image (scripts/make-mpi-image.sh): made with mmdebstrap from Debian's
# mirror, its allreduce program compiled here against Open MPI and MPICH.
have mmdebstrap || need="$need mmdebstrap"
have mpicc.openmpi || need="$need libopenmpi-dev"
have mpicc.mpich || need="$need libmpich-dev"
if [ -n "$need" ]; then
  echo "install-deps: installing$need"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null || true
  # shellcheck disable=SC2086
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $need >/dev/null
fi
# The MCP tests' clients: the official Python MCP SDK from PyPI, in a venv of its own
# (crates/gantry/tests/mcp.rs runs it; GANTRY_MCP_PYTHON points elsewhere).
mcp_venv=${GANTRY_MCP_VENV:-/opt/gantry-venv}
if ! "$mcp_venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
  echo "install-deps: the Python MCP SDK in $mcp_venv"
  if ! python3 -m venv "$mcp_venv" >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends python3-venv >/dev/null
    /usr/bin/python3 -m venv "$mcp_venv"
  fi
  "$mcp_venv/bin/pip" install -q --disable-pip-version-check 'mcp==2.3.0'
fi
# The data-transfer tests' S3 API server: moto from PyPI (`moto_server`, started on a free port
# by crates/gantry/tests/common/s3.rs), in the same venv.
if ! "$mcp_venv/bin/python" -c 'import moto.server' >/dev/null 2>&1; then
  echo "install-deps: moto (an S3 API server) in $mcp_venv"
  "$mcp_venv/bin/pip" install -q --disable-pip-version-check 'moto[server]==5.1.18'
fi
# The browser tests' driver: playwright-core from npm, at the version their lockfile pins, in
# target/web-node (it drives Debian's chromium; it downloads no browser).
web_root=$(cd "$(dirname "$0")/.." && pwd)
web_src=$web_root/crates/gantry/tests/web
web_node=$web_root/target/web-node
if ! cmp -s "$web_src/package-lock.json" "$web_node/package-lock.json" ||
  [ ! -d "$web_node/node_modules/playwright-core" ]; then
  echo "install-deps: playwright-core in $web_node"
  mkdir -p "$web_node"
  cp "$web_src/package.json" "$web_src/package-lock.json" "$web_node/"
  (cd "$web_node" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
