//! A kill in a long backlog: found through the order hash or in bounded reads, never in one
//! command that holds Redis for the whole queue. Checked with Redis's own slow log on a
//! server of the test's own (its threshold is a server setting).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ax_queue::{ExecutionMessage, KillState, Queue, QueueConfig};
use ax_scheduler_core::UtcMillis;
use ax_testkit::RedisServer;

/// The backlog: ten times the chunk a find reads at once, many times over.
const BACKLOG: usize = 50_000;
/// No command of a kill may take this long (Redis's slow log threshold, µs).
const SLOW_US: u64 = 20_000;

async fn slow_commands(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100)
        .query_async(conn)
        .await
        .unwrap();
    entries.iter().map(|e| format!("{e:?}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_in_a_backlog_of_fifty_thousand_never_holds_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(&url, QueueConfig::default()).await.unwrap();
    let mut ids = Vec::with_capacity(BACKLOG);
    let mut batch = Vec::new();
    for i in 0..BACKLOG {
        let s = ax_testkit::spec(&format!("t{}", i % 500), "default", "log");
        let m = ExecutionMessage::for_fire(&s, UtcMillis(1_000 + i as i64), UtcMillis::now(), 1);
        ids.push(m.execution_id);
        batch.push(m);
        if batch.len() == 1000 {
            q.enqueue_batch(&batch).await.unwrap();
            batch.clear();
        }
    }
    assert_eq!(q.depth("default").await.unwrap(), BACKLOG as u64);

    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(SLOW_US)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut conn)
        .await
        .unwrap();

    // By id, near the end of the backlog: through the order hash.
    let started = Instant::now();
    let kill = q.kill_execution("default", ids[BACKLOG - 7]).await.unwrap();
    let by_id = started.elapsed();
    assert_eq!(kill.state, KillState::Waiting);
    // An id the queue does not have: every set and list read, in chunks.
    let started = Instant::now();
    let gone = q
        .kill_execution("default", ax_scheduler_core::ExecutionId::from_u128(42))
        .await
        .unwrap();
    let unknown = started.elapsed();
    assert_eq!(gone.state, KillState::Gone);
    // Every execution of one task (100 of them, spread through the backlog).
    let kills = q.kill_task("default", "ns", "t3").await.unwrap();
    assert_eq!(kills.len(), BACKLOG / 500);
    assert!(kills.iter().all(|k| k.state == KillState::Waiting));

    let slow = slow_commands(&mut conn).await;
    assert!(slow.is_empty(), "commands over {SLOW_US} µs: {slow:#?}");
    assert_eq!(
        q.depth("default").await.unwrap(),
        (BACKLOG - 1 - BACKLOG / 500) as u64
    );
    assert!(
        by_id < Duration::from_millis(200),
        "a kill by id took {by_id:?}"
    );
    eprintln!("kill by id {by_id:?}; of an unknown id (full read) {unknown:?}");
}
