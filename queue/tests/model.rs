//! Property test: the queue against a simple in-memory model of its lists (ready, held),
//! over random sequences of enqueue, take, ack and release on a real Redis.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::time::Duration;

use ax_queue::{Delivery, ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::{EnqueueOutcome, TaskSpec, UtcMillis};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Enqueue(i64),
    Take(usize),
    AckOldest,
    ReleaseNewest,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0i64..12).prop_map(Op::Enqueue),
        2 => (1usize..4).prop_map(Op::Take),
        1 => Just(Op::AckOldest),
        1 => Just(Op::ReleaseNewest),
    ]
}

fn spec() -> TaskSpec {
    ax_testkit::spec("t", "default", "log")
}

async fn check(ops: Vec<Op>) {
    let cfg = QueueConfig {
        prefix: ax_testkit::unique_name("axmodel"),
        ..QueueConfig::default()
    };
    let q = Queue::connect(&ax_testkit::redis_url(), cfg).await.unwrap();
    let now = ax_scheduler_core::UtcMillis::now();
    let mut c = q
        .consumer("default", "w", Duration::from_millis(20), now)
        .await
        .unwrap();
    // Model: `ready` front is the taking end; `held` in take order.
    let mut newest: Option<i64> = None;
    let mut ready: VecDeque<i64> = VecDeque::new();
    let mut held: Vec<Delivery> = Vec::new();
    for op in ops {
        match op {
            Op::Enqueue(fire) => {
                let m = ExecutionMessage::for_fire(&spec(), UtcMillis(fire), now, 1);
                let out = q.enqueue(&m).await.unwrap();
                // A task's fires are dispatched in time order: the queue enqueues a fire
                // newer than every one it enqueued, and refuses the rest as duplicates.
                if newest.is_none_or(|n| fire > n) {
                    newest = Some(fire);
                    assert_eq!(out, EnqueueOutcome::Enqueued);
                    ready.push_back(fire);
                } else {
                    assert_eq!(out, EnqueueOutcome::Duplicate);
                }
            }
            Op::Take(n) => {
                let got = c.take(n).await.unwrap();
                let want: Vec<i64> = (0..n.min(ready.len()))
                    .filter_map(|_| ready.pop_front())
                    .collect();
                let fires: Vec<i64> = got.iter().map(|d| d.message.fire_at.0).collect();
                assert_eq!(fires, want);
                held.extend(got);
            }
            Op::AckOldest => {
                if !held.is_empty() {
                    let d = held.remove(0);
                    assert!(q.ack(&d).await.unwrap());
                }
            }
            Op::ReleaseNewest => {
                if let Some(d) = held.pop() {
                    assert!(q.release(&d).await.unwrap());
                    ready.push_front(d.message.fire_at.0);
                }
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
