//! Watching who leads.
//!
//! [`observe`] starts a small loop (a state machine like the others: fetch, watch, back
//! off) that publishes the current leader into a `tokio::sync::watch` channel, so any
//! number of readers see the latest value without talking to etcd. The loop belongs to the
//! returned [`LeaderObserver`] and stops when it is dropped or the token fires.

use std::time::Duration;

use ax_scheduler_core::UtcMillis;
use etcd_client::{Client, EventType, WatchOptions, WatchStream};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::campaign::LeaderRecord;
use crate::error::{timed, ElectionError};
use crate::keys::leader_key;

/// The current leader as observers see it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LeaderInfo {
    /// The leader's instance id.
    pub instance_id: String,
    /// Its fencing token (the leader key's create revision).
    pub fencing_token: i64,
    /// When it won.
    pub since: UtcMillis,
    /// What it published in its candidate info.
    pub info: serde_json::Value,
}

fn decode(kv: &etcd_client::KeyValue) -> Result<LeaderInfo, ElectionError> {
    let record: LeaderRecord =
        serde_json::from_slice(kv.value()).map_err(|source| ElectionError::Decode {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            source,
        })?;
    Ok(LeaderInfo {
        instance_id: record.instance_id,
        fencing_token: kv.create_revision(),
        since: record.since,
        info: record.info,
    })
}

/// Reads the current leader once; `None` when no one leads.
pub async fn current_leader(
    client: &Client,
    prefix: &str,
    request_timeout: Duration,
) -> Result<Option<LeaderInfo>, ElectionError> {
    let mut kv = client.kv_client();
    let resp = timed(
        "leader get",
        request_timeout,
        kv.get(leader_key(prefix), None),
    )
    .await?;
    resp.kvs().first().map(decode).transpose()
}

/// A live view of the current leader; stops its loop when dropped.
pub struct LeaderObserver {
    rx: watch::Receiver<Option<LeaderInfo>>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl LeaderObserver {
    /// The leader as last seen; `None` when no one leads (or before the first read).
    pub fn current(&self) -> Option<LeaderInfo> {
        self.rx.borrow().clone()
    }

    /// A receiver that sees every change (clone it for several readers).
    pub fn subscribe(&self) -> watch::Receiver<Option<LeaderInfo>> {
        self.rx.clone()
    }

    /// Waits for the next change and returns the new value.
    pub async fn changed(&mut self) -> Option<LeaderInfo> {
        if self.rx.changed().await.is_err() {
            return None;
        }
        self.rx.borrow_and_update().clone()
    }

    /// Stops the loop and waits for it.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for LeaderObserver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Starts observing `{prefix}/leader`; the loop runs until the observer is dropped or
/// `cancel` fires.
pub fn observe(
    client: Client,
    prefix: &str,
    request_timeout: Duration,
    cancel: &CancellationToken,
) -> LeaderObserver {
    let (tx, rx) = watch::channel(None);
    let stop = cancel.child_token();
    let looper = ObserveLoop {
        client,
        key: leader_key(prefix),
        request_timeout,
        tx,
    };
    let task = tokio::spawn(looper.run(stop.clone()));
    LeaderObserver {
        rx,
        stop,
        task: Some(task),
    }
}

enum ObserveState {
    Fetch,
    Watching(Box<WatchStream>),
    Backoff(u32),
}

struct ObserveLoop {
    client: Client,
    key: String,
    request_timeout: Duration,
    tx: watch::Sender<Option<LeaderInfo>>,
}

impl ObserveLoop {
    async fn run(self, stop: CancellationToken) {
        let mut state = ObserveState::Fetch;
        loop {
            state = tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                s = self.step(state) => s,
            };
        }
    }

    fn publish(&self, value: Option<LeaderInfo>) {
        self.tx.send_if_modified(|cur| {
            if *cur != value {
                *cur = value;
                true
            } else {
                false
            }
        });
    }

    async fn step(&self, state: ObserveState) -> ObserveState {
        match state {
            ObserveState::Fetch => match self.fetch().await {
                Ok(watch) => ObserveState::Watching(Box::new(watch)),
                Err(error) => {
                    tracing::debug!(%error, "leader observe fetch failed");
                    ObserveState::Backoff(0)
                }
            },
            ObserveState::Backoff(attempt) => {
                tokio::time::sleep(Duration::from_millis(100u64 << attempt.min(4))).await;
                match self.fetch().await {
                    Ok(watch) => ObserveState::Watching(Box::new(watch)),
                    Err(_) => ObserveState::Backoff(attempt + 1),
                }
            }
            ObserveState::Watching(mut watch) => match watch.message().await {
                Ok(Some(resp)) if !resp.canceled() => {
                    for event in resp.events() {
                        match (event.event_type(), event.kv()) {
                            (EventType::Put, Some(kv)) => self.publish(decode(kv).ok()),
                            _ => self.publish(None),
                        }
                    }
                    ObserveState::Watching(watch)
                }
                _ => ObserveState::Fetch,
            },
        }
    }

    async fn fetch(&self) -> Result<WatchStream, ElectionError> {
        let t = self.request_timeout;
        let mut kv = self.client.kv_client();
        let resp = timed("leader get", t, kv.get(self.key.clone(), None)).await?;
        self.publish(resp.kvs().first().and_then(|kv| decode(kv).ok()));
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        let mut wc = self.client.watch_client();
        timed(
            "leader watch",
            t,
            wc.watch(
                self.key.clone(),
                Some(WatchOptions::new().with_start_revision(rev + 1)),
            ),
        )
        .await
    }
}
