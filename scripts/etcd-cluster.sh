#!/usr/bin/env bash
# The etcd-cluster suite: two `ax serve` replicas against a 3-member etcd cluster on loopback,
# one member failure per scenario (the etcd leader SIGKILLed; the member carrying the ax
# leader's streams SIGKILLed; each member SIGSTOPped in turn; a hung member left out of the
# client's channel; a standby whose leader watch goes through a hung member; the etcd leader
# partitioned from its peers and every client, then healed), with a fresh cluster for each. The
# partition scenarios run their members in network namespaces (`ax_start_etcd_cluster DIR
# netns`), so the suite runs as root, as CI does. Each scenario prints one `etcd-cluster:`
# line with its figures; the summary repeats them. Run by scripts/test.sh, which starts the
# shared Redis the replicas use. Arguments: scenario names to run only those.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo.sh
. scripts/cargo.sh
: "${AX_TEST_REDIS:?start the servers first (scripts/test.sh does)}"
# shellcheck source=scripts/servers.sh
. scripts/servers.sh
tmp=$(mktemp -d -t ax-etcd-cluster.XXXXXX)
out="$tmp/out"
cleanup() { ax_stop_etcd_cluster; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
start=$(date +%s)
cargo build --workspace --test etcd_cluster --locked
if [ $# -gt 0 ]; then
  scenarios="$*"
else
  scenarios=$(ax_cargo_test --test etcd_cluster -- --list 2>/dev/null \
    | sed -n 's/: test$//p')
fi
[ -n "$scenarios" ] || { echo "etcd-cluster: no scenario found" >&2; exit 1; }
for scenario in $scenarios; do
  mode=""
  case $scenario in *partition*) mode=netns ;; esac
  ax_start_etcd_cluster "$tmp/$scenario" $mode
  AX_TEST_ETCD_CLUSTER="$AX_ETCD_CLUSTER" AX_TEST_ETCD_CLUSTER_PIDS="$AX_ETCD_CLUSTER_PIDS" \
    AX_TEST_ETCD_CLUSTER_LINKS="$AX_ETCD_CLUSTER_LINKS" \
    AX_TEST_ETCD_CLUSTER_BRIDGE="$AX_ETCD_CLUSTER_BRIDGE" \
    ax_cargo_test --test etcd_cluster -- --exact "$scenario" --nocapture 2>&1 \
    | tee -a "$out"
  ax_stop_etcd_cluster
done
echo "etcd-cluster: summary ($(($(date +%s) - start)) s)"
grep -o 'etcd-cluster: .*' "$out" | grep -v '^etcd-cluster: summary' \
  || { echo "etcd-cluster: no scenario reported" >&2; exit 1; }
