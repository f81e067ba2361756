//! How the queue's integration tests reach Redis: the shared test server, or the shared
//! test Redis Cluster when `AX_TEST_REDIS_CLUSTER` names its nodes (the cluster suite,
//! `scripts/cluster.sh`), so the same tests cover both. Tests that must stop or restart a
//! server start a private single one instead.
#![allow(dead_code, clippy::unwrap_used)]

use ax_queue::{
    Delivery, EndRecord, ExecutionEventRecord, ExecutionMessage, HistoryEntry, Queue, QueueConfig,
};
use ax_scheduler_core::{AttemptEnd, AttemptOutcome, ExecutionEvent, UtcMillis};

/// A queue client with `cfg` on the shared test Redis or Redis Cluster.
pub(crate) async fn connect(cfg: QueueConfig) -> Queue {
    match ax_testkit::redis_cluster_nodes() {
        Some(nodes) => Queue::connect_cluster(&nodes, cfg).await.unwrap(),
        None => Queue::connect(&ax_testkit::redis_url(), cfg).await.unwrap(),
    }
}

/// The end record a worker settles `d` with when its attempt ends now as `outcome`.
pub(crate) fn end_record(d: &Delivery, outcome: AttemptOutcome) -> EndRecord {
    message_end_record(&d.message, &d.worker_id, &d.queue, outcome)
}

/// The end record of message `m` ended now as `outcome` by `worker` in `queue`.
pub(crate) fn message_end_record(
    m: &ExecutionMessage,
    worker: &str,
    queue: &str,
    outcome: AttemptOutcome,
) -> EndRecord {
    let end = AttemptEnd::new(outcome, None);
    let at = UtcMillis::now();
    EndRecord {
        event: ExecutionEventRecord {
            namespace: m.namespace.clone(),
            task_id: m.task_id.clone(),
            execution_id: m.execution_id,
            fire_at: m.fire_at,
            attempt: m.attempt,
            kind: ExecutionEvent::Finished {
                at,
                end: end.clone(),
            },
            shard: m.shard,
        },
        history: Some(HistoryEntry {
            unstarted: false,
            execution_id: m.execution_id,
            fire_at: m.fire_at,
            started_at: at,
            finished_at: at,
            lateness_ms: 0,
            duration_ms: 0,
            end,
            worker: worker.to_owned(),
            attempt: m.attempt,
            queue: queue.to_owned(),
            enqueued_at: Some(m.enqueued_at),
            first_enqueued_at: Some(m.first_attempt_at),
            output: None,
            lineage: m.lineage.clone(),
        }),
    }
}
