//! Redis commands per execution, counted as `INFO commandstats` counts them (a script call
//! and every command it calls), over the whole path an execution takes through Redis at
//! fixed batch sizes: the leader's enqueue in chunks, the worker's take with its kill check,
//! the settle with its end recorded, the relay to the event stream and the history, and the
//! leader's read and acknowledgement. Fixed batches make the count deterministic (up to the
//! history list's trim, one push in eight by the ids' random bits), so the bound is exact
//! rather than a timing; `worker/tests/redis_cost.rs` measures the same through the pool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ax_queue::{ExecutionMessage, PendingEnd, Queue, QueueConfig, Settled, StopProbe};
use ax_scheduler_core::{AttemptOutcome, UtcMillis};
use ax_testkit::RedisServer;

/// Executions counted.
const N: usize = 2000;
/// What one call carries: the leader's enqueue chunk, then a worker's take, ack batch and
/// relay batch under load (a pool of 50), then the leader's read.
const ENQUEUE: usize = 100;
const TAKE: usize = 50;
const READ: usize = 500;
/// The bound: at most this many commands per execution, whatever the batch sizes above.
const MAX_COMMANDS_PER_EXECUTION: f64 = 7.0;

/// Per command: calls and µs of Redis's time, as `INFO commandstats` gives them.
async fn commands(url: &str) -> Vec<(String, u64, u64)> {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, fields) = l.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|v| v.parse().ok())
            };
            Some((name.to_owned(), field("calls=")?, field("usec=")?))
        })
        .filter(|(name, _, _)| !matches!(name.as_str(), "info" | "config|resetstat"))
        .collect()
}

#[tokio::test]
async fn an_execution_costs_redis_at_most_seven_commands() {
    let redis = RedisServer::start();
    let url = redis.url();
    let q = Queue::connect(&url, QueueConfig::default()).await.unwrap();
    let now = UtcMillis::now();
    let msgs: Vec<_> = (0..N)
        .map(|i| {
            let s = ax_testkit::spec(&format!("t{i}"), "default", "log");
            ExecutionMessage::for_fire(&s, UtcMillis(1_000), now, 1)
        })
        .collect();
    let mut c = q
        .consumer("default", "w", Duration::from_millis(200), now)
        .await
        .unwrap();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();

    for chunk in msgs.chunks(ENQUEUE) {
        q.enqueue_batch(chunk).await.unwrap();
    }
    let mut settled = 0;
    loop {
        let taken = c.take(TAKE).await.unwrap();
        if taken.is_empty() {
            break;
        }
        let probes: Vec<_> = taken.iter().map(|d| StopProbe::of(&d.message)).collect();
        assert!(q
            .stop_orders(&probes)
            .await
            .unwrap()
            .iter()
            .all(Option::is_none));
        let records: Vec<_> = taken
            .iter()
            .map(|d| common::end_record(d, AttemptOutcome::Succeeded))
            .collect();
        let items: Vec<_> = taken
            .iter()
            .zip(&records)
            .map(|(d, r)| (d, Some(r)))
            .collect();
        let ends: Vec<PendingEnd> = q
            .ack_recorded(&items)
            .await
            .unwrap()
            .into_iter()
            .zip(records)
            .map(|(s, record)| match s {
                Settled::Done(Some(id)) => PendingEnd {
                    logged: Some(("default".into(), id)),
                    record,
                },
                other => panic!("not settled with its record: {other:?}"),
            })
            .collect();
        settled += ends.len();
        q.relay_ends(&ends).await.unwrap();
    }
    assert_eq!(settled, N);
    let mut read = 0;
    loop {
        let batch = q.read_events(None, READ).await.unwrap();
        if batch.is_empty() {
            break;
        }
        read += batch.len();
        let positions: Vec<_> = batch.iter().map(|e| e.position).collect();
        q.ack_events(None, &positions).await.unwrap();
    }
    assert_eq!(read, N);

    let counted = commands(&url).await;
    let total: u64 = counted.iter().map(|(_, c, _)| c).sum();
    let per = total as f64 / N as f64;
    let n = N as f64;
    let table: Vec<String> = counted
        .iter()
        .map(|(name, c, us)| format!("{name} {:.3} ({:.2} µs)", *c as f64 / n, *us as f64 / n))
        .collect();
    println!("{per:.3} commands per execution: {}", table.join(", "));
    assert!(
        per <= MAX_COMMANDS_PER_EXECUTION,
        "{per:.3} Redis commands per execution, more than {MAX_COMMANDS_PER_EXECUTION}: {table:?}"
    );
}
