//! What a replica checks before it seeks authority (a campaign, or joining the shard
//! ownership): that Redis answers, and that its clock agrees with etcd's. Each waits, logging
//! once, until it passes or the role stops; neither is ever skipped silently.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::clock::{ClockProbe, CLOCK_RECHECK};
use crate::metrics::{Backend, RoleMetrics};
use crate::supervise::{self, ROLE};
use crate::{LeaderDeps, LeaderSettings};

/// Waits until Redis answers one bounded round trip; false when cancelled first. A replica
/// that cannot reach Redis would win the election and then enqueue nothing while replicas
/// that can reach it stand by: it does not campaign until Redis answers.
pub(super) async fn wait_for_redis(
    queue: &dyn crate::backend::TermQueue,
    cancel: &CancellationToken,
) -> bool {
    use crate::term::REDIS_PROBE_TIMEOUT as REDIS_PROBE;
    let mut silent = false;
    loop {
        let error = match tokio::time::timeout(REDIS_PROBE, queue.ping(None)).await {
            Ok(Ok(())) => {
                if silent {
                    info!("Redis answers again: campaigning");
                }
                return true;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {REDIS_PROBE:?}"),
        };
        if !silent {
            warn!(%error, "cannot reach Redis: not campaigning until it answers");
            silent = true;
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(REDIS_PROBE) => {}
        }
    }
}

/// The check that this host's clock agrees with etcd's, before the role schedules.
#[derive(Clone)]
pub(super) struct ClockAgreement {
    probe: Option<Arc<dyn ClockProbe>>,
    /// The clock the role fires by, which is the one checked.
    clock: Arc<dyn crate::clock::Clock>,
    max_skew: Duration,
    metrics: Arc<dyn RoleMetrics>,
}

impl ClockAgreement {
    pub(super) fn of(settings: &LeaderSettings, deps: &LeaderDeps) -> Self {
        ClockAgreement {
            probe: deps.clock_check.clone(),
            clock: Arc::clone(&deps.clock),
            max_skew: settings.max_clock_skew,
            metrics: Arc::clone(&deps.metrics),
        }
    }

    /// [`ClockAgreement::wait`] in a task of its own, started again after a pause when it
    /// panics (counted under `role`).
    pub(super) async fn wait_supervised(&self, cancel: &CancellationToken) -> bool {
        let tracker = tokio_util::task::TaskTracker::new();
        loop {
            let (check, stop) = (self.clone(), cancel.clone());
            let waited = async move { check.wait(&stop).await };
            if let Some(agreed) =
                supervise::watch(ROLE, &*self.metrics, &tracker, waited.in_current_span()).await
            {
                return agreed;
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(supervise::RESTART_PAUSE) => {}
            }
        }
    }

    /// Waits until the clocks agree; false when cancelled first. A replica whose clock
    /// disagrees would fire early or late for everyone: it does not schedule until the
    /// clocks agree.
    async fn wait(&self, cancel: &CancellationToken) -> bool {
        let Some(probe) = &self.probe else {
            return true;
        };
        let max_skew = self.max_skew;
        loop {
            match probe.skew(&*self.clock).await {
                Ok(skew) if skew.abs() <= max_skew.as_secs_f64() => return true,
                Ok(skew) => warn!(
                    skew_seconds = skew,
                    max_seconds = max_skew.as_secs_f64(),
                    "clock skew against etcd is too large: refusing to schedule; fix NTP on this host"
                ),
                Err(e) => {
                    // The check guards against a bad clock, not a bad etcd: scheduling goes
                    // on without it (the gRPC client may well reach etcd), but never
                    // unannounced.
                    self.metrics.backend_error(Backend::Etcd);
                    warn!(
                        error = %e,
                        "cannot check this host's clock against etcd's (scheduler.max_clock_skew); going on without the check"
                    );
                    return true;
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(CLOCK_RECHECK) => {}
            }
        }
    }
}
