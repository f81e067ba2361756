//! Whether a queue still has work of a task: what a leader asks before it takes a task's
//! missing end for lost (`live_tasks.lua` beside this file).
//!
//! A task state can say `RUNNING` while nothing in Redis will ever end it: the end was
//! written after its settle by a process that died (an API-side kill or completion), or
//! Redis lost the execution (a restart without persistence). The leader then asks the
//! queue, for the few tasks whose state has said so for long, whether any message, retry,
//! awaiting execution or unrelayed end record of theirs is left. One pass over the queue
//! answers for all of them, so the cost is one scan per queue per check, and only while a
//! state is in doubt.

use std::collections::HashSet;
use std::sync::LazyLock;

use redis::{AsyncCommands, Script};

use crate::error::Result;
use crate::queue::{check_queue, Queue};

/// `live_tasks.lua` (it puts nothing in the queued set: no order functions).
static LIVE_TASKS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("work/live_tasks.lua")));

impl Queue {
    /// Of `tasks` (namespace, id), those that have work in `queue` (any of its partitions):
    /// a message waiting, retrying, held by a worker or waiting for its completion, or an
    /// end record not yet relayed.
    pub async fn tasks_with_work(
        &self,
        queue: &str,
        tasks: &[(&str, &str)],
    ) -> Result<HashSet<(String, String)>> {
        check_queue(queue)?;
        let mut found = HashSet::new();
        if tasks.is_empty() {
            return Ok(found);
        }
        let names: Vec<String> = tasks.iter().map(|(ns, id)| format!("{ns}/{id}")).collect();
        for q in self.physical_queues(queue) {
            let k = self.keys();
            let mut conn = self.conn();
            let workers: Vec<String> = self
                .run("live_tasks (workers)", conn.zrange(k.workers(&q), 0, -1))
                .await?;
            let mut inv = LIVE_TASKS.prepare_invoke();
            inv.key(k.queued(&q))
                .key(k.delayed(&q))
                .key(k.legacy_ready(&q))
                .key(k.ends(&q))
                .key(k.awaiting_due(&q));
            for w in &workers {
                inv.key(k.processing(&q, w)).key(k.addressed(&q, w));
            }
            inv.key(k.orphaned(&q));
            for n in &names {
                inv.arg(n);
            }
            let live: Vec<String> = self.run("live_tasks", inv.invoke_async(&mut conn)).await?;
            for t in live {
                if let Some((ns, id)) = t.split_once('/') {
                    found.insert((ns.to_owned(), id.to_owned()));
                }
            }
        }
        Ok(found)
    }
}
