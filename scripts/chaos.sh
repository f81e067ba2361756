#!/usr/bin/env bash
# The chaos suite: real etcd, Redis and `ax serve` processes, one fault at a time (leader
# SIGKILL twice, a leader of both roles SIGKILLed and one SIGSTOPped under 2 000 fires/s with
# every state checked,
# Redis restarted empty with executions waiting (their states repaired as lost),
# leader SIGKILL with the default 10 s lease, leader SIGKILL before it writes the
# worker events it read, leader SIGSTOP past its lease,
# worker SIGKILL mid-execution, etcd SIGKILL and SIGSTOP (past and inside the lease), Redis SIGKILL with and without
# persistence, Redis read-only after a failover, garbage in a ready list, a long `forbid`
# task, the leader's wall clock stepped 10 minutes forward and 1 minute back (libfaketime), a
# replica whose disk is full (its logs on /dev/full), etcd at its space quota (NOSPACE); with
# 3 replicas sharing
# 16 shards: a shard owner SIGKILLed, one SIGSTOPped past its lease, a 4th replica joining under
# load and one leaving with SIGTERM; Redis at maxmemory, a Redis restart, a garbage state record and a foreign fence are
# in the end-to-end tests). Each scenario prints one `chaos:` line with its figures;
# the summary repeats them. Run by scripts/test.sh, which starts the shared servers; scenarios
# that kill or stop a server start their own.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo.sh
. scripts/cargo.sh
: "${AX_TEST_ETCD:?start the servers first (scripts/test.sh does)}"
: "${AX_TEST_REDIS:?start the servers first (scripts/test.sh does)}"
out=$(mktemp -t ax-chaos.XXXXXX)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
ax_cargo_test --test chaos -- --test-threads=1 --nocapture 2>&1 \
  | tee "$out"
echo "chaos: summary ($(($(date +%s) - start)) s)"
grep -o 'chaos: .*' "$out" | grep -v '^chaos: summary' || { echo "chaos: no scenario reported" >&2; exit 1; }
