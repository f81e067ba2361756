//! Process shutdown: one root `CancellationToken` and one `TaskTracker`.
//!
//! Every long-running task is spawned on the tracker with a child of the root token, so a
//! single cancel (SIGTERM, Ctrl-C, or a task that failed fatally) reaches all of them, and
//! `main` can wait for all of them with one deadline. Nothing is detached: a task that ignores
//! its token is reported when the deadline passes instead of being silently dropped.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The root token and tracker of the process.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    token: CancellationToken,
    tracker: TaskTracker,
    /// Why the process stops, when a task failed fatally: the process then exits non-zero,
    /// so a supervisor that restarts on failure restarts it.
    failure: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

/// Returned by [`Shutdown::wait`] when tasks were still running at the deadline.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{still_running} task(s) still running after {deadline:?}")]
pub struct ShutdownTimedOut {
    /// Tasks that had not finished.
    pub still_running: usize,
    /// The deadline that passed.
    pub deadline: Duration,
}

impl Shutdown {
    /// A fresh root token and tracker.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// The root token: cancelled when the process should stop.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// A child token for one task: cancelled with the root, cancellable on its own.
    pub fn child_token(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// The tracker, for code that spawns tasks itself.
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Asks everything to stop.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// A task failed in a way the process cannot go on from: record why (the first reason
    /// wins) and stop everything.
    pub fn fail(&self, reason: impl Into<String>) {
        if let Ok(mut failure) = self.failure.lock() {
            failure.get_or_insert_with(|| reason.into());
        }
        self.token.cancel();
    }

    /// Why the process is stopping, if a task failed.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// Spawns `make(child_token)` on the tracker.
    pub fn spawn<F, Fut>(&self, make: F) -> tokio::task::JoinHandle<Fut::Output>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future + Send + 'static,
        Fut::Output: Send + 'static,
    {
        self.tracker.spawn(make(self.child_token()))
    }

    /// Spawns the task that cancels the root token on SIGTERM or Ctrl-C (SIGINT). A second
    /// signal, [`AGAIN_AFTER`] or more after the first, ends the process at once: tokio keeps
    /// its handler installed after the first, so without this a replica stuck in its drain
    /// could be stopped by SIGKILL alone. One closer to the first is the same request sent
    /// twice (a terminal's Ctrl-C reaches the whole process group, then a script's trap sends
    /// SIGTERM) and does not cut the drain short.
    pub fn listen_for_signals(&self) -> std::io::Result<()> {
        let mut signals = Signals::new()?;
        let mut again = Signals::new()?;
        let token = self.token.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                name = signals.recv() => {
                    tracing::info!(signal = name, "stop requested, shutting down");
                    token.cancel();
                }
                () = token.cancelled() => {}
            }
        });
        // Outside the tracker: it lasts until the process ends, and must not hold up `wait`.
        tokio::spawn(async move {
            let _ = again.recv().await;
            let first = tokio::time::Instant::now();
            let name = loop {
                let name = again.recv().await;
                if is_again(first, tokio::time::Instant::now()) {
                    break name;
                }
            };
            tracing::error!(
                signal = name,
                "stop requested again while stopping; exiting now"
            );
            std::process::exit(130);
        });
        Ok(())
    }

    /// Ends the process's wait for `run` once the root token has been cancelled for
    /// `deadline`: a stop never hangs, whatever part of the drain does not end.
    pub async fn bound<T>(
        &self,
        deadline: Duration,
        run: impl Future<Output = T>,
    ) -> Result<T, ShutdownTimedOut> {
        let overdue = async {
            self.token.cancelled().await;
            tokio::time::sleep(deadline).await;
        };
        tokio::select! {
            value = run => Ok(value),
            () = overdue => Err(ShutdownTimedOut { still_running: self.tracker.len(), deadline }),
        }
    }

    /// Closes the tracker and waits until every tracked task has ended, at most `deadline`.
    pub async fn wait(&self, deadline: Duration) -> Result<(), ShutdownTimedOut> {
        self.tracker.close();
        match tokio::time::timeout(deadline, self.tracker.wait()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(ShutdownTimedOut {
                still_running: self.tracker.len(),
                deadline,
            }),
        }
    }
}

/// How long after the first stop signal another one means "now".
pub const AGAIN_AFTER: Duration = Duration::from_secs(1);

/// Whether a signal at `now` is a second request to stop, the first having come at `first`.
fn is_again(first: tokio::time::Instant, now: tokio::time::Instant) -> bool {
    now.duration_since(first) >= AGAIN_AFTER
}

/// The stop signals, registered up front so that a registration failure is reported at
/// start rather than lost in a task.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?,
            #[cfg(unix)]
            interrupt: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    #[cfg(unix)]
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }

    #[cfg(not(unix))]
    async fn recv(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "ctrl-c"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn cancelling_the_root_stops_children_and_wait_returns() {
        let s = Shutdown::new();
        let handle = s.spawn(|token| async move {
            token.cancelled().await;
            "stopped"
        });
        s.cancel();
        s.wait(Duration::from_secs(1)).await.unwrap();
        assert_eq!(handle.await.unwrap(), "stopped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_ignoring_its_token_makes_wait_time_out() {
        let s = Shutdown::new();
        s.spawn(|_token| tokio::time::sleep(Duration::from_secs(3600)));
        s.cancel();
        let err = s.wait(Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(err.still_running, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_that_outlives_the_deadline_after_a_stop_is_abandoned() {
        let s = Shutdown::new();
        let stuck = s.clone();
        let started = tokio::time::Instant::now();
        let outcome = s
            .bound(Duration::from_secs(30), async move {
                stuck.cancel();
                std::future::pending::<()>().await
            })
            .await;
        assert!(outcome.is_err());
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_counts_only_from_the_stop() {
        let s = Shutdown::new();
        let long = async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "done"
        };
        assert_eq!(s.bound(Duration::from_secs(1), long).await, Ok("done"));
    }

    #[test]
    fn a_signal_right_after_the_first_is_the_same_request() {
        let first = tokio::time::Instant::now();
        assert!(!is_again(first, first + Duration::from_millis(50)));
        assert!(is_again(first, first + AGAIN_AFTER));
    }

    #[tokio::test(start_paused = true)]
    async fn a_child_can_be_cancelled_alone() {
        let s = Shutdown::new();
        let child = s.child_token();
        child.cancel();
        assert!(!s.token().is_cancelled());
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_signal_listener_ends_when_the_token_is_cancelled() {
        let s = Shutdown::new();
        s.listen_for_signals().unwrap();
        s.cancel();
        s.wait(Duration::from_secs(5)).await.unwrap();
    }
}
