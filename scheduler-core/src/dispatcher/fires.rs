//! Fires come due and not yet dispatched: the ready queue, behind the optional rate limit.
//!
//! The queue and the token bucket are one thing to the rest of the dispatcher: a fire may
//! leave only while a token is there, but the token is spent only once the fire is really
//! dispatched (a stale or skipped fire costs none), so popping and spending are two calls.

use crate::limiter::TokenBucket;
use crate::ready::ReadyQueue;
use crate::time::UtcMillis;

use super::armed::{Armed, FireKind, ReadyFire};
use super::DispatcherConfig;

#[derive(Debug)]
pub(super) struct ReadyFires {
    queue: ReadyQueue<ReadyFire>,
    limiter: Option<TokenBucket>,
}

impl ReadyFires {
    pub(super) fn new(config: &DispatcherConfig, now: UtcMillis) -> Self {
        ReadyFires {
            queue: ReadyQueue::new(config.ready.clone()),
            limiter: config
                .rate_limit
                .map(|(rate, burst)| TokenBucket::new(rate, burst, now)),
        }
    }

    /// Fires waiting.
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Queues a fire of `task` (under its current generation and priority).
    pub(super) fn push(
        &mut self,
        task: &Armed,
        fire_at: UtcMillis,
        kind: FireKind,
        now: UtcMillis,
    ) {
        task.queued.set(task.queued.get().saturating_add(1));
        let fire = ReadyFire {
            key: std::sync::Arc::clone(&task.key),
            born: task.born,
            fire_at,
            kind,
            generation: task.generation,
        };
        self.queue.push(fire, task.spec.priority, now);
    }

    /// The next fire, if one waits and the rate limit lets it go now.
    pub(super) fn pop(&mut self, now: UtcMillis) -> Option<ReadyFire> {
        if let Some(bucket) = &mut self.limiter {
            if self.queue.is_empty() || bucket.next_token_at(now) > now {
                return None;
            }
        }
        self.queue.pop(now)
    }

    /// Spends the token of a fire [`pop`](Self::pop) let go and that is dispatched.
    pub(super) fn spend(&mut self, now: UtcMillis) {
        if let Some(bucket) = &mut self.limiter {
            // Checked non-empty with a token in `pop`; taking cannot fail in between.
            bucket.try_take(now);
        }
    }

    /// When a waiting fire may leave: now, or at the next token; `None` with none waiting.
    pub(super) fn next_wakeup(&mut self, now: UtcMillis) -> Option<UtcMillis> {
        if self.queue.is_empty() {
            return None;
        }
        Some(match &mut self.limiter {
            Some(bucket) => bucket.next_token_at(now),
            None => now,
        })
    }
}
