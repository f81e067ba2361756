//! What a queue holds now, as the console's queue page and `GET /queues/{name}` show it.
//!
//! The queue library reads it bounded (see `ax_queue`'s `peek`); here it gets the queue's
//! pause state beside it and becomes the API's view, with attempts counted from 1. A queue ax
//! does not know of is not found, as for a pause: a typo must not answer with an empty queue.

use ax_queue::ExecutionMessage;
use ax_scheduler_core::UtcMillis;

use super::{errors, Backend};
use crate::api::{ApiError, QueueContents, QueuedExecution};

fn queued(
    m: &ExecutionMessage,
    retry_at: Option<UtcMillis>,
    worker: Option<String>,
) -> QueuedExecution {
    QueuedExecution {
        execution_id: m.execution_id,
        namespace: m.namespace.to_string(),
        task_id: m.task_id.to_string(),
        attempt: m.attempt_number(),
        fire_at: m.fire_at,
        enqueued_at: m.enqueued_at,
        priority: m.priority,
        retry_at,
        worker,
    }
}

impl Backend {
    pub(super) async fn contents_of(
        &self,
        name: &str,
        limit: usize,
    ) -> Result<QueueContents, ApiError> {
        self.known_queue(name).await?;
        let q = self.queue().await?;
        let peek = q.peek(name, limit).await.map_err(errors::queue)?;
        let paused = q.is_paused(name).await.map_err(errors::queue)?;
        Ok(QueueContents {
            name: name.to_owned(),
            paused,
            waiting_total: peek.waiting_total,
            waiting: peek.waiting.iter().map(|m| queued(m, None, None)).collect(),
            retrying_total: peek.retrying_total,
            retrying: peek
                .retrying
                .iter()
                .map(|(due, m)| queued(m, Some(*due), None))
                .collect(),
            running: peek
                .running
                .into_iter()
                .map(|(w, m)| queued(&m, None, Some(w)))
                .collect(),
        })
    }
}
