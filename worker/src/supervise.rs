//! Background loops that outlive a panic.
//!
//! A pool's loops (heartbeat, maintenance, reconcile, stop, deadlines) run for the pool's
//! life; one that panicked on a value it was handed (a message out of bounds, a bug) would
//! otherwise end silently, and what it does would stop for every execution of the pool
//! (no async attempt timed out again, no heartbeat). [`supervise`] runs a loop as a task of
//! its own, and when that task panics logs it with the message, counts it
//! (`scheduler_loop_panics_total{loop}`) and starts the loop again after a short pause, until
//! the loop returns by itself (its stop token).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::reporter::ExecutionReporter;

/// Pause before a panicked loop starts again: a loop that panics at once every time does
/// not spin.
pub(crate) const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// Runs the loop `make` builds until it returns; a panic is logged, reported to `report`
/// and the loop is built and run again after [`RESTART_PAUSE`] unless `stop` is cancelled.
pub(crate) async fn supervise<F, Fut>(
    name: &'static str,
    report: Arc<dyn ExecutionReporter>,
    stop: CancellationToken,
    mut make: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match tokio::spawn(make()).await {
            Ok(()) => return,
            Err(e) if e.is_panic() => {
                let payload = e.into_panic();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".to_owned());
                tracing::error!(loop_name = name, panic = %message, "background loop panicked; it starts again");
                report.on_loop_panic(name);
            }
            // Cancelled with the runtime: nothing to run on.
            Err(_) => return,
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RESTART_PAUSE) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reporter::{ExecutionReport, ReportFuture};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    #[derive(Default)]
    struct Panics(Mutex<Vec<String>>);

    impl ExecutionReporter for Panics {
        fn on_started<'a>(
            &'a self,
            _exec: &'a ax_queue::ExecutionMessage,
            _worker_id: &'a str,
            _at: ax_scheduler_core::UtcMillis,
        ) -> ReportFuture<'a> {
            Box::pin(async {})
        }
        fn on_finished<'a>(&'a self, _report: &'a ExecutionReport) -> ReportFuture<'a> {
            Box::pin(async {})
        }
        fn on_loop_panic(&self, name: &str) {
            self.0.lock().unwrap().push(name.to_owned());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_loop_is_counted_and_runs_again_until_it_returns() {
        let report = Arc::new(Panics::default());
        let runs = Arc::new(AtomicU32::new(0));
        let stop = CancellationToken::new();
        let counted = Arc::clone(&runs);
        supervise("test", report.clone(), stop, move || {
            let runs = Arc::clone(&counted);
            async move {
                if runs.fetch_add(1, Ordering::SeqCst) < 2 {
                    panic!("out of bounds");
                }
            }
        })
        .await;
        assert_eq!(
            runs.load(Ordering::SeqCst),
            3,
            "two panics, then a clean return"
        );
        assert_eq!(*report.0.lock().unwrap(), ["test", "test"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_pool_does_not_restart_its_loop() {
        let report = Arc::new(Panics::default());
        let stop = CancellationToken::new();
        stop.cancel();
        let runs = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&runs);
        supervise("test", report, stop, move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { panic!("always") }
        })
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
