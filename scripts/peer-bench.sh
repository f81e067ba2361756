#!/usr/bin/env bash
# ax beside BullMQ on the same machine, one configuration after another, one table at the end.
#
#   scripts/peer-bench.sh [--jobs N] [--runs R] [--planned]
#
# Every configuration is a run of the end-to-end bench (engine-bin/benches/e2e.rs, whose header
# describes the workload): N one-shot jobs due evenly over 10 s starting 5 s after submission
# begins, on private servers on loopback. ax: tasks written into etcd (128 puts a transaction,
# 4 in flight) while one replica with both roles leads, default settings but the worker
# concurrency, with the `http` handler calling a receiver in the bench or the `noop` handler.
# BullMQ (pinned in engine-bin/benches/peer/, installed by the bench with `npm ci` under
# target/): the same dues as delayed jobs, a node worker with a no-op processor, its own Redis.
#
#   ax http c=50, ax http c=200, ax noop c=50, BullMQ c=50, BullMQ c=200
#
# --jobs N (default 100000), --runs R (default 2: the whole list R times), --planned adds ax
# http c=200 with registration planned to end before the first due (AX_BENCH_PLANNED=1).
# Each run is bounded by `timeout`; its log is kept in target/peer-bench/logs/. CPU per job is
# the CPU time of the processes a side needs (ax + etcd + Redis; BullMQ's node worker + Redis)
# from the start of submission to the last start, divided by N; the split follows. Exits
# non-zero if a run failed (a lost job fails it).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=servers.sh
source scripts/servers.sh

jobs=100000
runs=2
planned=0
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) jobs=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --planned) planned=1; shift ;;
    *) echo "usage: $0 [--jobs N] [--runs R] [--planned]" >&2; exit 2 ;;
  esac
done
ax_require peer-bench cargo node npm etcd redis-server

logs=target/peer-bench/logs
mkdir -p "$logs"
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT

cargo bench -p ax --bench e2e --no-run >/dev/null 2>&1 || cargo bench -p ax --bench e2e --no-run

# name | environment
configs=(
  "ax-http-c50|AX_BENCH_HTTP=1 AX_WORKER_CONCURRENCY=50"
  "ax-http-c200|AX_BENCH_HTTP=1 AX_WORKER_CONCURRENCY=200"
  "ax-noop-c50|AX_WORKER_CONCURRENCY=50"
  "bullmq-c50|AX_BENCH_PEER=bullmq AX_WORKER_CONCURRENCY=50"
  "bullmq-c200|AX_BENCH_PEER=bullmq AX_WORKER_CONCURRENCY=200"
)
[ "$planned" = 1 ] && configs+=("ax-http-c200-planned|AX_BENCH_HTTP=1 AX_WORKER_CONCURRENCY=200 AX_BENCH_PLANNED=1")

# Registration, a 5 s offset, the 10 s window, a minute of grace and the servers' start.
limit=$((240 + jobs / 500))
failed=0
for run in $(seq "$runs"); do
  for config in "${configs[@]}"; do
    name=${config%%|*}
    log="$logs/$name-n$jobs-run$run.log"
    echo "peer-bench: run $run, $name, $jobs jobs (log: $log)"
    before=$(wc -l <"$summary")
    # shellcheck disable=SC2086 # the environment list splits into words on purpose
    if ! env ${config#*|} AX_BENCH_TASKS="$jobs" AX_BENCH_SUMMARY="$summary" \
      timeout --kill-after=30 "$limit" cargo bench -p ax --bench e2e >"$log" 2>&1; then
      echo "peer-bench: $name failed (run $run); the end of its log:" >&2
      tail -5 "$log" >&2
      failed=1
    fi
    # A failed run that got as far as its summary is still shown; mark the run.
    if [ "$(wc -l <"$summary")" -gt "$before" ]; then
      tail -1 "$summary" | RUN=$run node -e '
        const l = JSON.parse(require("fs").readFileSync(0, "utf8"));
        l.run = Number(process.env.RUN);
        console.log(JSON.stringify(l));' >"$summary.tmp"
      head -n "$before" "$summary" >"$summary.all"
      cat "$summary.tmp" >>"$summary.all"
      mv "$summary.all" "$summary"
      rm -f "$summary.tmp"
    fi
  done
done

echo
echo "$jobs jobs due over 10 s from 5 s after submission begins; CPU per job in µs"
node -e '
  const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").filter(Boolean);
  const rows = lines.map((l) => JSON.parse(l));
  rows.sort((a, b) => (a.side + a.handler + String(a.concurrency).padStart(4, "0") + a.run)
    .localeCompare(b.side + b.handler + String(b.concurrency).padStart(4, "0") + b.run));
  console.log("| Side | Handler | Concurrency | Run | Executed/s | Lateness p50 / p99 | Lost / twice | CPU per job | by process |");
  console.log("|---|---|---|---|---|---|---|---|---|");
  for (const r of rows) {
    const split = Object.entries(r.cpu_us_by_process).map(([k, v]) => `${k} ${Math.round(v)}`).join(" + ");
    console.log(`| ${r.side} | ${r.handler} | ${r.concurrency} | ${r.run} | ${r.executed_per_s} | ${r.p50_ms} / ${r.p99_ms} ms | ${r.lost} / ${r.twice} | ${Math.round(r.cpu_us_per_job)} µs | ${split} |`);
  }' "$summary"
exit "$failed"
