//! The heartbeat: tells every queue this worker is alive, and once it takes nothing new.
//!
//! It watches two tokens because it has two changes to make: the pool's cancellation turns
//! it into a stopping worker's heartbeat (beaten at once, so the scheduler addresses no more
//! broadcast fires to it), while it keeps beating until the background stop, after the
//! executions are done, so the reaper does not give back messages the pool still finishes.
//!
//! It is also how the pool knows it can reach Redis. A worker cut from Redis cannot beat, and
//! once its last heartbeat is older than the visibility timeout the reaper (run by any other
//! worker) gives its messages to others: if it still ran them, each would run twice. So past
//! [`abandon_after`] without a heartbeat taken, it marks Redis lost, and every attempt in
//! hand stops (its handler cancelled, given its stop grace) or never starts, left unsettled
//! for the reaper, each logged and reported; it takes again at the first heartbeat taken.

use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::UtcMillis;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;

/// One heartbeat on every queue; `stopping` once the pool takes nothing new (see
/// [`ax_queue::Queue::heartbeat_stopping`]: no broadcast fire is addressed to it then).
/// Whether every queue took it, each within the heartbeat's TTL.
pub(super) async fn heartbeat_once(sh: &Shared, now: UtcMillis, stopping: bool) -> bool {
    let mut all = true;
    for q in &sh.cfg.queues {
        let (id, ttl) = (&sh.cfg.worker_id, sh.cfg.heartbeat_ttl);
        let beat = async {
            if stopping {
                sh.queue.heartbeat_stopping(q, id, ttl, now).await
            } else {
                sh.queue.heartbeat(q, id, ttl, now).await
            }
        };
        let error = match tokio::time::timeout(ttl, beat).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {ttl:?}"),
        };
        all = false;
        tracing::warn!(queue = %q, %error, "heartbeat failed");
    }
    all
}

/// How long without a heartbeat taken before the pool abandons what it holds: the
/// visibility timeout (when the reaper gives its messages back) less a margin for the
/// handlers to stop, a sixth of it and at least two heartbeat intervals.
pub(super) fn abandon_after(sh: &Shared) -> Duration {
    let vt = sh.cfg.visibility_timeout;
    vt.saturating_sub((vt / 6).max(sh.cfg.heartbeat_interval * 2))
}

/// Marks Redis lost once no heartbeat was taken for [`abandon_after`] (every attempt in hand
/// then stops, unsettled), and found again at the first heartbeat taken.
fn track_reach(sh: &Shared, beat: bool, last_taken: &mut Instant) {
    let lost = *sh.redis_lost.borrow();
    if beat {
        *last_taken = Instant::now();
        if lost {
            tracing::info!("Redis takes heartbeats again: taking executions again");
            sh.redis_lost.send_replace(false);
        }
        return;
    }
    let silent = last_taken.elapsed();
    if !lost && silent >= abandon_after(sh) {
        let held = sh
            .in_hand
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        tracing::error!(
            silent_ms = u64::try_from(silent.as_millis()).unwrap_or(u64::MAX),
            visibility_timeout_ms = u64::try_from(sh.cfg.visibility_timeout.as_millis()).unwrap_or(u64::MAX),
            held,
            "Redis has taken no heartbeat for most of the visibility timeout: abandoning the executions in hand, unsettled, before the reaper gives them to another worker"
        );
        sh.redis_lost.send_replace(true);
    }
}

/// Beats until `stop`; from `cancel` on (the pool takes nothing new) as a stopping worker,
/// at once and then at every interval.
pub(super) async fn heartbeat_loop(
    sh: Arc<Shared>,
    cancel: CancellationToken,
    stop: CancellationToken,
) {
    let mut stopping = false;
    let mut last_taken = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = cancel.cancelled(), if !stopping => stopping = true,
            _ = tokio::time::sleep(sh.cfg.heartbeat_interval) => {}
        }
        // Bounded by the interval: a silent Redis must not hold the count of its silence up.
        let beat = tokio::time::timeout(
            sh.cfg.heartbeat_interval,
            heartbeat_once(&sh, sh.cfg.clock.now(), stopping),
        )
        .await
        .unwrap_or(false);
        track_reach(&sh, beat, &mut last_taken);
    }
}
