//! Scheduled executions from code: run a handler once at an instant or after a delay, kept
//! in Redis until due (no etcd key per execution), and cancel, move, read or list them.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use ax_sdk::{Client, Config, TaskOptions};
//! use serde_json::json;
//!
//! # async fn place(order: u64) -> Result<(), ax_sdk::Error> {
//! let config = Config::redis("redis://127.0.0.1:6379").etcd(["http://127.0.0.1:2379"]);
//! let client = Client::connect(&config).await?.actor("shop");
//! // Close the order in 30 minutes unless it is paid; the key makes a retried request
//! // schedule it once.
//! let close = client
//!     .schedule_after(
//!         "shop",
//!         "orders.close",
//!         &json!({"order": order}),
//!         Duration::from_secs(30 * 60),
//!         TaskOptions::new().idempotency_key(format!("close-{order}")),
//!     )
//!     .await?;
//! // Paid: it must not run.
//! client.cancel_scheduled(&close.id).await?;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use ax_control::api::{
    Instant, RescheduleRequest, ScheduleBatch, ScheduleRequest, ScheduleResult, ScheduledPage,
    ScheduledView,
};
use ax_scheduler_core::{TaskOptions, UtcMillis};
use serde::Serialize;

use super::{Client, Via};
use crate::error::{Error, Result};

impl Client {
    /// Schedules `handler` of `namespace` to run once `after` from now with `payload`, on the
    /// default queue, with `options` (priority, timeout, retry, idempotency key; a task's
    /// schedule-only settings are refused). Answers its id, which cancel and move take.
    pub async fn schedule_after(
        &self,
        namespace: &str,
        handler: &str,
        payload: &impl Serialize,
        after: Duration,
        options: TaskOptions,
    ) -> Result<ScheduleResult> {
        let mut request = request(namespace, handler, payload, options)?;
        request.after = Some(after);
        self.schedule_one(request).await
    }

    /// [`Client::schedule_after`] for an instant.
    pub async fn schedule_at(
        &self,
        namespace: &str,
        handler: &str,
        payload: &impl Serialize,
        at: UtcMillis,
        options: TaskOptions,
    ) -> Result<ScheduleResult> {
        let mut request = request(namespace, handler, payload, options)?;
        request.at = Some(Instant::Millis(at.0));
        self.schedule_one(request).await
    }

    async fn schedule_one(&self, request: ScheduleRequest) -> Result<ScheduleResult> {
        self.schedule(vec![request])
            .await?
            .pop()
            .ok_or_else(|| Error::Config("the cluster answered no result".into()))
    }

    /// Schedules up to 1000 executions in one call (one round trip to Redis), each as its
    /// request says (queue, name, `at` or `after`, options); checked whole first, every
    /// problem of every request at once. Answers in order.
    pub async fn schedule(&self, requests: Vec<ScheduleRequest>) -> Result<Vec<ScheduleResult>> {
        let batch = ScheduleBatch {
            executions: requests,
        };
        let reply = match &self.via {
            Via::Backend(b) => self.operations(b).schedule(batch).await?,
            Via::Http(api) => api.schedule(&batch).await?,
        };
        Ok(reply.scheduled)
    }

    /// A scheduled execution as it waits; `ApiError::NotFound` once it ran or was cancelled.
    pub async fn scheduled(&self, id: &str) -> Result<ScheduledView> {
        match &self.via {
            Via::Backend(b) => {
                use ax_control::api::ApiBackend;
                Ok(b.scheduled(id.to_owned()).await?)
            }
            Via::Http(api) => Ok(api.scheduled(id).await?),
        }
    }

    /// Cancels a scheduled execution before it runs; what it was.
    pub async fn cancel_scheduled(&self, id: &str) -> Result<ScheduledView> {
        match &self.via {
            Via::Backend(b) => Ok(self.operations(b).cancel_scheduled(id.to_owned()).await?),
            Via::Http(api) => Ok(api.cancel_scheduled(id).await?),
        }
    }

    /// Moves a scheduled execution to run `after` from now instead; what it is now.
    pub async fn reschedule_after(&self, id: &str, after: Duration) -> Result<ScheduledView> {
        let to = RescheduleRequest {
            at: None,
            after: Some(after),
        };
        match &self.via {
            Via::Backend(b) => {
                use ax_control::api::ApiBackend;
                let due = to.due(b.now())?;
                Ok(self.operations(b).reschedule(id.to_owned(), due).await?)
            }
            Via::Http(api) => Ok(api.reschedule(id, &to).await?),
        }
    }

    /// A page of `queue`'s scheduled executions, soonest first, after the cursor `after`
    /// (the last page's `continue`), at most `limit` (1 to 1000).
    pub async fn scheduled_page(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<ScheduledPage> {
        match &self.via {
            Via::Backend(b) => {
                use ax_control::api::ApiBackend;
                Ok(
                    b.scheduled_page(queue.to_owned(), after.map(str::to_owned), limit)
                        .await?,
                )
            }
            Via::Http(api) => Ok(api.scheduled_page(queue, after, limit).await?),
        }
    }
}

fn request(
    namespace: &str,
    handler: &str,
    payload: &impl Serialize,
    options: TaskOptions,
) -> Result<ScheduleRequest> {
    let payload = serde_json::to_value(payload)
        .map_err(|e| Error::Config(format!("the payload is not JSON: {e}")))?;
    // The request carries no such field, so the server could not refuse it: say so here.
    if options.sets_schedule_only() {
        return Err(Error::Config(
            "misfire, overlap and expect_success_within apply to a task's schedule, not to one execution"
                .into(),
        ));
    }
    Ok(ScheduleRequest {
        namespace: namespace.to_owned(),
        handler: handler.to_owned(),
        payload,
        priority: Some(options.priority),
        timeout: Some(options.timeout),
        retry: Some(options.retry),
        idempotency_key: options.idempotency_key,
        ..ScheduleRequest::default()
    })
}
