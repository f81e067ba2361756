//! How the queue's integration tests reach Redis: the shared test server, or the shared
//! test Redis Cluster when `AX_TEST_REDIS_CLUSTER` names its nodes (the cluster suite,
//! `scripts/cluster.sh`), so the same tests cover both. Tests that must stop or restart a
//! server start a private single one instead.
#![allow(dead_code, clippy::unwrap_used)]

use ax_queue::{Queue, QueueConfig};

/// A queue client with `cfg` on the shared test Redis or Redis Cluster.
pub(crate) async fn connect(cfg: QueueConfig) -> Queue {
    match ax_testkit::redis_cluster_nodes() {
        Some(nodes) => Queue::connect_cluster(&nodes, cfg).await.unwrap(),
        None => Queue::connect(&ax_testkit::redis_url(), cfg).await.unwrap(),
    }
}
