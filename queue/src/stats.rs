//! Monitoring reads: cheap figures of a queue for metrics, alerts and the API. Each physical
//! queue's figures come in one pipeline, and a partitioned queue's are summed over its
//! partitions, so a dashboard costs one round trip per partition whatever it shows.

use std::time::Duration;

use ax_scheduler_core::UtcMillis;
use redis::AsyncCommands;

use crate::error::{QueueError, Result};
use crate::queue::Queue;

/// Cheap monitoring figures of one queue, read in one round trip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages waiting to be taken.
    pub ready: u64,
    /// Messages enqueued and not yet settled (ready plus taken).
    pub unsettled: u64,
    /// Messages waiting for a retry.
    pub delayed: u64,
    /// Dead-letter entries.
    pub dead: u64,
    /// Age of the oldest unsettled message; `None` when there is none.
    pub oldest_age: Option<Duration>,
    /// Time since the newest heartbeat of a worker that takes from the queue; `None` when no
    /// worker is registered for it.
    pub last_worker_beat: Option<Duration>,
    /// An operator paused the queue: workers take nothing from it.
    pub paused: bool,
}

/// How long messages may wait in a queue without any worker's heartbeat before the queue
/// counts as unserved (see [`QueueStats::is_unserved`]).
pub const UNSERVED_AFTER: Duration = Duration::from_secs(30);

impl QueueStats {
    /// The figures of two partitions of one queue as one: counts add up, the oldest age is
    /// the older, the last beat the newer; paused when either is.
    pub fn merge(&self, other: &QueueStats) -> QueueStats {
        QueueStats {
            ready: self.ready + other.ready,
            unsettled: self.unsettled + other.unsettled,
            delayed: self.delayed + other.delayed,
            dead: self.dead + other.dead,
            oldest_age: self.oldest_age.max(other.oldest_age),
            last_worker_beat: match (self.last_worker_beat, other.last_worker_beat) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            paused: self.paused || other.paused,
        }
    }

    /// Whether messages wait that no worker will take: some have waited at least 10 s, and no
    /// worker serving the queue has beaten its heart for [`UNSERVED_AFTER`] (or none ever
    /// registered): a queue name no worker is configured for, or every worker gone.
    pub fn is_unserved(&self) -> bool {
        self.ready > 0
            && self
                .oldest_age
                .is_some_and(|age| age >= Duration::from_secs(10))
            && self
                .last_worker_beat
                .is_none_or(|beat| beat >= UNSERVED_AFTER)
    }
}

impl Queue {
    /// Messages waiting to be taken (ZCARD of the queued set, plus what an earlier version
    /// left in its ready list and no take has moved yet).
    /// Summed over a partitioned queue's partitions.
    pub async fn depth(&self, queue: &str) -> Result<u64> {
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut total = 0;
        for q in self.physical_queues(queue) {
            let mut pipe = redis::pipe();
            pipe.zcard(k.queued(&q)).llen(k.legacy_ready(&q));
            let (queued, legacy): (u64, u64) =
                self.run("depth", pipe.query_async(&mut conn)).await?;
            total += queued + legacy;
        }
        Ok(total)
    }

    /// Messages waiting in the delayed set (ZCARD), summed over a partitioned queue's
    /// partitions.
    pub async fn delayed_len(&self, queue: &str) -> Result<u64> {
        let mut conn = self.conn();
        let mut total = 0;
        for q in self.physical_queues(queue) {
            let n: u64 = self
                .run("delayed_len", conn.zcard(self.inner.keys.delayed(&q)))
                .await?;
            total += n;
        }
        Ok(total)
    }

    /// How long the oldest unsettled message has waited since it was enqueued, from the
    /// monitoring set (ZRANGE 0 0 WITHSCORES); `None` when nothing is unsettled.
    pub async fn oldest_age(&self, queue: &str, now: UtcMillis) -> Result<Option<Duration>> {
        let mut conn = self.conn();
        let first: Vec<(String, i64)> = self
            .run(
                "oldest_age",
                conn.zrange_withscores(self.inner.keys.monitor(queue), 0, 0),
            )
            .await?;
        Ok(first.first().map(|(_, at)| now.since(UtcMillis(*at))))
    }

    /// All monitoring figures of `queue` in one round trip (one per partition of a
    /// partitioned queue, summed: see [`QueueStats::merge`]).
    pub async fn stats(&self, queue: &str, now: UtcMillis) -> Result<QueueStats> {
        let mut total: Option<QueueStats> = None;
        for q in self.physical_queues(queue) {
            let one = self.partition_stats(&q, now).await?;
            total = Some(match total {
                None => one,
                Some(t) => t.merge(&one),
            });
        }
        total.ok_or_else(|| QueueError::UnexpectedReply {
            op: "stats",
            detail: "no physical queue".into(),
        })
    }

    /// The figures of each physical queue of `queue`, by name (one entry for a queue
    /// without partitions).
    pub async fn partition_stats_of(
        &self,
        queue: &str,
        now: UtcMillis,
    ) -> Result<Vec<(String, QueueStats)>> {
        let mut out = Vec::new();
        for q in self.physical_queues(queue) {
            let stats = self.partition_stats(&q, now).await?;
            out.push((q, stats));
        }
        Ok(out)
    }

    async fn partition_stats(&self, queue: &str, now: UtcMillis) -> Result<QueueStats> {
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        pipe.zcard(k.queued(queue))
            .llen(k.legacy_ready(queue))
            .zcard(k.monitor(queue))
            .zcard(k.delayed(queue))
            .zcard(k.dlq(queue))
            .zrange_withscores(k.monitor(queue), 0, 0)
            .zrange_withscores(k.workers(queue), -1, -1)
            .exists(k.paused(queue));
        type Reply = (
            u64,
            u64,
            u64,
            u64,
            u64,
            Vec<(String, i64)>,
            Vec<(String, i64)>,
            bool,
        );
        let (queued, legacy, unsettled, delayed, dead, first, beat, paused): Reply =
            self.run("stats", pipe.query_async(&mut conn)).await?;
        Ok(QueueStats {
            ready: queued + legacy,
            unsettled,
            delayed,
            dead,
            oldest_age: first.first().map(|(_, at)| now.since(UtcMillis(*at))),
            last_worker_beat: beat.first().map(|(_, at)| now.since(UtcMillis(*at))),
            paused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_unserved_when_work_waits_and_no_worker_beats() {
        let secs = |s| Some(Duration::from_secs(s));
        let stats = |ready, oldest, beat| QueueStats {
            ready,
            unsettled: ready,
            delayed: 0,
            dead: 0,
            oldest_age: oldest,
            last_worker_beat: beat,
            paused: false,
        };
        // No worker ever registered, work waiting 12 s.
        assert!(stats(3, secs(12), None).is_unserved());
        // Every worker gone a minute ago.
        assert!(stats(3, secs(12), secs(60)).is_unserved());
        // A live worker: it is only behind (the backlog alert's business).
        assert!(!stats(3, secs(12), secs(1)).is_unserved());
        // Just enqueued, or nothing waiting.
        assert!(!stats(3, secs(2), None).is_unserved());
        assert!(!stats(0, None, None).is_unserved());
    }
}
