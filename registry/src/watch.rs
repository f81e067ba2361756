//! List-then-watch of every task spec, as a stream of [`RegistryEvent`]s that neither loses
//! nor repeats a change.
//!
//! The watcher is an explicit state machine ([`WatchState`]) advanced one [`TaskWatcher::step`]
//! at a time, in the manner of kube-rs's `watcher`:
//!
//! - `Initial`: list everything under `{prefix}/tasks/` at one revision R (paged, all pages
//!   read at R), report each task, then `Synced { R }`, then watch from R + 1. Nothing
//!   written between the list and the watch is lost (the watch starts right after R) and
//!   nothing is seen twice (the watch starts after R).
//! - `Watching`: report each event and remember the last revision seen.
//! - When the watch breaks (connection loss, etcd restart) report `Reconnecting`, wait
//!   (`Backoff`: the core's jittered [`ReconnectBackoff`], doubling from
//!   `watch_backoff_initial` up to `watch_backoff_max`, carried through the states so a
//!   success resets it) and resume from the last revision seen + 1.
//! - When etcd says that revision was compacted, the missed events are gone: `Relisting`
//!   lists again and reports only the difference from what the consumer was told (puts for
//!   keys new or changed by mod revision, deletes for keys that vanished), then `Synced`.
//!
//! To compute that difference the watcher remembers each key's last reported mod revision
//! (a few dozen bytes per task).

use std::collections::{HashMap, VecDeque};

use ax_scheduler_core::{ReconnectBackoff, TaskSpec, ValidationErrors};
use etcd_client::{EventType, KeyValue, WatchOptions, WatchStream};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::decode::{decode_task, task_ids, Decoded};
use crate::error::RegistryError;
use crate::registry::Registry;

/// A change to the registered tasks, in revision order.
// `Put` is by far the most frequent event; boxing its spec would allocate for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum RegistryEvent {
    /// A task was created or changed (or, after a relist, differs from what was reported).
    Put {
        /// The valid spec (its namespace and id are the key's).
        spec: TaskSpec,
        /// Revision of the change.
        mod_revision: i64,
        /// Revision at which the key was created.
        create_revision: i64,
    },
    /// A value under the tasks prefix is not a valid spec (malformed JSON, invalid fields,
    /// an `id` that does not match the key, a key with the wrong number of segments).
    Invalid {
        /// Namespace from the key (best guess for a malformed key).
        namespace: String,
        /// Task id from the key (best guess for a malformed key).
        id: String,
        /// The stored value.
        raw: String,
        /// Every problem found.
        errors: ValidationErrors,
        /// Revision of the change.
        mod_revision: i64,
    },
    /// A task was deleted (or, after a relist, is gone).
    Delete {
        /// Namespace.
        namespace: String,
        /// Task id.
        id: String,
        /// Revision of the delete (the relist's revision when found by a relist).
        mod_revision: i64,
    },
    /// Everything up to `revision` has been reported: sent after the first full list and
    /// after each relist.
    Synced {
        /// The list's revision.
        revision: i64,
    },
    /// The watch broke and will be resumed after a backoff; for logs and health checks.
    Reconnecting {
        /// What went wrong.
        error: String,
        /// Consecutive failures so far (1 for the first).
        attempt: u32,
    },
}

/// Where to go after a backoff.
#[derive(Clone, Copy, Debug)]
enum Resume {
    /// Watch from the revision after this one.
    From(i64),
    /// List everything again and report the difference.
    Relist,
}

/// The watcher's states.
enum WatchState {
    /// Never listed.
    Initial,
    /// Open a watch from `rev + 1`.
    Resuming { rev: i64, backoff: ReconnectBackoff },
    /// Following events; `rev` is the last revision reported. `quiet_since` is when the
    /// stream last said anything, `asked_at` when progress was asked of it, if it was since.
    Watching {
        stream: Box<WatchStream>,
        rev: i64,
        quiet_since: Instant,
        asked_at: Option<Instant>,
    },
    /// Waiting before the next attempt.
    Backoff {
        until: Instant,
        backoff: ReconnectBackoff,
        resume: Resume,
    },
    /// List again (a compacted revision, or a failed first list).
    Relisting { backoff: ReconnectBackoff },
    /// Cancelled.
    Done,
}

/// What one step hands back: the next state, the updated memory of reported keys, and
/// the events produced.
struct StepOutput {
    state: WatchState,
    known: HashMap<Vec<u8>, i64>,
    events: VecDeque<RegistryEvent>,
}

/// The task watch. Use [`TaskWatcher::next`] or [`TaskWatcher::into_stream`].
///
/// [`TaskWatcher::next`] is cancel-safe: a step interrupted because the caller's `select!`
/// took another branch is kept and continued by the next call, so no event is lost.
pub struct TaskWatcher {
    registry: Registry,
    cancel: CancellationToken,
    state: WatchState,
    pending: VecDeque<RegistryEvent>,
    /// Last reported mod revision of every key reported as present.
    known: HashMap<Vec<u8>, i64>,
    in_flight: Option<BoxFuture<'static, StepOutput>>,
}

// The watcher is built on the registry's client, so the registry's way to open one lives
// here: the registry itself knows nothing of watching.
impl Registry {
    /// Lists every task, then follows changes: see [`TaskWatcher`]. The stream ends when
    /// `cancel` fires.
    pub fn watch(&self, cancel: CancellationToken) -> TaskWatcher {
        TaskWatcher::new(self.clone(), cancel)
    }
}

impl TaskWatcher {
    fn new(registry: Registry, cancel: CancellationToken) -> Self {
        TaskWatcher {
            registry,
            cancel,
            state: WatchState::Initial,
            pending: VecDeque::new(),
            known: HashMap::new(),
            in_flight: None,
        }
    }

    /// The next event; `None` once the cancellation token fired.
    pub async fn next(&mut self) -> Option<RegistryEvent> {
        loop {
            if !self.pending.is_empty() {
                // A relist hands out a million events without awaiting anything: without a
                // yield now and then the consumer's thread never lets the runtime run its
                // timers and sockets (the lease keep-alive among them). Yielding before the
                // pop keeps `next` cancel-safe.
                tokio::task::coop::consume_budget().await;
                return self.pending.pop_front();
            }
            if matches!(self.state, WatchState::Done) && self.in_flight.is_none() {
                return None;
            }
            let step = match self.in_flight.as_mut() {
                Some(step) => step,
                None => {
                    let state = std::mem::replace(&mut self.state, WatchState::Done);
                    let mut known = std::mem::take(&mut self.known);
                    let registry = self.registry.clone();
                    self.in_flight.insert(Box::pin(async move {
                        let mut events = VecDeque::new();
                        let state = Self::step(&registry, &mut known, &mut events, state).await;
                        StepOutput {
                            state,
                            known,
                            events,
                        }
                    }))
                }
            };
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    self.in_flight = None;
                    self.state = WatchState::Done;
                    self.pending.clear();
                    return None;
                }
                out = step => {
                    self.in_flight = None;
                    self.state = out.state;
                    self.known = out.known;
                    // A step starts only once `pending` is drained, so the step's buffer
                    // replaces it: a relist's (a million events at a million tasks) is freed
                    // by the next step instead of staying as the queue's capacity.
                    self.pending = out.events;
                }
            }
        }
    }

    /// The watch as a `Stream`.
    pub fn into_stream(self) -> BoxStream<'static, RegistryEvent> {
        Box::pin(futures::stream::unfold(self, |mut w| async move {
            w.next().await.map(|ev| (ev, w))
        }))
    }

    /// A backoff with no failures yet, from the configured bounds.
    fn fresh_backoff(registry: &Registry) -> ReconnectBackoff {
        let cfg = registry.config();
        ReconnectBackoff::new(cfg.watch_backoff_initial, cfg.watch_backoff_max)
    }

    fn broken(
        pending: &mut VecDeque<RegistryEvent>,
        error: String,
        mut backoff: ReconnectBackoff,
        resume: Resume,
    ) -> WatchState {
        let wait = backoff.next_delay(&mut rand::rng());
        let attempt = backoff.failures();
        tracing::warn!(%error, attempt, wait_ms = wait.as_millis() as u64, "task watch broke; reconnecting");
        pending.push_back(RegistryEvent::Reconnecting { error, attempt });
        WatchState::Backoff {
            until: Instant::now() + wait,
            backoff,
            resume,
        }
    }

    /// Advances the state machine by one state, queuing the events it produced.
    async fn step(
        registry: &Registry,
        known: &mut HashMap<Vec<u8>, i64>,
        pending: &mut VecDeque<RegistryEvent>,
        state: WatchState,
    ) -> WatchState {
        match state {
            WatchState::Done => WatchState::Done,
            WatchState::Initial => {
                let backoff = Self::fresh_backoff(registry);
                Self::relist(registry, known, pending, backoff).await
            }
            WatchState::Relisting { backoff } => {
                Self::relist(registry, known, pending, backoff).await
            }
            WatchState::Backoff {
                until,
                backoff,
                resume,
            } => {
                tokio::time::sleep_until(until).await;
                match resume {
                    Resume::From(rev) => WatchState::Resuming { rev, backoff },
                    Resume::Relist => WatchState::Relisting { backoff },
                }
            }
            WatchState::Resuming { rev, backoff } => {
                Self::resume(registry, pending, rev, backoff).await
            }
            WatchState::Watching {
                stream,
                rev,
                quiet_since,
                asked_at,
            } => Self::watching(registry, known, pending, stream, rev, quiet_since, asked_at).await,
        }
    }

    /// Opens the watch from `rev + 1`: watching, or listing again if `rev` was compacted.
    async fn resume(
        registry: &Registry,
        pending: &mut VecDeque<RegistryEvent>,
        rev: i64,
        backoff: ReconnectBackoff,
    ) -> WatchState {
        match Self::open(registry, rev).await {
            Ok(Some(stream)) => WatchState::Watching {
                stream,
                rev,
                quiet_since: Instant::now(),
                asked_at: None,
            },
            Ok(None) => {
                tracing::info!(rev, "task watch revision compacted; listing again");
                WatchState::Relisting {
                    backoff: Self::fresh_backoff(registry),
                }
            }
            Err(e) => Self::broken(pending, e.to_string(), backoff, Resume::From(rev)),
        }
    }

    /// Waits for the stream's next message, asking a quiet watch for progress and opening
    /// anew one that does not answer.
    async fn watching(
        registry: &Registry,
        known: &mut HashMap<Vec<u8>, i64>,
        pending: &mut VecDeque<RegistryEvent>,
        mut stream: Box<WatchStream>,
        rev: i64,
        quiet_since: Instant,
        asked_at: Option<Instant>,
    ) -> WatchState {
        // A quiet watch is asked for progress; one that does not answer is opened
        // anew. A member that hangs (stopped, not dead) keeps its connection open, so
        // a watch through it would see nothing until the HTTP/2 keep-alive gave up
        // (15 s) while the other members go on.
        let cfg = registry.config();
        let message = match asked_at {
            None => {
                let ask_at = quiet_since + cfg.watch_progress_interval;
                tokio::select! {
                    m = stream.message() => Some(m),
                    _ = tokio::time::sleep_until(ask_at) => None,
                }
            }
            Some(at) => {
                let answer_by = at + cfg.watch_answer_timeout;
                tokio::select! {
                    m = stream.message() => Some(m),
                    _ = tokio::time::sleep_until(answer_by) => {
                        return Self::broken(
                            pending,
                            format!("watch unanswered for {:?}", cfg.watch_answer_timeout),
                            Self::fresh_backoff(registry),
                            Resume::From(rev),
                        );
                    }
                }
            }
        };
        let Some(message) = message else {
            return match stream.request_progress().await {
                Ok(()) => WatchState::Watching {
                    stream,
                    rev,
                    quiet_since,
                    asked_at: Some(Instant::now()),
                },
                Err(e) => Self::broken(
                    pending,
                    e.to_string(),
                    Self::fresh_backoff(registry),
                    Resume::From(rev),
                ),
            };
        };
        Self::on_message(registry, known, pending, stream, rev, message)
    }

    /// Applies one message of the watch stream (any message shows the watch alive).
    fn on_message(
        registry: &Registry,
        known: &mut HashMap<Vec<u8>, i64>,
        pending: &mut VecDeque<RegistryEvent>,
        stream: Box<WatchStream>,
        mut rev: i64,
        message: Result<Option<etcd_client::WatchResponse>, etcd_client::Error>,
    ) -> WatchState {
        match message {
            Ok(Some(resp)) => {
                if resp.compact_revision() > 0 {
                    tracing::info!(
                        rev,
                        compact_revision = resp.compact_revision(),
                        "task watch fell behind compaction; listing again"
                    );
                    return WatchState::Relisting {
                        backoff: Self::fresh_backoff(registry),
                    };
                }
                if resp.canceled() {
                    let reason = format!("watch cancelled by etcd: {}", resp.cancel_reason());
                    let backoff = Self::fresh_backoff(registry);
                    return Self::broken(pending, reason, backoff, Resume::From(rev));
                }
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    if kv.mod_revision() <= rev {
                        // Already reported; cannot happen with a watch started after
                        // `rev`, but a repeat must never reach the consumer.
                        continue;
                    }
                    match event.event_type() {
                        EventType::Put => Self::report_put(registry, known, pending, kv),
                        EventType::Delete => {
                            known.remove(kv.key());
                            let (namespace, id) = task_ids(registry.keys(), kv.key());
                            pending.push_back(RegistryEvent::Delete {
                                namespace,
                                id,
                                mod_revision: kv.mod_revision(),
                            });
                        }
                    }
                }
                if let Some(max) = resp
                    .events()
                    .iter()
                    .filter_map(|e| e.kv())
                    .map(|kv| kv.mod_revision())
                    .max()
                {
                    rev = rev.max(max);
                }
                WatchState::Watching {
                    stream,
                    rev,
                    quiet_since: Instant::now(),
                    asked_at: None,
                }
            }
            Ok(None) => Self::broken(
                pending,
                "watch stream ended".to_string(),
                Self::fresh_backoff(registry),
                Resume::From(rev),
            ),
            Err(e) => Self::broken(
                pending,
                e.to_string(),
                Self::fresh_backoff(registry),
                Resume::From(rev),
            ),
        }
    }

    fn report_put(
        registry: &Registry,
        known: &mut HashMap<Vec<u8>, i64>,
        pending: &mut VecDeque<RegistryEvent>,
        kv: &KeyValue,
    ) {
        known.insert(kv.key().to_vec(), kv.mod_revision());
        pending.push_back(match decode_task(registry.keys(), kv) {
            Decoded::Task(t) => RegistryEvent::Put {
                spec: t.spec,
                mod_revision: t.mod_revision,
                create_revision: t.create_revision,
            },
            Decoded::Invalid(i) => RegistryEvent::Invalid {
                namespace: i.namespace,
                id: i.id,
                raw: i.raw,
                errors: i.errors,
                mod_revision: i.mod_revision,
            },
        });
    }

    /// Lists everything and reports what differs from `known`, then `Synced`; then resumes
    /// watching from the list's revision.
    async fn relist(
        registry: &Registry,
        known: &mut HashMap<Vec<u8>, i64>,
        pending: &mut VecDeque<RegistryEvent>,
        backoff: ReconnectBackoff,
    ) -> WatchState {
        let (revision, kvs) = match registry.list_range(&registry.keys().tasks_prefix()).await {
            Ok(v) => v,
            Err(e) => return Self::broken(pending, e.to_string(), backoff, Resume::Relist),
        };
        let mut present = HashMap::with_capacity(kvs.len());
        for kv in &kvs {
            present.insert(kv.key().to_vec(), ());
            if known.get(kv.key()) != Some(&kv.mod_revision()) {
                Self::report_put(registry, known, pending, kv);
            }
            // Each spec is parsed and validated: seconds at a million tasks (see `next`).
            tokio::task::coop::consume_budget().await;
        }
        let mut gone: Vec<Vec<u8>> = known
            .keys()
            .filter(|k| !present.contains_key(*k))
            .cloned()
            .collect();
        gone.sort();
        for key in gone {
            known.remove(&key);
            let (namespace, id) = task_ids(registry.keys(), &key);
            pending.push_back(RegistryEvent::Delete {
                namespace,
                id,
                mod_revision: revision,
            });
        }
        pending.push_back(RegistryEvent::Synced { revision });
        WatchState::Resuming {
            rev: revision,
            backoff: Self::fresh_backoff(registry),
        }
    }

    /// Opens a watch from `rev + 1` and waits for etcd to confirm it; `None` when `rev + 1`
    /// is compacted.
    async fn open(
        registry: &Registry,
        rev: i64,
    ) -> Result<Option<Box<WatchStream>>, RegistryError> {
        let t = registry.config().request_timeout;
        // A watch that resumes from an older revision (or falls behind) gets etcd's catch-up
        // batches: up to 1000 revisions in one response, each as large as a transaction may
        // be. Under the client's default 4 MiB limit a batch of large transactions (100 000
        // tasks registered 128 per transaction) failed to decode, and every reconnect got the
        // same batch again: the watch never recovered. etcd bounds these responses itself.
        let mut wc = registry
            .client()
            .watch_client()
            .max_decoding_message_size(usize::MAX);
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(rev + 1);
        let mut stream = crate::error::timed(
            "watch",
            t,
            wc.watch(registry.keys().tasks_prefix(), Some(opts)),
        )
        .await?;
        // The first response confirms the watch (or says the revision is compacted);
        // events never come before it.
        let first = crate::error::timed("watch create", t, stream.message()).await?;
        match first {
            Some(resp) if resp.compact_revision() > 0 => Ok(None),
            Some(resp) if resp.canceled() => Err(RegistryError::Etcd {
                op: "watch create",
                source: etcd_client::Error::WatchError(resp.cancel_reason().to_string()),
            }),
            Some(resp) if resp.created() => Ok(Some(Box::new(stream))),
            Some(_) => Err(RegistryError::Etcd {
                op: "watch create",
                source: etcd_client::Error::WatchError("unexpected first response".into()),
            }),
            None => Err(RegistryError::Etcd {
                op: "watch create",
                source: etcd_client::Error::WatchError("watch stream closed".into()),
            }),
        }
    }
}
