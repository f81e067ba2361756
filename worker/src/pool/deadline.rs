//! The deadline loop: ends what no worker will end by itself.
//!
//! Two kinds of message wait in Redis with no execution behind them: `http.async` attempts
//! awaiting past their deadline, and broadcast messages addressed to a worker that is gone.
//! Every pool runs this loop on the maintenance period, and Redis hands each such message
//! to one of them, which reports its end as it reports its own attempts' ends.

use std::sync::Arc;

use ax_scheduler_core::{AttemptEnd, AttemptOutcome};
use tokio_util::sync::CancellationToken;

use super::settle::{dead_letter, publish, Ending};
use super::Shared;

/// Ends the attempts of this pool's queues that waited for a completion past their
/// deadline (see [`crate::awaiting::expire_due`]), reporting each as the pool reports its
/// own ends. Every pool runs it; each attempt is ended by one of them.
pub(super) async fn deadline_loop(sh: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(sh.cfg.maintenance_interval) => {}
        }
        for q in &sh.cfg.queues {
            let now = sh.cfg.clock.now();
            match crate::awaiting::expire_due(&sh.queue, q, now, sh.cfg.record_history).await {
                Ok(ended) => {
                    for ended in ended {
                        tracing::warn!(
                            execution_id = %ended.report.execution_id,
                            attempt = ended.report.attempt.saturating_add(1),
                            "no completion by the deadline"
                        );
                        publish(&sh, ended).await;
                    }
                }
                Err(e) => {
                    tracing::debug!(queue = %q, error = %e, "cannot end expired waiting attempts")
                }
            }
            end_orphans(&sh, q).await;
        }
    }
}

/// Orphans one round of [`end_orphans`] ends per queue.
const ORPHAN_BATCH: usize = 100;

/// Ends the messages of `queue` addressed to a worker that is gone (a broadcast fire's
/// pieces, see [`ax_queue::Queue::take_orphans`]): none may run on another worker, which
/// runs its own copy, so each fails for good, as an attempt of the worker it was addressed
/// to (dead letter, history, the leader's event), and its fire can end.
async fn end_orphans(sh: &Shared, queue: &str) {
    let orphans = match sh
        .queue
        .take_orphans(queue, &sh.cfg.worker_id, ORPHAN_BATCH)
        .await
    {
        Ok(orphans) => orphans,
        Err(e) => {
            tracing::debug!(queue, error = %e, "cannot take the orphans of gone workers");
            return;
        }
    };
    for d in orphans {
        let msg = &d.message;
        let worker = msg.lineage.target_worker.clone().unwrap_or_default();
        let reason =
            format!("worker {worker} is gone: a broadcast execution runs only on its worker");
        let now = sh.cfg.clock.now();
        tracing::warn!(execution_id = %msg.execution_id, attempt = msg.attempt_number(), %worker, "{reason}");
        sh.reporter.on_started(msg, &worker, now).await;
        let end = AttemptEnd {
            outcome: AttemptOutcome::Failed,
            error: Some(reason.clone()),
            retry_at: None,
        };
        let ending = Ending {
            d: &d,
            worker: &worker,
            started: now,
            output: None,
        };
        dead_letter(sh, &ending, &reason, end, now).await;
    }
}
