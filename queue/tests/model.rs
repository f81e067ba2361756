//! Property test: the queue against a simple in-memory model of its waiting messages and
//! the held ones, over random sequences of enqueue (of random priorities), take, ack, release
//! and a restart's recovery on a real Redis. Aging is set far beyond the test's length, so
//! the model's order is strict priority, then enqueue order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ax_queue::{Delivery, ExecutionMessage, QueueConfig};
use ax_scheduler_core::{EnqueueOutcome, TaskSpec, UtcMillis};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Enqueue(i64, u8),
    Take(usize),
    AckOldest,
    ReleaseNewest,
    /// The worker restarts: everything it held goes back.
    Recover,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0i64..12, 0u8..10).prop_map(|(fire, p)| Op::Enqueue(fire, p)),
        2 => (1usize..4).prop_map(Op::Take),
        1 => Just(Op::AckOldest),
        1 => Just(Op::ReleaseNewest),
        1 => Just(Op::Recover),
    ]
}

fn spec() -> TaskSpec {
    ax_testkit::spec("t", "default", "log")
}

async fn check(ops: Vec<Op>) {
    let cfg = QueueConfig {
        prefix: ax_testkit::unique_name("axmodel"),
        priority_aging: Duration::from_secs(3600),
        ..QueueConfig::default()
    };
    let q = common::connect(cfg).await;
    let now = ax_scheduler_core::UtcMillis::now();
    let mut c = q
        .consumer("default", "w", Duration::from_millis(20), now)
        .await
        .unwrap();
    // Model: `ready` holds (priority, enqueue number, fire), taken highest priority first,
    // then lowest enqueue number; `held` in take order, with what each was enqueued as.
    let mut newest: Option<i64> = None;
    let mut seq = 0u64;
    let mut ready: Vec<(u8, u64, i64)> = Vec::new();
    let mut held: Vec<(Delivery, (u8, u64, i64))> = Vec::new();
    for op in ops {
        match op {
            Op::Enqueue(fire, priority) => {
                let mut s = spec();
                s.priority = priority;
                let m = ExecutionMessage::for_fire(&s, UtcMillis(fire), now, 1);
                let out = q.enqueue(&m).await.unwrap();
                // A task's fires are dispatched in time order: the queue enqueues a fire
                // newer than every one it enqueued, and refuses the rest as duplicates.
                if newest.is_none_or(|n| fire > n) {
                    newest = Some(fire);
                    assert_eq!(out, EnqueueOutcome::Enqueued);
                    seq += 1;
                    ready.push((priority, seq, fire));
                } else {
                    assert_eq!(out, EnqueueOutcome::Duplicate);
                }
            }
            Op::Take(n) => {
                let got = c.take(n).await.unwrap();
                ready.sort_by_key(|&(p, seq, _)| (std::cmp::Reverse(p), seq));
                let want: Vec<(u8, u64, i64)> = ready.drain(..n.min(ready.len())).collect();
                let fires: Vec<i64> = got.iter().map(|d| d.message.fire_at.0).collect();
                assert_eq!(fires, want.iter().map(|w| w.2).collect::<Vec<_>>());
                held.extend(got.into_iter().zip(want));
            }
            Op::AckOldest => {
                if !held.is_empty() {
                    let (d, _) = held.remove(0);
                    assert!(q.ack(&d).await.unwrap());
                }
            }
            Op::ReleaseNewest => {
                if let Some((d, was)) = held.pop() {
                    assert!(q.release(&d).await.unwrap());
                    ready.push(was);
                }
            }
            Op::Recover => {
                let n = q.recover_worker("default", "w").await.unwrap();
                assert_eq!(n, held.len());
                ready.extend(held.drain(..).map(|(_, was)| was));
            }
        }
        let stats = q.stats("default", now).await.unwrap();
        assert_eq!(stats.ready, ready.len() as u64);
        assert_eq!(stats.unsettled, (ready.len() + held.len()) as u64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn queue_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check(ops));
    }
}
