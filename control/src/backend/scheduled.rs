//! Scheduled executions over Redis: the backend's side of `crate::api::scheduled`, a thin
//! layer over `ax_queue`'s scheduled set (ids drawn and requests checked here, nothing
//! written to etcd).

use ax_queue::new_execution_id;
use ax_scheduler_core::UtcMillis;

use super::{errors, Backend};
use crate::api::{
    page_cursor, parse_page_cursor, parse_scheduled_id, ApiError, ScheduleBatch, ScheduleReply,
    ScheduleResult, ScheduledPage, ScheduledView,
};

impl Backend {
    pub(super) async fn schedule_batch(
        &self,
        batch: ScheduleBatch,
        actor: Option<String>,
    ) -> Result<ScheduleReply, ApiError> {
        let now = self.wall.now();
        let submissions = batch.submissions(now, actor.as_deref())?;
        let queue = self.queue().await?;
        let msgs: Vec<_> = submissions
            .iter()
            .map(|s| s.message(new_execution_id(), now))
            .collect();
        let outcomes = queue.schedule_batch(&msgs).await.map_err(errors::queue)?;
        Ok(ScheduleReply {
            scheduled: outcomes
                .iter()
                .zip(&submissions)
                .map(|(o, s)| ScheduleResult::of(o, s.due))
                .collect(),
        })
    }

    pub(super) async fn scheduled_view(&self, id: &str) -> Result<ScheduledView, ApiError> {
        let r = parse_scheduled_id(id)?;
        let queue = self.queue().await?;
        match queue.scheduled(&r).await.map_err(errors::queue)? {
            Some(entry) => Ok(ScheduledView::of(&entry)),
            None => Err(not_scheduled(id)),
        }
    }

    pub(super) async fn cancel(&self, id: &str) -> Result<ScheduledView, ApiError> {
        let r = parse_scheduled_id(id)?;
        let queue = self.queue().await?;
        // The view before the cancel: the cancel itself answers only the message.
        let Some(entry) = queue.scheduled(&r).await.map_err(errors::queue)? else {
            return Err(not_scheduled(id));
        };
        match queue.cancel_scheduled(&r).await.map_err(errors::queue)? {
            Some(_) => Ok(ScheduledView::of(&entry)),
            None => Err(not_scheduled(id)),
        }
    }

    pub(super) async fn move_to(
        &self,
        id: &str,
        due: UtcMillis,
    ) -> Result<ScheduledView, ApiError> {
        let r = parse_scheduled_id(id)?;
        let queue = self.queue().await?;
        if !queue.reschedule(&r, due).await.map_err(errors::queue)? {
            return Err(not_scheduled(id));
        }
        self.scheduled_view(id).await
    }

    pub(super) async fn scheduled_listing(
        &self,
        name: &str,
        after: Option<String>,
        limit: usize,
    ) -> Result<ScheduledPage, ApiError> {
        if !ax_queue::keys::validate_name(name) {
            return Err(ApiError::invalid(format!(
                "queue: `{name}` is not a queue name"
            )));
        }
        let after = after.as_deref().map(parse_page_cursor).transpose()?;
        let queue = self.queue().await?;
        let total = queue.scheduled_count(name).await.map_err(errors::queue)?;
        let entries = queue
            .scheduled_page(name, after, limit)
            .await
            .map_err(errors::queue)?;
        let continue_token = (entries.len() >= limit)
            .then(|| entries.last())
            .flatten()
            .map(|e| page_cursor(e.due, e.reference.execution_id));
        Ok(ScheduledPage {
            total,
            items: entries.iter().map(ScheduledView::of).collect(),
            continue_token,
        })
    }
}

fn not_scheduled(id: &str) -> ApiError {
    ApiError::NotFound(format!(
        "no scheduled execution {id}: it ran (see `ax execution get`), was cancelled, or never was"
    ))
}
