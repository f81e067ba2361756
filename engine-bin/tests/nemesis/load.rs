//! The nemesis's steady load: one-shots written into etcd while the faults run (a batch
//! every [`BATCH_EVERY`], each due a few seconds after it is written, so every fault meets
//! registrations, fires and executions in flight), and a few periodic tasks that run every
//! second throughout.
//!
//! The load writes through the test's own etcd client, never through a replica's links: it
//! plays the user, whose writes reach etcd whatever the replicas' partitions. Its draws come
//! from their own seeded generator, so the due times of a replayed run are the same.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Txn, TxnOp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::harness::{now_ms, rfc3339, Cluster};

/// The namespace of every task of the load.
pub(crate) const NAMESPACE: &str = "nemesis";

/// The periodic tasks (`every: 1s`, misfire `skip`, overlap `allow`).
pub(crate) const PERIODIC: [&str; 3] = ["p1", "p2", "p3"];

/// How often a batch of one-shots is written.
const BATCH_EVERY: Duration = Duration::from_millis(200);

/// One-shots a batch holds: 100 a second in all.
const BATCH: usize = 20;

/// How far ahead of its write a one-shot is due, at least and at most (ms).
const LEAD_MS: (i64, i64) = (1_500, 4_000);

/// A one-shot the load wrote.
#[derive(Clone, Debug)]
pub(crate) struct OneShot {
    pub(crate) id: String,
    /// Its due instant (ms since the epoch).
    pub(crate) due: i64,
}

/// The running load.
pub(crate) struct Load {
    stop: CancellationToken,
    written: Arc<Mutex<Vec<OneShot>>>,
    writer: tokio::task::JoinHandle<()>,
}

/// An `http` task posting to `url`, run once (no retry), on the default queue.
fn task(url: &str, schedule: Value) -> Value {
    json!({
        "handler": "http",
        "schedule": schedule,
        "queue": "default",
        "http": { "url": url },
        "timeout": "20s",
        "retry": { "max_retries": 0 },
    })
}

impl Load {
    /// Writes the periodic tasks and starts writing one-shots.
    pub(crate) async fn start(c: &Cluster, seed: u64) -> Load {
        let url = c.receiver.exec_url();
        for id in PERIODIC {
            let mut t = task(&url, json!({ "every": "1s" }));
            t["misfire"] = json!("skip");
            t["overlap"] = json!("allow");
            c.put_task(NAMESPACE, id, &t).await;
        }
        let stop = CancellationToken::new();
        let written = Arc::new(Mutex::new(Vec::new()));
        let writer = tokio::spawn(write_one_shots(
            c.etcd.clone(),
            format!("{}/tasks/{NAMESPACE}", c.prefix),
            url,
            StdRng::seed_from_u64(seed),
            stop.clone(),
            written.clone(),
        ));
        Load {
            stop,
            written,
            writer,
        }
    }

    /// Stops writing; every one-shot written.
    pub(crate) async fn stop(self) -> Vec<OneShot> {
        self.stop.cancel();
        self.writer.await.unwrap();
        let written = self.written.lock().unwrap();
        written.clone()
    }
}

async fn write_one_shots(
    mut etcd: etcd_client::Client,
    under: String,
    url: String,
    mut rng: StdRng,
    stop: CancellationToken,
    written: Arc<Mutex<Vec<OneShot>>>,
) {
    let mut next = 0usize;
    let mut every = tokio::time::interval(BATCH_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        let now = now_ms();
        let batch: Vec<OneShot> = (0..BATCH)
            .map(|i| OneShot {
                id: format!("o{:06}", next + i),
                due: now + rng.random_range(LEAD_MS.0..=LEAD_MS.1),
            })
            .collect();
        next += BATCH;
        let ops: Vec<TxnOp> = batch
            .iter()
            .map(|o| {
                let spec = task(&url, json!({ "at": rfc3339(o.due) }));
                TxnOp::put(format!("{under}/{}", o.id), spec.to_string(), None)
            })
            .collect();
        let resp = etcd.txn(Txn::new().and_then(ops)).await.unwrap();
        assert!(resp.succeeded());
        written.lock().unwrap().extend(batch);
    }
}
