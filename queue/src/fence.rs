//! Fences: the newest fencing token each queue has seen per scheduling shard, so that a
//! deposed leader's enqueues are refused (`enqueue_many.lua` reads the fence,
//! `advance_fence.lua` beside this file raises it).
//!
//! A fence records the etcd cluster that first raised it: tokens of two clusters are not
//! comparable, so another cluster's fence is reported and left alone; only the operator's
//! reseat overwrites it.

use std::sync::LazyLock;

use redis::{AsyncCommands, Script};

use crate::error::{QueueError, Result};
use crate::queue::{check_queue, Queue};

/// `advance_fence.lua` (it puts nothing in the queued set: no order functions).
static ADVANCE_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fence/advance_fence.lua")));

/// A queue's fence after a leader raised it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The newest token the queue has seen.
    pub newest: u64,
    /// The token the leader raised it with.
    pub token: u64,
    /// The etcd cluster that owns the fence.
    pub owner: String,
    /// The leader's etcd cluster.
    pub cluster: String,
}

impl Fence {
    /// The fence belongs to another etcd cluster (two installations share a Redis key
    /// prefix, or etcd was rebuilt): its tokens are not comparable with the leader's.
    pub fn is_foreign(&self) -> bool {
        self.owner != self.cluster
    }

    /// The fence is above the leader's own token although the leader holds its key: a
    /// token from before an etcd restore or rebuild (revisions started again lower). Every
    /// enqueue of this leader would be refused.
    pub fn is_ahead(&self) -> bool {
        self.newest > self.token
    }
}

impl Queue {
    /// The newest fencing token `queue` has seen from the owners of scheduling `shard`
    /// (`None`: an unsharded install's leaders), 0 when none.
    /// A partitioned queue's is the highest of its partitions'.
    pub async fn fence(&self, queue: &str, shard: Option<u32>) -> Result<u64> {
        check_queue(queue)?;
        let mut conn = self.conn();
        let mut newest = 0;
        for q in self.physical_queues(queue) {
            let v: Option<u64> = self
                .run("fence", conn.get(self.inner.keys.fence(&q, shard)))
                .await?;
            newest = newest.max(v.unwrap_or(0));
        }
        Ok(newest)
    }

    /// Raises `queue`'s fence of scheduling `shard` to `token`, issued by the etcd cluster
    /// `cluster` (a new leader, or a shard's new owner, calls this for every queue it knows,
    /// so a deposed one is refused even on queues the new one has not pushed to yet). The
    /// first cluster to raise a fence owns it; a fence owned by another cluster is not
    /// touched (see [`Fence::is_foreign`]). Other shards' fences are not touched either.
    /// A partitioned queue's fence is raised on every partition; the answer is the first
    /// partition's that is foreign or ahead, else the last one's.
    pub async fn advance_fence(
        &self,
        queue: &str,
        shard: Option<u32>,
        token: u64,
        cluster: &str,
    ) -> Result<Fence> {
        check_queue(queue)?;
        let mut last = None;
        for q in self.physical_queues(queue) {
            let fence = self.advance_one_fence(&q, shard, token, cluster).await?;
            let refuses = fence.is_foreign() || fence.is_ahead();
            last = Some(fence);
            if refuses {
                break;
            }
        }
        // `physical_queues` lists at least the queue itself.
        last.ok_or_else(|| QueueError::UnexpectedReply {
            op: "advance_fence",
            detail: "no physical queue".into(),
        })
    }

    async fn advance_one_fence(
        &self,
        queue: &str,
        shard: Option<u32>,
        token: u64,
        cluster: &str,
    ) -> Result<Fence> {
        let mut conn = self.conn();
        let mut inv = ADVANCE_FENCE.prepare_invoke();
        inv.key(self.inner.keys.fence(queue, shard))
            .key(self.inner.keys.fence_owner(queue, shard))
            .arg(token)
            .arg(cluster);
        let (newest, owner): (String, String) = self
            .run("advance_fence", inv.invoke_async(&mut conn))
            .await?;
        let newest = newest.parse().map_err(|_| QueueError::UnexpectedReply {
            op: "advance_fence",
            detail: format!("token `{newest}`"),
        })?;
        Ok(Fence {
            newest,
            token,
            owner,
            cluster: cluster.to_owned(),
        })
    }

    /// Sets `queue`'s fence of scheduling `shard` to `token` and its owner to `cluster`,
    /// whatever they were: the operator's repair after an etcd restore or a change of
    /// cluster (`ax fence reseat`). Safe only when no other installation uses this Redis key
    /// prefix. A partitioned queue's fence is set on every partition.
    pub async fn reseat_fence(
        &self,
        queue: &str,
        shard: Option<u32>,
        token: u64,
        cluster: &str,
    ) -> Result<()> {
        check_queue(queue)?;
        let k = &self.inner.keys;
        for q in self.physical_queues(queue) {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .set(k.fence(&q, shard), token)
                .ignore()
                .set(k.fence_owner(&q, shard), cluster)
                .ignore();
            let mut conn = self.conn();
            self.run("reseat_fence", pipe.query_async::<()>(&mut conn))
                .await?;
        }
        Ok(())
    }
}
