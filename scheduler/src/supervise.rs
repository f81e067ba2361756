//! The leader's long-running tasks outlive a panic: each is logged (`error`, with the loop's
//! name and the panic's message), counted (`scheduler_loop_panics_total{loop}`, through
//! [`RoleMetrics::loop_panicked`]) and then either started again or ends the term it serves,
//! which gives its key up so that a replica (this one included, after a pause) takes over
//! from what etcd and Redis hold. Without this a panic ended its task silently: a leader
//! whose firing loop died kept its lease and fired nothing for the whole cluster.
//!
//! The same design as the worker pool's `supervise` (a loop runs as a task of its own; a
//! panic is caught at its `JoinHandle`; a restart waits `RESTART_PAUSE` (a second) so a loop that
//! panics at once every time does not spin), reporting to the role's metrics seam instead
//! of the pool's reporter. It is not shared with the worker: the only crate both stand on,
//! `ax-scheduler-core`, holds no runtime, and this crate does not depend on the worker.
//!
//! Per loop ([`LOOPS`]), restarted or stepped down, and why:
//!
//! | loop | on a panic | why |
//! |---|---|---|
//! | `role` | started again | its state (the catalog, the campaign or shard ownership) is rebuilt from the registry watch, which lists everything first; the attempt's own token is cancelled with it, so its pollers and watch stop, and every term it ran stops the way a shutdown stops it (last states written, key given up) before the new attempt campaigns |
//! | `term` | steps down | the firing loop (timer wheel, fire path, worker events, deadlines, state repair, Redis and queue checks) holds the dispatcher: fires taken and not yet written, events applied and not acknowledged. Rebuilt in place it would miss what it held; the unwind drops the term's key (its lease is revoked, or its shard key deleted), and the next term, here after a pause or elsewhere, takes over from the written states, where a fire already enqueued is refused by its dedupe key and its end read from the history: a takeover, the path every failover takes |
//! | `state_flusher` | steps down | its batch (states taken from the dispatcher, events to acknowledge, alerts to send) is lost with it: the dispatcher counts those states as written, so a new flusher would leave etcd behind for good. The term gives its key up without a last flush, and the next term starts from what was written |
//! | `triggers`, `paused_namespaces` | started again | they only publish what they read from etcd; the last value stays in the channel across the restart and the next read (one interval later) brings it up to date |
//! | `direct_writes` | started again | the changes waiting for their grace are lost, as when a leader loses its lease within it (a documented limit of the check); the intake channel survives, so it goes on with the next change |
//!
//! The campaign and the clock check are started again by the role as they are (a campaign
//! that ends without an answer is started anew after a pause); their panics are counted
//! under `role`.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::RoleMetrics;

/// The role's loop, started again.
pub const ROLE: &str = "role";
/// A term's firing loop (and its takeover): the term steps down.
pub const TERM: &str = "term";
/// A term's state writer: the term steps down.
pub const STATE_FLUSHER: &str = "state_flusher";
/// The run-now poller, started again.
pub const TRIGGERS: &str = "triggers";
/// The paused-namespaces poller, started again.
pub const PAUSED_NAMESPACES: &str = "paused_namespaces";
/// A term's check of direct etcd writes, started again.
pub const DIRECT_WRITES: &str = "direct_writes";
/// A term's watch on its clock, started again.
pub const CLOCK_WATCH: &str = "clock_watch";

/// Every `loop` value the role reports, for a replica to create its series at 0 (the same
/// list as `ax_metrics::names::LEADER_LOOPS`).
pub const LOOPS: &[&str] = &[
    ROLE,
    TERM,
    STATE_FLUSHER,
    TRIGGERS,
    PAUSED_NAMESPACES,
    DIRECT_WRITES,
    CLOCK_WATCH,
];

/// Pause before a panicked loop starts again: a loop that panics at once every time does
/// not spin.
pub(crate) const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// Runs `task` on `tracker` as a task of its own and waits for it: its output, or `None`
/// when it panicked (logged and counted as `name`) or was cancelled with the runtime.
pub(crate) async fn watch<T, Fut>(
    name: &'static str,
    metrics: &dyn RoleMetrics,
    tracker: &TaskTracker,
    task: Fut,
) -> Option<T>
where
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    match tracker.spawn(task).await {
        Ok(output) => Some(output),
        Err(e) if e.is_panic() => {
            let message = panic_message(&*e.into_panic());
            tracing::error!(loop_name = name, panic = %message, "scheduler loop panicked");
            metrics.loop_panicked(name);
            None
        }
        // Cancelled with the runtime: nothing to run on.
        Err(_) => None,
    }
}

/// Runs the loop `make` builds until it returns; a panic is logged and counted, and the
/// loop is built and run again after [`RESTART_PAUSE`] unless `stop` is cancelled.
pub(crate) async fn supervise<F, Fut>(
    name: &'static str,
    metrics: Arc<dyn RoleMetrics>,
    tracker: TaskTracker,
    stop: CancellationToken,
    mut make: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        if watch(name, &*metrics, &tracker, make()).await.is_some() {
            return;
        }
        tracing::warn!(loop_name = name, pause = ?RESTART_PAUSE, "starting the loop again");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RESTART_PAUSE) => {}
        }
    }
}

/// A panic's message, when it has one.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::metrics::{Backend, RoleMetrics};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    /// Metrics that keep the loop panics reported, and nothing else.
    #[derive(Default)]
    pub(crate) struct Panics(Mutex<Vec<String>>);

    impl Panics {
        /// The loops that panicked, in order.
        pub(crate) fn loops(&self) -> Vec<String> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
        }
    }

    impl RoleMetrics for Panics {
        fn backend_error(&self, _: Backend) {}
        fn scheduled(&self, _: &str) {}
        fn set_leader(&self, _: bool) {}
        fn set_shards_owned(&self, _: usize) {}
        fn set_invalid_specs(&self, _: usize) {}
        fn set_paused_tasks(&self, _: usize) {}
        fn set_paused_namespaces(&self, _: usize) {}
        fn throttled_tasks_changed(&self, _: i64) {}
        fn set_undecodable_states(&self, _: usize) {}
        fn set_unserved_queues(&self, _: usize) {}
        fn deadline_misses(&self, _: &str, _: u64) {}
        fn state_repairs(&self, _: &str, _: u64) {}
        fn loop_panicked(&self, name: &str) {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(name.to_owned());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_loop_is_counted_and_runs_again_until_it_returns() {
        let metrics = Arc::new(Panics::default());
        let runs = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&runs);
        let started = tokio::time::Instant::now();
        supervise(
            TRIGGERS,
            metrics.clone(),
            TaskTracker::new(),
            CancellationToken::new(),
            move || {
                let runs = Arc::clone(&counted);
                async move {
                    if runs.fetch_add(1, Ordering::SeqCst) < 2 {
                        panic!("out of bounds");
                    }
                }
            },
        )
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 3, "two panics, then a return");
        assert_eq!(metrics.loops(), [TRIGGERS, TRIGGERS]);
        assert!(
            started.elapsed() >= RESTART_PAUSE * 2,
            "paused between runs"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_role_does_not_start_its_loop_again() {
        let metrics = Arc::new(Panics::default());
        let stop = CancellationToken::new();
        stop.cancel();
        let runs = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&runs);
        supervise(ROLE, metrics.clone(), TaskTracker::new(), stop, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { panic!("always") }
        })
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(metrics.loops(), [ROLE]);
    }

    #[test]
    fn loop_names_are_distinct_from_the_worker_pools() {
        let worker = ["heartbeat", "maintenance", "reconcile", "stop", "deadline"];
        for name in LOOPS {
            assert!(!worker.contains(name), "{name} is a worker loop's name too");
        }
    }
}
