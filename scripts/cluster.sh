#!/usr/bin/env bash
# The Redis Cluster suite: starts a local Redis Cluster (6 nodes: 3 primaries with a replica
# each, node timeout 1 s; scripts/servers.sh), runs the queue crate's integration tests on it
# (AX_TEST_REDIS_CLUSTER makes them connect to the cluster), then the scenarios with real
# `ax serve` processes (engine-bin/tests/cluster.rs: tasks over four queues run exactly
# once; a partitioned queue spread over the primaries runs them exactly once; a primary
# SIGKILLed mid-run, its replica promoted, nothing lost or run twice). Each scenario prints
# one `cluster:` line; the summary repeats them. Run by scripts/test.sh, which starts the
# shared etcd and Redis (tests that restart a server use a private one).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo.sh
. scripts/cargo.sh
: "${AX_TEST_ETCD:?start the servers first (scripts/test.sh does)}"
: "${AX_TEST_REDIS:?start the servers first (scripts/test.sh does)}"
# shellcheck source=scripts/servers.sh
. scripts/servers.sh
dir=$(mktemp -d -t ax-cluster.XXXXXX)
out="$dir/out"
cleanup() { ax_stop_redis_cluster; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
start=$(date +%s)
ax_start_redis_cluster "$dir"
export AX_TEST_REDIS_CLUSTER="$AX_REDIS_CLUSTER"
echo "cluster: Redis Cluster at $AX_TEST_REDIS_CLUSTER"
ax_test_crate queue
ax_cargo_test --test cluster -- --test-threads=1 --nocapture 2>&1 | tee "$out"
echo "cluster: summary ($(($(date +%s) - start)) s)"
grep -o 'cluster: .*' "$out" | grep -v '^cluster: summary' || { echo "cluster: no scenario reported" >&2; exit 1; }
