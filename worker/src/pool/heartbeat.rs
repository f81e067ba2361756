//! The heartbeat: tells every queue this worker is alive, and once it takes nothing new.
//!
//! It watches two tokens because it has two changes to make: the pool's cancellation turns
//! it into a stopping worker's heartbeat (beaten at once, so the scheduler addresses no more
//! broadcast fires to it), while it keeps beating until the background stop, after the
//! executions are done, so the reaper does not give back messages the pool still finishes.

use std::sync::Arc;

use ax_scheduler_core::UtcMillis;
use tokio_util::sync::CancellationToken;

use super::Shared;

/// One heartbeat on every queue; `stopping` once the pool takes nothing new (see
/// [`ax_queue::Queue::heartbeat_stopping`]: no broadcast fire is addressed to it then).
pub(super) async fn heartbeat_once(sh: &Shared, now: UtcMillis, stopping: bool) {
    for q in &sh.cfg.queues {
        let (id, ttl) = (&sh.cfg.worker_id, sh.cfg.heartbeat_ttl);
        let beat = if stopping {
            sh.queue.heartbeat_stopping(q, id, ttl, now).await
        } else {
            sh.queue.heartbeat(q, id, ttl, now).await
        };
        if let Err(e) = beat {
            tracing::warn!(queue = %q, error = %e, "heartbeat failed");
        }
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
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = cancel.cancelled(), if !stopping => stopping = true,
            _ = tokio::time::sleep(sh.cfg.heartbeat_interval) => {}
        }
        heartbeat_once(&sh, sh.cfg.clock.now(), stopping).await;
    }
}
