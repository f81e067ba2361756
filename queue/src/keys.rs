//! Every Redis key the queue uses, built in one place.
//!
//! Keys of one queue share the hash tag `{prefix:q:queue}`, so each Lua script (which touches
//! the queued set, the processing lists, the delayed and monitoring sets, dedupe keys, the
//! fence and the dead-letter set of a single queue) stays within one slot and the layout works
//! unchanged on Redis Cluster. Execution history is per task and touched by plain commands
//! only, so it has a tag of its own (`{prefix:h:ns/task}`); the history across tasks is one
//! stream under its own tag (`{prefix:x}`). The worker event stream has its own tag too
//! (`{prefix:ev}`), and with sharded scheduling each shard's stream another
//! (`{prefix:ev:sN}`), so the shards' streams spread over a cluster; a shard's fence stays in
//! its queue's slot, which the enqueue checks it in. `docs/redis-layout.md` documents
//! each key; keep the two in step.

use ax_scheduler_core::ExecutionId;

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "ax";

/// Key builder for one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (e.g. `ax`).
    pub fn new(prefix: impl Into<String>) -> Self {
        Keys {
            prefix: prefix.into(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn tag(&self, queue: &str) -> String {
        // Braces inside the queue name would move the hash tag; names are validated to be
        // brace-free by the caller (`validate_name`), so this is only formatting.
        format!("{{{}:q:{}}}", self.prefix, queue)
    }

    /// Sorted set of messages waiting to be taken, scored by their order (an enqueue instant
    /// less the priority's head start, see `order.lua`): taken lowest score first.
    pub fn queued(&self, queue: &str) -> String {
        format!("{}:queued", self.tag(queue))
    }

    /// Set of the concurrency keys with executions gated on them (`take.lua` parks an
    /// execution whose key is at its limit in the key's list, [`Keys::held`]).
    pub fn held_keys(&self, queue: &str) -> String {
        format!("{}:heldkeys", self.tag(queue))
    }

    /// List of the executions gated on concurrency key `key`, in their order.
    pub fn held(&self, queue: &str, key: &str) -> String {
        format!("{}:held:{key}", self.tag(queue))
    }

    /// Hash of execution id -> order score of every unsettled message, so a message given
    /// back (reaped, released) returns to its place.
    pub fn order(&self, queue: &str) -> String {
        format!("{}:order", self.tag(queue))
    }

    /// The queue's order clock: the last enqueue instant handed out (µs), strictly
    /// increasing, so no two enqueues share an instant.
    pub fn clock(&self, queue: &str) -> String {
        format!("{}:clock", self.tag(queue))
    }

    /// List of wake tokens: every push into the queued set adds some, and a consumer with
    /// nothing to take blocks on it (a sorted set has no blocking atomic move).
    pub fn wake(&self, queue: &str) -> String {
        format!("{}:wake", self.tag(queue))
    }

    /// While [`Keys::legacy_ready`] is being moved: the last enqueue instant (µs) given to a
    /// moved message, so the next move keeps their order.
    pub fn legacy_moved(&self, queue: &str) -> String {
        format!("{}:ready:moved", self.tag(queue))
    }

    /// The ready list of earlier versions (LPUSH in, taken from the right). Takes move what
    /// it still holds into the queued set.
    pub fn legacy_ready(&self, queue: &str) -> String {
        format!("{}:ready", self.tag(queue))
    }

    /// List of messages a worker has taken and not yet settled.
    pub fn processing(&self, queue: &str, worker_id: &str) -> String {
        format!("{}:processing:{}", self.tag(queue), worker_id)
    }

    /// List of messages addressed to one worker (a broadcast fire's pieces), oldest first:
    /// that worker's takes move them before anything of the shared queue. `order.lua`
    /// (`ax_addressed`) builds the same name for a due retry; keep the two in step.
    pub fn addressed(&self, queue: &str, worker_id: &str) -> String {
        format!("{}:addressed:{}", self.tag(queue), worker_id)
    }

    /// Wake tokens of one worker alone: an addressed message adds one, and the worker's
    /// blocking wait watches this list beside the queue's (`ax_worker_wake` in `order.lua`).
    pub fn worker_wake(&self, queue: &str, worker_id: &str) -> String {
        format!("{}:wake:{}", self.tag(queue), worker_id)
    }

    /// List of addressed messages whose worker is gone (reaped, stopped, or never there
    /// when the message came): no other worker may run them, so a live worker ends each
    /// failed, as its own attempt's end would be recorded.
    pub fn orphaned(&self, queue: &str) -> String {
        format!("{}:orphaned", self.tag(queue))
    }

    /// The workers a broadcast fire was addressed to (JSON list of ids, with the dedupe TTL),
    /// fixed by the first leader that sent it: a successor that lost the fire's progress
    /// addresses it the same way.
    pub fn fanout_workers(&self, queue: &str, fanout_id: ExecutionId) -> String {
        format!("{}:fanout:{}", self.tag(queue), fanout_id)
    }

    /// Sorted set of worker ids that took from this queue, scored by their last heartbeat.
    pub fn workers(&self, queue: &str) -> String {
        format!("{}:workers", self.tag(queue))
    }

    /// A worker's heartbeat (string with an expiry).
    pub fn heartbeat(&self, queue: &str, worker_id: &str) -> String {
        format!("{}:worker:{}", self.tag(queue), worker_id)
    }

    /// Sorted set of messages waiting for a retry, scored by due time.
    pub fn delayed(&self, queue: &str) -> String {
        format!("{}:delayed", self.tag(queue))
    }

    /// Sorted set of scheduled executions' ids, scored by due time (see `scheduled.rs`).
    pub fn scheduled(&self, queue: &str) -> String {
        format!("{}:scheduled", self.tag(queue))
    }

    /// Hash of scheduled executions' messages, by execution id.
    pub fn scheduled_jobs(&self, queue: &str) -> String {
        format!("{}:scheduled:msgs", self.tag(queue))
    }

    /// List a token is pushed to when the scheduled set gets an earlier head: promoters
    /// block on it until the head is due.
    pub fn scheduled_wake(&self, queue: &str) -> String {
        format!("{}:scheduled:wake", self.tag(queue))
    }

    /// Sorted set of execution ids in the ready and processing lists, scored by enqueue time.
    pub fn monitor(&self, queue: &str) -> String {
        format!("{}:monitor", self.tag(queue))
    }

    /// Dedupe marker of one execution identity (string with an expiry): run-now executions
    /// and idempotency keys.
    pub fn dedupe(&self, queue: &str, identity: &str) -> String {
        format!("{}:dedupe:{}", self.tag(queue), identity)
    }

    /// A task's fire mark: the newest scheduled fire instant enqueued (string with an
    /// expiry), which dedupes its scheduled fires.
    pub fn fired(&self, queue: &str, namespace: &str, task_id: &str) -> String {
        format!("{}:fired:{}/{}", self.tag(queue), namespace, task_id)
    }

    /// Newest fencing token this queue has seen from the owners of scheduling `shard`
    /// (`None`: the one leader of an unsharded install). Each shard has a fence of its own,
    /// since the tokens of different shards are unrelated numbers: one shard's higher token
    /// must not refuse another shard's owner. In the queue's slot, as the enqueue checks it.
    pub fn fence(&self, queue: &str, shard: Option<u32>) -> String {
        match shard {
            None => format!("{}:fence", self.tag(queue)),
            Some(s) => format!("{}:fence:s{s}", self.tag(queue)),
        }
    }

    /// The etcd cluster id whose tokens [`Keys::fence`] of the same queue and shard holds.
    pub fn fence_owner(&self, queue: &str, shard: Option<u32>) -> String {
        format!("{}:owner", self.fence(queue, shard))
    }

    /// Sorted set of dead-letter entry ids, scored by the time they were dead-lettered.
    pub fn dlq(&self, queue: &str) -> String {
        format!("{}:dlq", self.tag(queue))
    }

    /// Hash of dead-letter entry id -> entry JSON.
    pub fn dlq_entries(&self, queue: &str) -> String {
        format!("{}:dlq:entries", self.tag(queue))
    }

    /// The execution a dead letter was requeued as (string with an expiry, the execution
    /// history's retention), so the old execution's story names the new one.
    pub fn requeued_as(&self, queue: &str, execution_id: ExecutionId) -> String {
        format!("{}:requeued:{execution_id}", self.tag(queue))
    }

    /// Which execution of a task is active (string with an expiry), for the overlap policy:
    /// set by the enqueue of a `forbid`/`replace` fire, cleared by that execution's final
    /// settle. In the queue's slot, since the enqueue and settle scripts touch it.
    pub fn active(&self, queue: &str, namespace: &str, task_id: &str) -> String {
        format!("{}:active:{}/{}", self.tag(queue), namespace, task_id)
    }

    /// An operator's kill order for one execution (string with an expiry): every worker
    /// running or about to run that execution stops it, and a retry of it is not scheduled.
    /// Per execution rather than a set, so orders expire on their own.
    pub fn kill(&self, queue: &str, execution_id: ExecutionId) -> String {
        format!("{}:kill:{}", self.tag(queue), execution_id)
    }

    /// The record of an execution whose attempt waits for (or waited for) a completion
    /// reported through the API (`http.async`): hash of its attempt, state, token hashes per
    /// attempt, each attempt's end, the awaiting message, deadline and last progress. Kept a
    /// while after the end (with an expiry), so a repeated completion is recognised.
    pub fn awaiting(&self, queue: &str, execution_id: ExecutionId) -> String {
        format!("{}:awaiting:{}", self.tag(queue), execution_id)
    }

    /// Sorted set of execution ids waiting for their completion, scored by the deadline a
    /// completion or progress report must come by.
    pub fn awaiting_due(&self, queue: &str) -> String {
        format!("{}:awaiting", self.tag(queue))
    }

    /// The queue's end log (stream): each attempt's end, appended by the script that settles
    /// its message, until a relay has written it to the event stream and the history. In
    /// the queue's slot, since the settle scripts append to it.
    pub fn ends(&self, queue: &str) -> String {
        format!("{}:ends", self.tag(queue))
    }

    /// Which worker sweeps the queue's end log (string with an expiry), so that old
    /// entries are relayed by one worker rather than by every worker of the queue.
    pub fn ends_sweeper(&self, queue: &str) -> String {
        format!("{}:ends:sweeper", self.tag(queue))
    }

    /// Present while the queue is paused: workers take nothing from it.
    pub fn paused(&self, queue: &str) -> String {
        format!("{}:paused", self.tag(queue))
    }

    fn events_tag(&self, shard: Option<u32>) -> String {
        match shard {
            None => format!("{{{}:ev}}", self.prefix),
            Some(s) => format!("{{{}:ev:s{s}}}", self.prefix),
        }
    }

    /// Stream of execution events (started, finished) from workers to the owner of
    /// scheduling `shard` (`None`: the one leader of an unsharded install), read through a
    /// consumer group. Each shard's stream has a hash tag of its own, so on a Redis Cluster
    /// the shards' event traffic spreads over the nodes.
    pub fn events(&self, shard: Option<u32>) -> String {
        format!("{}:stream", self.events_tag(shard))
    }

    /// The list that carried the events before the stream; the leader moves what is left in
    /// it into the stream. In the stream's slot, since one script touches both. Only the
    /// unsharded stream ever had one: a shard's name is a key nothing writes.
    pub fn legacy_events(&self, shard: Option<u32>) -> String {
        format!("{}:events", self.events_tag(shard))
    }

    /// Stream of every task's attempts (the execution history across tasks), trimmed by age
    /// and count. One stream, so one slot: a query across namespaces reads one key in
    /// order instead of merging many.
    pub fn executions(&self) -> String {
        format!("{{{}:x}}:executions", self.prefix)
    }

    /// Capped list of a task's recent executions, newest first.
    pub fn history(&self, namespace: &str, task_id: &str) -> String {
        format!("{{{}:h:{}/{}}}:history", self.prefix, namespace, task_id)
    }
}

impl Default for Keys {
    fn default() -> Self {
        Keys::new(DEFAULT_PREFIX)
    }
}

/// Whether `name` can be used inside a key (queue names, worker ids, prefixes): non-empty,
/// no braces (they would move the hash tag), no whitespace.
pub fn validate_name(name: &str) -> bool {
    !name.is_empty()
        && !name
            .chars()
            .any(|c| c == '{' || c == '}' || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = key[open..].find('}').unwrap() + open;
        &key[open + 1..close]
    }

    #[test]
    fn one_queue_shares_one_hash_tag() {
        let k = Keys::new("ax");
        let q = "default";
        let all = [
            k.queued(q),
            k.order(q),
            k.clock(q),
            k.wake(q),
            k.legacy_ready(q),
            k.legacy_moved(q),
            k.processing(q, "w1"),
            k.workers(q),
            k.heartbeat(q, "w1"),
            k.delayed(q),
            k.monitor(q),
            k.dedupe(q, "run:1"),
            k.fired(q, "ns", "t"),
            k.fence(q, None),
            k.fence_owner(q, None),
            k.fence(q, Some(3)),
            k.fence_owner(q, Some(3)),
            k.dlq(q),
            k.dlq_entries(q),
            k.kill(q, ExecutionId::from_u128(1)),
            k.paused(q),
            k.awaiting(q, ExecutionId::from_u128(1)),
            k.awaiting_due(q),
            k.addressed(q, "w1"),
            k.worker_wake(q, "w1"),
            k.orphaned(q),
            k.fanout_workers(q, ExecutionId::from_u128(2)),
        ];
        for key in &all {
            assert_eq!(slot_tag(key), "ax:q:default", "{key}");
        }
        assert_eq!(k.queued(q), "{ax:q:default}:queued");
        assert_eq!(k.legacy_ready(q), "{ax:q:default}:ready");
        assert_eq!(k.processing(q, "w1"), "{ax:q:default}:processing:w1");
        assert_eq!(slot_tag(&k.history("ns", "t")), "ax:h:ns/t");
        assert_eq!(k.executions(), "{ax:x}:executions");
        // Unsharded names are those of one-leader installs; a shard's are apart from them
        // and from each other's.
        assert_eq!(k.fence(q, None), "{ax:q:default}:fence");
        assert_eq!(k.fence_owner(q, None), "{ax:q:default}:fence:owner");
        assert_eq!(k.fence(q, Some(3)), "{ax:q:default}:fence:s3");
        assert_eq!(k.fence_owner(q, Some(3)), "{ax:q:default}:fence:s3:owner");
        assert_ne!(k.fence(q, Some(0)), k.fence(q, None));
        assert_eq!(k.events(None), "{ax:ev}:stream");
        assert_eq!(k.legacy_events(None), "{ax:ev}:events");
        assert_eq!(k.events(Some(3)), "{ax:ev:s3}:stream");
        assert_eq!(slot_tag(&k.legacy_events(Some(3))), "ax:ev:s3");
    }

    /// The keys each script is given (as its header lists them), for one queue, one worker,
    /// one execution and one task; keys a script builds itself come from the tag of its
    /// first key (`ax_tag`), so they are in its slot by construction.
    fn script_keys(k: &Keys) -> Vec<(&'static str, Vec<String>)> {
        let (q, w, e) = ("default", "w1", ExecutionId::from_u128(1));
        let active = k.active(q, "ns", "t");
        vec![
            (
                "enqueue_many",
                vec![
                    k.queued(q),
                    k.monitor(q),
                    k.fence(q, None),
                    k.order(q),
                    k.clock(q),
                    k.wake(q),
                    k.workers(q),
                    k.orphaned(q),
                    k.fired(q, "ns", "t"),
                    active.clone(),
                    k.dedupe(q, "run:1"),
                    active.clone(),
                ],
            ),
            // A shard's enqueue: its fence in place of the unsharded one.
            ("enqueue_many", vec![k.queued(q), k.fence(q, Some(1))]),
            (
                "advance_fence",
                vec![k.fence(q, None), k.fence_owner(q, None)],
            ),
            (
                "advance_fence",
                vec![k.fence(q, Some(2)), k.fence_owner(q, Some(2))],
            ),
            (
                "take",
                vec![
                    k.queued(q),
                    k.processing(q, w),
                    k.paused(q),
                    k.legacy_ready(q),
                    k.order(q),
                    k.clock(q),
                    k.wake(q),
                    k.legacy_moved(q),
                    k.addressed(q, w),
                    k.worker_wake(q, w),
                ],
            ),
            (
                "ack",
                vec![
                    k.processing(q, w),
                    k.monitor(q),
                    k.order(q),
                    k.queued(q),
                    k.wake(q),
                    k.ends(q),
                    active.clone(),
                ],
            ),
            (
                "retry_later",
                vec![
                    k.processing(q, w),
                    k.monitor(q),
                    k.delayed(q),
                    k.kill(q, e),
                    active.clone(),
                    k.order(q),
                    k.queued(q),
                    k.wake(q),
                    k.ends(q),
                ],
            ),
            ("sweep_ends", vec![k.ends(q), k.ends_sweeper(q)]),
            (
                "schedule_many",
                vec![
                    k.scheduled(q),
                    k.scheduled_jobs(q),
                    k.scheduled_wake(q),
                    k.dedupe(q, "key:ns:k"),
                ],
            ),
            (
                "promote_scheduled",
                vec![
                    k.scheduled(q),
                    k.scheduled_jobs(q),
                    k.queued(q),
                    k.monitor(q),
                    k.order(q),
                    k.clock(q),
                    k.wake(q),
                ],
            ),
            (
                "cancel_scheduled",
                vec![k.scheduled(q), k.scheduled_jobs(q)],
            ),
            (
                "reschedule",
                vec![k.scheduled(q), k.scheduled_jobs(q), k.scheduled_wake(q)],
            ),
            (
                "promote_due",
                vec![
                    k.delayed(q),
                    k.queued(q),
                    k.monitor(q),
                    k.order(q),
                    k.clock(q),
                    k.wake(q),
                    k.workers(q),
                    k.orphaned(q),
                ],
            ),
            (
                "reap",
                vec![
                    k.queued(q),
                    k.workers(q),
                    k.processing(q, w),
                    k.heartbeat(q, w),
                    k.order(q),
                    k.clock(q),
                    k.wake(q),
                    k.addressed(q, w),
                    k.orphaned(q),
                    k.worker_wake(q, w),
                ],
            ),
            (
                "dead_letter",
                vec![
                    k.processing(q, w),
                    k.monitor(q),
                    k.dlq(q),
                    k.dlq_entries(q),
                    active.clone(),
                    k.order(q),
                    k.queued(q),
                    k.wake(q),
                    k.ends(q),
                ],
            ),
            (
                "dlq_requeue",
                vec![
                    k.dlq(q),
                    k.dlq_entries(q),
                    k.queued(q),
                    k.monitor(q),
                    k.order(q),
                    k.clock(q),
                    k.wake(q),
                    k.requeued_as(q, ExecutionId::from(uuid::Uuid::nil())),
                ],
            ),
            (
                "release",
                vec![
                    k.processing(q, w),
                    k.queued(q),
                    k.order(q),
                    k.clock(q),
                    k.wake(q),
                    k.addressed(q, w),
                    k.orphaned(q),
                    k.worker_wake(q, w),
                ],
            ),
            (
                "deregister",
                vec![
                    k.processing(q, w),
                    k.workers(q),
                    k.heartbeat(q, w),
                    k.addressed(q, w),
                    k.orphaned(q),
                    k.worker_wake(q, w),
                ],
            ),
            ("read_events", vec![k.events(None), k.legacy_events(None)]),
            (
                "read_events",
                vec![k.events(Some(5)), k.legacy_events(Some(5))],
            ),
            ("dlq_trim", vec![k.dlq(q), k.dlq_entries(q)]),
            (
                "kill",
                vec![
                    k.queued(q),
                    k.delayed(q),
                    k.monitor(q),
                    k.kill(q, e),
                    active.clone(),
                    k.legacy_ready(q),
                    k.order(q),
                    k.orphaned(q),
                ],
            ),
            ("take_orphans", vec![k.orphaned(q), k.processing(q, w)]),
            (
                "find",
                vec![
                    k.queued(q),
                    k.delayed(q),
                    k.legacy_ready(q),
                    k.processing(q, w),
                    k.processing(q, "w2"),
                    k.addressed(q, w),
                    k.orphaned(q),
                ],
            ),
            (
                "live_tasks",
                vec![
                    k.queued(q),
                    k.delayed(q),
                    k.legacy_ready(q),
                    k.ends(q),
                    k.awaiting_due(q),
                    k.processing(q, w),
                    k.addressed(q, w),
                    k.orphaned(q),
                ],
            ),
            ("history_page", vec![k.executions()]),
            ("awaiting_open", vec![k.awaiting(q, e)]),
            (
                "awaiting_start",
                vec![
                    k.processing(q, w),
                    k.awaiting(q, e),
                    k.awaiting_due(q),
                    k.kill(q, e),
                    k.monitor(q),
                    k.order(q),
                    k.queued(q),
                    k.wake(q),
                ],
            ),
            ("awaiting_close", vec![k.awaiting(q, e)]),
            (
                "awaiting_end",
                vec![
                    k.awaiting(q, e),
                    k.awaiting_due(q),
                    k.delayed(q),
                    k.dlq(q),
                    k.dlq_entries(q),
                    active,
                ],
            ),
            (
                "awaiting_progress",
                vec![k.awaiting(q, e), k.awaiting_due(q)],
            ),
            // MULTI/EXEC transactions are kept to one slot as scripts are.
            (
                "reseat_fence",
                vec![k.fence(q, None), k.fence_owner(q, None)],
            ),
            (
                "reseat_fence",
                vec![k.fence(q, Some(2)), k.fence_owner(q, Some(2))],
            ),
            ("dlq_purge", vec![k.dlq(q), k.dlq_entries(q)]),
        ]
    }

    /// The names of the `.lua` files under `dir`, at any depth.
    fn lua_files(dir: &std::path::Path) -> Vec<String> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.extend(lua_files(&path));
            } else if path.extension().is_some_and(|e| e == "lua") {
                let stem = path.file_stem().unwrap().to_str().unwrap();
                out.push(stem.to_owned());
            }
        }
        out
    }

    #[test]
    fn every_script_touches_one_cluster_slot() {
        let k = Keys::new("ax");
        let scripts = script_keys(&k);
        let seen: Vec<&str> = scripts.iter().map(|(name, _)| *name).collect();
        // Every script file has its key set here (a new script must be added), wherever
        // beside its caller it sits.
        let files = lua_files(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        )));
        assert!(files.len() > 20, "found only {files:?}");
        for name in &files {
            assert!(
                name == "order" || seen.contains(&name.as_str()),
                "no key set for {name}.lua"
            );
        }
        for (name, keys) in &scripts {
            let slot = crate::conn::slot(keys[0].as_bytes());
            for key in keys {
                assert_eq!(crate::conn::slot(key.as_bytes()), slot, "{name}: {key}");
            }
        }
        // Keys of different queues are apart (the test would pass for a layout that put
        // everything in one slot, which would make a cluster pointless).
        assert_ne!(
            crate::conn::slot(k.queued("a").as_bytes()),
            crate::conn::slot(k.queued("b").as_bytes())
        );
        // So are the event streams of different shards (each shard's owner reads its own).
        let mut streams: Vec<u16> = [None, Some(0), Some(1), Some(2), Some(3)]
            .into_iter()
            .map(|shard| crate::conn::slot(k.events(shard).as_bytes()))
            .collect();
        streams.sort_unstable();
        streams.dedup();
        assert_eq!(streams.len(), 5, "event streams share a slot");
        // A partitioned queue's partitions each have a slot of their own, and every
        // partition's scripts stay in its slot (the keys above come from any name).
        let mut partitions: Vec<u16> = (0..8)
            .map(|p| crate::partition_name("hot", p))
            .map(|q| crate::conn::slot(k.queued(&q).as_bytes()))
            .collect();
        assert_eq!(
            crate::conn::slot(
                k.fence(&crate::partition_name("hot", 3), Some(1))
                    .as_bytes()
            ),
            crate::conn::slot(k.queued(&crate::partition_name("hot", 3)).as_bytes())
        );
        partitions.sort_unstable();
        partitions.dedup();
        assert_eq!(partitions.len(), 8, "partitions share a slot");
    }

    #[test]
    fn names_with_braces_are_refused() {
        assert!(validate_name("default"));
        assert!(!validate_name("a{b"));
        assert!(!validate_name(""));
        assert!(!validate_name("a b"));
    }
}
