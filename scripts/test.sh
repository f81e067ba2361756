#!/usr/bin/env bash
# The one test command: setup, throwaway etcd and Redis, format, lints, every test, and the
# other checks (alert rules, Helm chart, console, module cycles). Servers it starts are
# stopped however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/setup.sh
# The etcd-client build fails deep inside a build script without these; say so up front.
if [ ! -e /usr/include/google/protobuf/descriptor.proto ]; then
  echo "test: protoc's well-known types are missing; install Debian's libprotobuf-dev (scripts/setup.sh does)" >&2
  exit 1
fi

tmp=$(mktemp -d -t ax-test.XXXXXX)
# shellcheck source=scripts/servers.sh
. scripts/servers.sh
cleanup() { ax_stop_servers; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

ax_start_servers "$tmp"
export AX_TEST_ETCD="$AX_ETCD_ENDPOINT" AX_TEST_REDIS="$AX_REDIS_URL"
echo "test: etcd at $AX_TEST_ETCD, Redis at $AX_TEST_REDIS"

export CARGO_TERM_COLOR=never
# One build from a clean tree gains nothing from incremental caches, which would take about a
# third of target/ on a disk that may be small; say up front how much room there is.
export CARGO_INCREMENTAL=0
echo "test: free disk: $(df -Pk . | awk 'NR==2 {printf "%.1f GiB", $4/1048576}')"
echo "test: cargo fmt --check"
cargo fmt --all -- --check
echo "test: cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
# --all-targets leaves out the chaos suite, the cluster suites, the soak and the nemesis (test = false, run
# by their scripts): lint them too.
cargo clippy --workspace --test chaos --test cluster --test etcd_cluster --test soak --test nemesis \
  --locked -- -D warnings
# The embedded kernel without its default `metrics` feature (no Prometheus client).
cargo clippy -p ax-embedded --no-default-features --locked -- -D warnings
echo "test: cargo test"
cargo test --workspace --locked --no-fail-fast
echo "test: chaos suite"
scripts/chaos.sh
echo "test: Redis Cluster suite"
scripts/cluster.sh
echo "test: etcd-cluster suite"
scripts/etcd-cluster.sh
echo "test: soak (2 minutes)"
scripts/soak.sh
echo "test: nemesis (a fixed seed and a random one, 90 s each)"
scripts/nemesis.sh --ci

for check in "$root"/scripts/check-*.sh; do
  [ -e "$check" ] || continue
  echo "test: $(basename "$check")"
  "$check"
done
echo "test: all checks passed"
