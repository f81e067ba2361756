// The BullMQ side of the e2e bench's peer comparison (`AX_BENCH_PEER=bullmq`, see the header of
// `engine-bin/benches/e2e.rs`). The bench installs this folder's pinned packages with `npm ci`
// into a folder under `target/` and runs this script twice against a private Redis:
//
//   node bullmq.mjs worker  --redis URL --queue NAME --jobs N --concurrency C --deadline MS
//   node bullmq.mjs produce --redis URL --queue NAME --jobs N --offset MS --spread MS
//
// The worker runs a BullMQ `Worker` with an in-process no-op processor and records, per job,
// its due (`job.data.d`, epoch ms) and when the processor started (`Date.now()`). It prints
// `{"event":"ready"}` once connected, `{"event":"done"}` once N distinct jobs have started,
// and on the end of its stdin (or at the deadline) closes the worker and prints its summary
// as one JSON line: distinct jobs started, executions, duplicates, lost, lateness (start minus
// due) p50 / p99 / max in ms, first and last start, executions per second from the first to
// the last start.
//
// The producer is a separate process, so that its CPU is not counted against the worker (the
// ax side's writer is the bench itself): it adds N delayed jobs in bulks of 128, 4 in flight,
// each due at `start + offset + r % spread` (start: when it begins submitting) with the bench's own xorshift64* sequence, so both
// sides run the same due times. It prints `{"event":"registered", ...}` with its own CPU time.
//
// Jobs use BullMQ's default options (completed jobs are kept, as ax keeps its history).

import { Queue, Worker } from "bullmq";

function args() {
  const out = {};
  const argv = process.argv.slice(3);
  for (let i = 0; i + 1 < argv.length; i += 2) {
    out[argv[i].replace(/^--/, "")] = argv[i + 1];
  }
  return out;
}

function connection(url) {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null };
}

function say(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(Math.max(rank, 1), sorted.length) - 1];
}

// The bench's generator (xorshift64*, seed 0x9E3779B97F4A7C15), in BigInt.
function* dueOffsets(n, spread) {
  const mask = (1n << 64n) - 1n;
  let s = 0x9e3779b97f4a7c15n;
  for (let i = 0; i < n; i++) {
    s ^= s >> 12n;
    s ^= (s << 25n) & mask;
    s ^= s >> 27n;
    const r = (s * 0x2545f4914f6cdd1dn) & mask;
    yield Number(r % BigInt(spread));
  }
}

async function produce(a) {
  const n = Number(a.jobs);
  const spread = Number(a.spread);
  const queue = new Queue(a.queue, { connection: connection(a.redis) });
  await queue.waitUntilReady();
  // Submission begins now: the first due is `offset` later.
  const started = Date.now();
  const base = started + Number(a.offset);
  const jobs = [];
  let i = 0;
  for (const off of dueOffsets(n, spread)) {
    jobs.push({ i, d: base + off });
    i++;
  }
  const BATCH = 128;
  let next = 0;
  async function writer() {
    for (;;) {
      const from = next;
      next += BATCH;
      if (from >= jobs.length) return;
      const now = Date.now();
      await queue.addBulk(
        jobs.slice(from, from + BATCH).map((j) => ({
          name: "noop",
          data: j,
          opts: { delay: Math.max(0, j.d - now) },
        })),
      );
    }
  }
  await Promise.all([writer(), writer(), writer(), writer()]);
  const ms = Date.now() - started;
  await queue.close();
  const cpu = process.cpuUsage();
  say({ event: "registered", jobs: n, ms, cpu_ms: (cpu.user + cpu.system) / 1000 });
}

async function work(a) {
  const n = Number(a.jobs);
  const deadline = Number(a.deadline);
  const starts = new Map();
  let executions = 0;
  let doneSaid = false;
  const worker = new Worker(
    a.queue,
    async (job) => {
      const at = Date.now();
      executions++;
      const seen = starts.get(job.id);
      if (seen === undefined) {
        starts.set(job.id, [job.data.d, at, 1]);
      } else {
        seen[2]++;
      }
      if (!doneSaid && starts.size >= n) {
        doneSaid = true;
        say({ event: "done" });
      }
    },
    { connection: connection(a.redis), concurrency: Number(a.concurrency) },
  );
  worker.on("error", (e) => process.stderr.write(`worker error: ${e}\n`));
  await worker.waitUntilReady();
  say({ event: "ready" });

  await new Promise((resolve) => {
    process.stdin.on("end", resolve);
    process.stdin.on("close", resolve);
    process.stdin.resume();
    setTimeout(resolve, Math.max(0, deadline - Date.now()));
  });
  await worker.close();

  const lateness = [];
  let first = Infinity;
  let last = -Infinity;
  let duplicates = 0;
  for (const [due, at, count] of starts.values()) {
    lateness.push(at - due);
    first = Math.min(first, at);
    last = Math.max(last, at);
    if (count > 1) duplicates++;
  }
  lateness.sort((x, y) => x - y);
  const span = (last - first) / 1000;
  say({
    event: "summary",
    jobs: n,
    started: starts.size,
    executions,
    duplicates,
    lost: n - starts.size,
    p50_ms: percentile(lateness, 50),
    p99_ms: percentile(lateness, 99),
    max_ms: lateness.length ? lateness[lateness.length - 1] : 0,
    first_start_ms: starts.size ? first : 0,
    last_start_ms: starts.size ? last : 0,
    executed_per_s: span > 0 ? starts.size / span : 0,
  });
  process.exit(0);
}

const mode = process.argv[2];
if (mode === "produce") {
  await produce(args());
} else if (mode === "worker") {
  await work(args());
} else {
  process.stderr.write("usage: node bullmq.mjs worker|produce --redis URL ...\n");
  process.exit(2);
}
