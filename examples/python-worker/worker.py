#!/usr/bin/env python3
"""A small ax worker in Python: the protocol of docs/worker-protocol.md, end to end.

It serves one queue, one execution at a time. Every change of queue state goes through the
repository's own Lua scripts (under queue/src/, each beside the Rust module that calls it),
loaded from disk with `order.lua` prepended where the Rust side prepends it, so this worker
cannot drift from the layout the Rust worker uses. It writes the same execution events and history entries, so the leader's task states,
`ax history` and `ax task history` show its attempts like any other.

The handler is a demonstration: the payload `{"sleep_ms": N, "fail": true|false,
"fail_attempts": K}` sleeps N ms, then fails when `fail` is true, and in its first K
attempts. Replace `run_handler` with real work.

Settings (arguments override the environment):
  --redis URL        AX_REDIS_URL          redis://127.0.0.1:6379
  --prefix P         AX_REDIS_KEY_PREFIX   ax
  --queue Q          AX_QUEUE              default
  --worker-id ID     AX_WORKER_ID          py-<host>-<pid>
  --lua-dir DIR      AX_LUA_DIR            queue/src beside this file's repository (the
                                           scripts are found in it at any depth)

SIGTERM or SIGINT: stop taking, give the message in hand back to its place in the queue,
deregister, exit 0.
"""

import argparse
import copy
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid

try:
    import redis
except ImportError:  # pragma: no cover - the message is the point
    sys.stderr.write(
        "the `redis` package is missing: "
        "python3 -m pip install -r examples/python-worker/requirements.txt\n"
    )
    sys.exit(3)

# Settings that must match the Rust side (docs/worker-protocol.md, "Constants").
HEARTBEAT_INTERVAL = 1.0  # s
HEARTBEAT_TTL_MS = 5000
VISIBILITY_TIMEOUT_MS = 30_000
BLOCK_TIMEOUT = 1.0  # s
PAUSED_POLL = 0.25  # s
STOP_POLL = 0.25  # s
MAINTENANCE_INTERVAL = 0.25  # s
DEFAULT_PRIORITY = 5
AGING_STEP_US = 1_000_000  # redis.priority_aging, default 1 s
EVENTS_CAP = 100_000
HISTORY_CAP = 100
HISTORY_TRIM_EVERY = 8  # queue/src/history.rs
HISTORY_RETENTION_MS = 30 * 24 * 3600 * 1000
EXECUTION_HISTORY_RETENTION_MS = 7 * 24 * 3600 * 1000
EXECUTION_HISTORY_MAX_ENTRIES = 200_000
MAX_ERROR_LEN = 2048
KILLED = "killed by an operator"
REPLACED = "replaced by a newer execution"

# The scripts this worker runs, and whether the Rust side prepends `order.lua` to each
# (`ordered()` in queue/src/scripts.rs, used where a script puts messages in the queued set).
SCRIPTS = {
    "take": True,
    "ack": True,
    "retry_later": True,
    "dead_letter": True,
    "release": True,
    "promote_due": True,
    "reap": True,
    "deregister": False,
    "take_orphans": False,
    "sweep_ends": False,
}

# A record left in a queue's end log this long (its worker died before relaying it) is
# relayed by the one worker holding the queue's sweep (`END_RELAY_AFTER`, queue/src/ends.rs).
END_RELAY_AFTER_MS = 5000
SWEEPER_TTL_MS = 3000


def now_ms():
    return int(time.time() * 1000)


def compact(value):
    # Compact, key order kept: the scripts find fields in the text (`"execution_id":"`), and
    # a settle removes the message by its exact stored bytes.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --- durations (the Rust side writes humantime strings, or integers of milliseconds) -------

_UNITS_MS = {
    "ns": 1e-6, "nsec": 1e-6, "nanos": 1e-6,
    "us": 1e-3, "usec": 1e-3, "micros": 1e-3, "µs": 1e-3,
    "ms": 1, "msec": 1, "millis": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hr": 3_600_000, "hrs": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
    "w": 604_800_000, "week": 604_800_000, "weeks": 604_800_000,
    "M": 2_630_016_000, "month": 2_630_016_000, "months": 2_630_016_000,
    "y": 31_557_600_000, "year": 31_557_600_000, "years": 31_557_600_000,
}


def duration_ms(value):
    """A duration of the message (`"1h 30m"`, `"200ms"` or an integer of ms) in ms."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    total = 0.0
    parts = re.findall(r"(\d+)\s*([a-zA-Zµ]+)", value)
    if not parts:
        raise ValueError(f"not a duration: {value!r}")
    for number, unit in parts:
        total += int(number) * _UNITS_MS[unit]
    return total


# --- the retry decision (worker/src/retry.rs) ---------------------------------------------


def base_interval_ms(policy, retry):
    """The un-jittered wait before retry number `retry` (0 for the first)."""
    initial = duration_ms(policy["initial_interval"])
    cap = duration_ms(policy["max_interval"])
    multiplier = max(float(policy["multiplier"]), 1.0)
    wait = initial
    for _ in range(min(retry, 64)):
        wait = min(wait * multiplier, cap)
    return min(wait, cap)


def decide(policy, attempt, first_attempt_at, now):
    """(due_ms, None) to retry, or (None, reason) to give up."""
    max_retries = policy["max_retries"]
    if attempt >= max_retries:
        return None, f"retries exhausted ({attempt} of {max_retries})"
    jitter = min(max(float(policy.get("jitter", 0.0)), 0.0), 1.0)
    factor = random.uniform(1.0 - jitter, 1.0 + jitter) if jitter > 0 else 1.0
    wait = base_interval_ms(policy, attempt) * factor
    due = now + int(wait)
    budget = duration_ms(policy.get("max_elapsed"))
    if budget is not None and due > first_attempt_at + budget:
        spent = (now - first_attempt_at) / 1000
        return None, f"retry time budget spent ({spent}s of {budget / 1000}s)"
    return due, None


def shown_error(error):
    # The Rust side also masks credentials in URLs; this handler's errors carry none.
    data = error.encode("utf-8")
    if len(data) <= MAX_ERROR_LEN:
        return error
    end = MAX_ERROR_LEN - 40
    kept = data[:end].decode("utf-8", errors="ignore")
    return f"{kept}... ({len(data) - len(kept.encode('utf-8'))} bytes cut)"


# --- the worker --------------------------------------------------------------------------


class Stopped(Exception):
    """The attempt must end now: (outcome, error)."""

    def __init__(self, outcome, error=None):
        super().__init__(outcome)
        self.outcome = outcome
        self.error = error


def lua_files(lua_dir):
    """The Lua scripts under `lua_dir` by name (`take` for `.../consumer/take.lua`): each sits
    beside the Rust module that calls it, so they are spread over subfolders."""
    files = {}
    for root, _dirs, names in os.walk(lua_dir):
        for n in names:
            if n.endswith(".lua"):
                files.setdefault(n[: -len(".lua")], os.path.join(root, n))
    missing = [n for n in ["order", *SCRIPTS] if n not in files]
    if missing:
        raise SystemExit(f"no {', '.join(missing)} script under {lua_dir}")
    return files


class Worker:
    def __init__(self, url, prefix, queue, worker_id, lua_dir):
        for name in (prefix, queue, worker_id):
            if not name or re.search(r"[{}\s]", name):
                raise SystemExit(f"`{name}` must be non-empty without braces or spaces")
        self.r = redis.Redis.from_url(url, decode_responses=True)
        # BLPOP holds its connection: a client of its own, so the heartbeat never waits.
        self.blocking = redis.Redis.from_url(url, decode_responses=True)
        self.prefix, self.queue, self.id = prefix, queue, worker_id
        self.scripts = {}
        files = lua_files(lua_dir)
        order = open(files["order"], encoding="utf-8").read()
        for name, ordered in SCRIPTS.items():
            body = open(files[name], encoding="utf-8").read()
            # The same text as `ordered()` in scripts.rs, so the same SHA1 too.
            self.scripts[name] = self.r.register_script(f"{order}\n{body}" if ordered else body)
        self.stopping = threading.Event()
        self.beating = threading.Event()

    # Keys (queue/src/keys.rs).
    def k(self, suffix):
        return f"{{{self.prefix}:q:{self.queue}}}:{suffix}"

    def events_key(self, shard=None):
        # The stream of the scheduling shard whose owner enqueued the message; an unsharded
        # install's (no shard) keeps its one stream.
        if shard is None:
            return f"{{{self.prefix}:ev}}:stream"
        return f"{{{self.prefix}:ev:s{shard}}}:stream"

    def executions_key(self):
        return f"{{{self.prefix}:x}}:executions"

    def history_key(self, namespace, task_id):
        return f"{{{self.prefix}:h:{namespace}/{task_id}}}:history"

    def log(self, text):
        print(f"[{self.id}] {text}", file=sys.stderr, flush=True)

    # -- registration and heartbeat --

    def heartbeat(self):
        now = now_ms()
        pipe = self.r.pipeline(transaction=False)
        # Negated once stopping: alive, but no broadcast fire is addressed to it any more.
        beat = -now if self.stopping.is_set() else now
        pipe.set(self.k(f"worker:{self.id}"), beat, px=HEARTBEAT_TTL_MS)
        pipe.zadd(self.k("workers"), {self.id: now})
        pipe.execute()

    def heartbeat_loop(self):
        while not self.beating.wait(HEARTBEAT_INTERVAL):
            try:
                self.heartbeat()
            except redis.RedisError as e:
                self.log(f"heartbeat failed: {e}")

    def register(self):
        # Whatever an earlier process under this id left is given back first
        # (`Queue::recover_worker`): its heartbeat goes, then the reaper's script with a
        # cutoff no beat is after.
        self.r.delete(self.k(f"worker:{self.id}"))
        back = self.reap(self.id, 2**63 - 1, restart=True)
        if back > 0:
            self.log(f"gave back {back} message(s) an earlier process under this id held")
        self.r.zadd(self.k("workers"), {self.id: now_ms()}, nx=True)
        self.heartbeat()

    # -- maintenance: due retries and dead workers (every worker does it; scripts are safe
    #    to run from any number of workers at once) --

    def reap(self, worker, cutoff, restart=False):
        keys = [self.k("queued"), self.k("workers"), self.k(f"processing:{worker}"),
                self.k(f"worker:{worker}"), self.k("order"), self.k("clock"), self.k("wake"),
                self.k(f"addressed:{worker}"), self.k("orphaned"), self.k(f"wake:{worker}")]
        return self.scripts["reap"](
            keys, [worker, cutoff, AGING_STEP_US, DEFAULT_PRIORITY, "1" if restart else "0"])

    def maintain(self):
        now = now_ms()
        keys = [self.k("delayed"), self.k("queued"), self.k("monitor"), self.k("order"),
                self.k("clock"), self.k("wake"), self.k("workers"), self.k("orphaned")]
        while self.scripts["promote_due"](keys, [now, 500, AGING_STEP_US, DEFAULT_PRIORITY]) >= 500:
            pass
        cutoff = now - VISIBILITY_TIMEOUT_MS
        for worker in self.r.zrangebyscore(self.k("workers"), "-inf", cutoff):
            n = self.reap(worker, cutoff)
            if n > 0:
                self.log(f"gave back {n} message(s) of dead worker {worker}")
        self.end_orphans()
        self.relay_old_ends()

    def relay_old_ends(self):
        """Relays the end records a dead worker settled and did not relay (see `relay`)."""
        found = self.scripts["sweep_ends"](
            [self.k("ends"), self.k("ends:sweeper")],
            [self.id, SWEEPER_TTL_MS, END_RELAY_AFTER_MS, 500])
        for logged, text in zip(found[::2], found[1::2]):
            try:
                rec = json.loads(text)
                event = rec["event"]
            except (ValueError, KeyError, TypeError) as e:
                self.log(f"undecodable end record {logged} deleted: {e}")
                self.r.xdel(self.k("ends"), logged)
                continue
            self.relay(event, rec, logged)

    def end_orphans(self):
        """Ends failed the broadcast executions addressed to a worker that is gone: no other
        worker may run them (each runs its own copy), and their fire ends only once they do."""
        keys = [self.k("orphaned"), self.k(f"processing:{self.id}")]
        for raw in self.scripts["take_orphans"](keys, [100]):
            try:
                msg = json.loads(raw)
                msg["execution_id"], msg["namespace"], msg["task_id"]
            except (ValueError, KeyError, TypeError) as e:
                self.dead_letter_garbage(raw, str(e))
                continue
            worker = msg.get("target_worker", "")
            reason = f"worker {worker} is gone: a broadcast execution runs only on its worker"
            now = now_ms()
            self.report(msg, {"type": "started", "at": now})
            rec = self.end_record(msg, now, {"outcome": "failed", "error": reason}, worker)
            self.relay(msg, rec, self.dead_letter(raw, msg, reason, now, rec))

    # -- taking --

    def take_now(self):
        keys = [self.k("queued"), self.k(f"processing:{self.id}"), self.k("paused"),
                self.k("ready"), self.k("order"), self.k("clock"), self.k("wake"),
                self.k("ready:moved"), self.k(f"addressed:{self.id}"),
                self.k(f"wake:{self.id}")]
        # ARGV 4 and 5 are the queue's limits (`redis.limits` in ax.toml): 0, none here.
        paused, raws, hold, _waits = self.scripts["take"](
            keys, [1, AGING_STEP_US, DEFAULT_PRIORITY, 0, 0])
        return paused == 1, raws, hold

    def take(self):
        """At most one message as stored, or None after up to the block timeout."""
        paused, raws, hold = self.take_now()
        if paused:
            self.stopping.wait(PAUSED_POLL)
            return None
        if not raws:
            if hold > 0:
                self.stopping.wait(min(hold / 1000, BLOCK_TIMEOUT))
            elif self.blocking.blpop([self.k("wake"), self.k(f"wake:{self.id}")],
                                     timeout=BLOCK_TIMEOUT) is None:
                return None
            if self.stopping.is_set():
                return None
            paused, raws, hold = self.take_now()
        return raws[0] if raws and not paused else None

    # -- stop orders --

    def stop_order(self, msg):
        pipe = self.r.pipeline(transaction=False)
        pipe.exists(self.k(f"kill:{msg['execution_id']}"))
        pipe.get(self.k(f"active:{msg['namespace']}/{msg['task_id']}"))
        killed, holder = pipe.execute()
        if killed:
            return KILLED
        if msg.get("overlap") == "replace" and holder is not None and holder != msg["execution_id"]:
            return REPLACED
        return None

    # -- the handler --

    def run_handler(self, msg):
        """Runs the demonstration handler; raises on failure or Stopped."""
        payload = msg.get("payload") or {}
        deadline = time.monotonic() + msg["timeout_ms"] / 1000
        until = time.monotonic() + float(payload.get("sleep_ms", 0)) / 1000
        while True:
            left = until - time.monotonic()
            if self.stopping.is_set():
                raise Stopped("released")
            order = self.stop_order(msg)
            if order:
                raise Stopped("killed", order)
            if time.monotonic() >= deadline:
                raise Stopped("timed_out", f"timed out after {msg['timeout_ms']}ms")
            if left <= 0:
                break
            time.sleep(min(left, STOP_POLL, max(deadline - time.monotonic(), 0.001)))
        if payload.get("fail") or msg["attempt"] < int(payload.get("fail_attempts", 0)):
            # People count attempts from 1; the message's `attempt` is the index from 0.
            raise RuntimeError(payload.get("error", f"asked to fail (attempt {msg['attempt'] + 1})"))

    # -- settling (each with the attempt's end record: queue/src/ends.rs) --
    #
    # A settle script also appends the attempt's end record (its event and history entry)
    # to the queue's end log, in the same step: a worker that dies after settling leaves the
    # end there, where a live worker's maintenance relays it. The worker relays it itself
    # right after (`relay`). Each returns the record's end log id, or None when the message
    # was no longer taken (the reaper gave it back).

    def ack(self, raw, msg, rec):
        keys = [self.k(f"processing:{self.id}"), self.k("monitor"), self.k("order"),
                self.k("queued"), self.k("wake"), self.k("ends"),
                self.k(f"active:{msg['namespace']}/{msg['task_id']}")]
        (reply,) = self.scripts["ack"](
            keys, [raw, msg["execution_id"], concurrency_key(msg), compact(rec)])
        return self.logged(reply, "ack")

    def retry_later(self, raw, msg, error, now, due, recs):
        """Returns (1 scheduled or 2 killed meanwhile or 0 not taken, end log id)."""
        nxt = copy.deepcopy(msg)
        nxt.setdefault("previous_errors", []).append(
            {"attempt": msg["attempt"], "at": now, "error": error})
        nxt["attempt"] = msg["attempt"] + 1
        nxt["enqueued_at"] = now
        # A retry is a fresh delivery, even of an attempt the reaper gave back.
        nxt.pop("redelivered", None)
        eid = msg["execution_id"]
        keys = [self.k(f"processing:{self.id}"), self.k("monitor"), self.k("delayed"),
                self.k(f"kill:{eid}"), self.k(f"active:{msg['namespace']}/{msg['task_id']}"),
                self.k("order"), self.k("queued"), self.k("wake"), self.k("ends")]
        code, logged = self.scripts["retry_later"](
            keys, [raw, eid, compact(nxt), due, concurrency_key(msg),
                   compact(recs[0]), compact(recs[1])])
        return code, (as_text(logged) or None)

    def dead_letter(self, raw, msg, reason, now, rec):
        errors = list(msg.get("previous_errors", []))
        errors.append({"attempt": msg["attempt"], "at": now, "error": reason})
        entry = {
            "id": msg["execution_id"], "queue": msg["queue"], "namespace": msg["namespace"],
            "task_id": msg["task_id"], "reason": reason, "dead_lettered_at": now,
            "errors": errors, "message": msg,
        }
        keys = [self.k(f"processing:{self.id}"), self.k("monitor"), self.k("dlq"),
                self.k("dlq:entries"), self.k(f"active:{msg['namespace']}/{msg['task_id']}"),
                self.k("order"), self.k("queued"), self.k("wake"), self.k("ends")]
        reply = self.scripts["dead_letter"](
            keys, [raw, msg["execution_id"], compact(entry), now, msg["execution_id"],
                   concurrency_key(msg), compact(rec)])
        return self.logged(reply, "dead letter")

    def logged(self, reply, what):
        reply = as_text(reply)
        if reply == "0":
            self.log(f"{what} found the message gone (the reaper gave it back)")
            return None
        return None if reply == "1" else reply

    def release(self, raw, msg):
        keys = [self.k(f"processing:{self.id}"), self.k("queued"), self.k("order"),
                self.k("clock"), self.k("wake"), self.k(f"addressed:{self.id}"),
                self.k("orphaned"), self.k(f"wake:{self.id}")]
        return self.scripts["release"](
            keys, [raw, AGING_STEP_US, DEFAULT_PRIORITY, msg["execution_id"], concurrency_key(msg),
                   self.id])

    def fail(self, raw, msg, started, outcome, error, now):
        """Retries or dead-letters a failed attempt, with its end recorded, and relays it."""
        due, give_up = decide(msg["retry"], msg["attempt"], msg["first_attempt_at"], now)
        if due is not None:
            retrying = self.end_record(
                msg, started, {"outcome": outcome, "error": error, "retry_at": due})
            killed = self.end_record(msg, started, {"outcome": "killed", "error": KILLED})
            code, logged = self.retry_later(raw, msg, error, now, due, (retrying, killed))
            if code == 2:
                self.relay(msg, killed, logged)
                return
            self.log(f"{msg['task_id']} attempt {msg['attempt'] + 1} failed: {error}; retry at {due}")
            self.relay(msg, retrying, logged)
            return
        self.log(f"{msg['task_id']} attempt {msg['attempt'] + 1} failed: {error}; dead-lettering")
        rec = self.end_record(msg, started, {"outcome": outcome, "error": error})
        self.relay(msg, rec, self.dead_letter(raw, msg, f"{error} ({give_up})", now, rec))

    # -- reporting (queue/src/events.rs, queue/src/history.rs, queue/src/ends.rs) --

    def event(self, msg, kind):
        event = {
            "namespace": msg["namespace"], "task_id": msg["task_id"],
            "execution_id": msg["execution_id"], "fire_at": msg["fire_at"],
            "attempt": msg["attempt"], "kind": kind,
        }
        if msg.get("shard") is not None:
            event["shard"] = msg["shard"]
        return event

    def report(self, msg, kind, history=None, logged=None):
        """Writes an event (and the attempt's history entry) for the leader; with `logged`,
        then deletes the end record it came from in the queue's end log."""
        shard = msg.get("shard")
        pipe = self.r.pipeline(transaction=False)
        pipe.xadd(self.events_key(shard), {"e": compact(self.event(msg, kind))},
                  maxlen=EVENTS_CAP, approximate=True)
        if history is not None:
            text = compact(history)
            key = self.history_key(msg["namespace"], msg["task_id"])
            pipe.lpush(key, text)
            # One push in HISTORY_TRIM_EVERY trims (`trims_list` in queue/src/history.rs).
            if int(msg["execution_id"].replace("-", ""), 16) % HISTORY_TRIM_EVERY == 0:
                pipe.ltrim(key, 0, HISTORY_CAP - 1)
            pipe.pexpire(key, HISTORY_RETENTION_MS)
            cutoff = max(now_ms() - EXECUTION_HISTORY_RETENTION_MS, 0)
            label = "retrying" if history.get("retry_at") is not None else history["outcome"]
            pipe.execute_command(
                "XADD", self.executions_key(), "MINID", "~", cutoff, "*",
                "ns", msg["namespace"], "task", msg["task_id"], "out", label, "e", text)
            pipe.execute_command(
                "XTRIM", self.executions_key(), "MAXLEN", "~", EXECUTION_HISTORY_MAX_ENTRIES)
        pipe.execute()
        if logged is not None:
            # Only once the writes above are done: a record deleted first could be lost.
            self.r.xdel(self.k("ends"), logged)

    def end_record(self, msg, started, end, worker=None):
        """The attempt's end as the settle scripts record it (`EndRecord`): the leader's
        event and the history entry."""
        finished = now_ms()
        entry = {
            "execution_id": msg["execution_id"], "fire_at": msg["fire_at"],
            "started_at": started, "finished_at": finished,
            "lateness_ms": started - msg["fire_at"], "duration_ms": finished - started,
            **end,
            "worker": worker or self.id, "attempt": msg["attempt"], "queue": msg["queue"],
            "enqueued_at": msg["enqueued_at"], "first_enqueued_at": msg["first_attempt_at"],
        }
        for field in ("run_id", "fanout_id", "shard_index", "shard_total", "target_worker"):
            if msg.get(field) is not None:
                entry[field] = msg[field]
        kind = {"type": "finished", "at": finished, "end": end}
        return {"event": self.event(msg, kind), "history": entry}

    def relay(self, msg, rec, logged):
        """Writes a settled attempt's end for the leader and the history, then clears its
        end log record (`logged`, None when it is not in the log)."""
        self.report(msg, rec["event"]["kind"], rec.get("history"), logged)

    # -- one execution --

    def execute(self, raw):
        try:
            msg = json.loads(raw)
            msg["execution_id"], msg["namespace"], msg["task_id"]
        except (ValueError, KeyError, TypeError) as e:
            self.log(f"undecodable message, dead-lettering: {e}")
            self.dead_letter_garbage(raw, str(e))
            return
        started = now_ms()
        order = self.stop_order(msg)
        if order:
            rec = self.end_record(msg, started, {"outcome": "killed", "error": order})
            self.relay(msg, rec, self.ack(raw, msg, rec))
            return
        self.report(msg, {"type": "started", "at": started})
        if msg.get("handler") != "python":
            reason = f"unknown handler `{msg.get('handler')}`; this worker serves: [python]"
            rec = self.end_record(msg, started, {"outcome": "dead_lettered", "error": reason})
            self.relay(msg, rec, self.dead_letter(raw, msg, reason, now_ms(), rec))
            return
        try:
            self.run_handler(msg)
        except Stopped as s:
            if s.outcome == "released":
                self.release(raw, msg)
                self.log(f"released {msg['execution_id']} (stopping)")
                return  # not an end: the execution runs again elsewhere
            if s.outcome == "killed":
                rec = self.end_record(msg, started, {"outcome": "killed", "error": s.error})
                self.relay(msg, rec, self.ack(raw, msg, rec))
                return
            self.fail(raw, msg, started, s.outcome, s.error, now_ms())
            return
        except Exception as e:  # the handler's failure, whatever it is
            self.fail(raw, msg, started, "failed", shown_error(str(e) or type(e).__name__),
                      now_ms())
            return
        rec = self.end_record(msg, started, {"outcome": "succeeded"})
        self.relay(msg, rec, self.ack(raw, msg, rec))

    def dead_letter_garbage(self, raw, error):
        now = now_ms()
        entry_id = str(uuid.uuid4())
        entry = {
            "id": entry_id, "queue": self.queue, "namespace": "", "task_id": "",
            "reason": error, "dead_lettered_at": now,
            "errors": [{"attempt": 0, "at": now, "error": error}],
            "message": None, "raw": raw,
        }
        keys = [self.k(f"processing:{self.id}"), self.k("monitor"), self.k("dlq"),
                self.k("dlq:entries"), self.k("active:-/-"), self.k("order"),
                self.k("queued"), self.k("wake"), self.k("ends")]
        self.scripts["dead_letter"](keys, [raw, entry_id, compact(entry), now, "", "", ""])

    # -- life cycle --

    def run(self):
        self.register()
        beat = threading.Thread(target=self.heartbeat_loop, daemon=True)
        beat.start()
        self.log(f"serving queue {self.queue} under prefix {self.prefix}")
        next_maintenance = 0.0
        while not self.stopping.is_set():
            try:
                if time.monotonic() >= next_maintenance:
                    self.maintain()
                    next_maintenance = time.monotonic() + MAINTENANCE_INTERVAL
                raw = self.take()
                if raw is None:
                    continue
                if self.stopping.is_set():
                    self.release(raw, json.loads(raw))
                    break
                self.execute(raw)
            except redis.RedisError as e:
                # A settle that failed leaves the message in this worker's processing list;
                # a restart under the same id gives it back (see `register`).
                self.log(f"redis error: {e}; retrying in 1 s")
                self.stopping.wait(1.0)
        self.beating.set()
        beat.join()
        gone = self.scripts["deregister"](
            [self.k(f"processing:{self.id}"), self.k("workers"), self.k(f"worker:{self.id}"),
             self.k(f"addressed:{self.id}"), self.k("orphaned"), self.k(f"wake:{self.id}")],
            [self.id])
        self.log("deregistered" if gone == 1 else "still holds messages; the reaper gives them back")


def as_text(reply):
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def concurrency_key(msg):
    c = msg.get("concurrency")
    return c["key"] if isinstance(c, dict) and c.get("key") else ""


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_lua = os.path.join(here, "..", "..", "queue", "src")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", default=os.environ.get("AX_REDIS_URL", "redis://127.0.0.1:6379"))
    p.add_argument("--prefix", default=os.environ.get("AX_REDIS_KEY_PREFIX", "ax"))
    p.add_argument("--queue", default=os.environ.get("AX_QUEUE", "default"))
    p.add_argument("--worker-id", default=os.environ.get(
        "AX_WORKER_ID", f"py-{socket.gethostname()}-{os.getpid()}"))
    p.add_argument("--lua-dir", default=os.environ.get("AX_LUA_DIR", default_lua))
    a = p.parse_args()
    w = Worker(a.redis, a.prefix, a.queue, a.worker_id, a.lua_dir)

    def stop(signum, _frame):
        w.log(f"signal {signum}: stopping")
        w.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    w.run()


if __name__ == "__main__":
    main()
