//! The second way to a cluster: `/api/v1` of any `ax serve` replica, with a bearer token, for
//! a program outside the network of etcd and Redis.
//!
//! Every call is one request to the route the console and the CLI's backend answer from
//! (`docs/openapi.json`), so the replica runs the same validation before any write (every
//! problem of a spec at once, a handler no live worker serves) and records the audit entry
//! under the token's name. An error response is read back into the same [`ApiError`] the
//! backend returns, by its stable `code` ([`ApiError::from_code`]); a request that got no
//! answer is [`ControlError::Connect`] (retryable).

use crate::api::{
    ApiError, BackfillParams, BackfillResult, ErrorBody, ExecutionRecord, KillResult, PutOptions,
    PutTaskResult, RescheduleRequest, ScheduleBatch, ScheduleReply, ScheduledPage, ScheduledView,
    TaskList, TaskQuery, TaskView, TriggerParams, TriggerResult, CONTINUE_HEADER,
};
use ax_scheduler_core::ExecutionId;
use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;

use crate::error::ControlError;

type Result<T> = std::result::Result<T, ControlError>;

/// A replica's `/api/v1` and the token to call it with.
pub struct HttpApi {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl HttpApi {
    /// The API under `base` (`https://ax.example.com`, with or without `/api/v1`).
    pub fn new(base: &str, token: &str) -> Result<Self> {
        let base = base.trim_end_matches('/');
        let base = base.strip_suffix("/api/v1").unwrap_or(base);
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ControlError::Config(format!(
                "the API's URL must start with http:// or https://: {base}"
            )));
        }
        if token.trim().is_empty() {
            return Err(ControlError::Config("the API needs a token".into()));
        }
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| ControlError::Config(format!("HTTP client: {e}")))?;
        Ok(HttpApi {
            http,
            base: format!("{base}/api/v1"),
            token: token.trim().to_owned(),
        })
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    fn task(namespace: &str, id: &str, tail: &str) -> String {
        format!("/tasks/{}/{}{tail}", enc(namespace), enc(id))
    }

    /// The path of scheduled execution `id` (`QUEUE/EXECUTION_ID`; a partition's name holds
    /// `#`, encoded).
    fn scheduled_path(id: &str, tail: &str) -> Result<String> {
        let (queue, execution) = id.rsplit_once('/').ok_or_else(|| {
            ControlError::Api(ApiError::invalid(format!(
                "`{id}` is not a scheduled id (QUEUE/EXECUTION_ID)"
            )))
        })?;
        Ok(format!(
            "/scheduled/{}/{}{tail}",
            enc(queue),
            enc(execution)
        ))
    }

    /// Schedules a batch of executions (`POST /scheduled`).
    pub async fn schedule(&self, batch: &ScheduleBatch) -> Result<ScheduleReply> {
        Self::call(self.request(Method::POST, "/scheduled").json(batch)).await
    }

    /// A scheduled execution as it waits (`GET /scheduled/{queue}/{id}`).
    pub async fn scheduled(&self, id: &str) -> Result<ScheduledView> {
        Self::call(self.request(Method::GET, &Self::scheduled_path(id, "")?)).await
    }

    /// Cancels a scheduled execution (`DELETE /scheduled/{queue}/{id}`).
    pub async fn cancel_scheduled(&self, id: &str) -> Result<ScheduledView> {
        Self::call(self.request(Method::DELETE, &Self::scheduled_path(id, "")?)).await
    }

    /// Moves a scheduled execution (`POST /scheduled/{queue}/{id}/move`).
    pub async fn reschedule(&self, id: &str, to: &RescheduleRequest) -> Result<ScheduledView> {
        let path = Self::scheduled_path(id, "/move")?;
        Self::call(self.request(Method::POST, &path).json(to)).await
    }

    /// A page of a queue's scheduled executions (`GET /queues/{name}/scheduled`).
    pub async fn scheduled_page(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<ScheduledPage> {
        let path = format!("/queues/{}/scheduled", enc(queue));
        let mut req = self.request(Method::GET, &path).query(&[("limit", limit)]);
        if let Some(after) = after {
            req = req.query(&[("after", after)]);
        }
        Self::call(req).await
    }

    /// Sends `req` and reads a success as a `T`, an error response as its [`ApiError`].
    async fn call<T: DeserializeOwned>(req: RequestBuilder) -> Result<T> {
        let response = send(req).await?;
        if response.status().is_success() {
            return response.json::<T>().await.map_err(|e| {
                ControlError::Api(ApiError::Internal(format!("unexpected API answer: {e}")))
            });
        }
        Err(ControlError::Api(api_error(response).await))
    }

    /// Creates or replaces the task `doc` describes (`POST /tasks`).
    pub async fn put(&self, doc: serde_json::Value, options: &PutOptions) -> Result<PutTaskResult> {
        let req = self
            .request(Method::POST, "/tasks")
            .query(options)
            .json(&doc);
        Self::call(req).await
    }

    /// The task `namespace/id` with its state (`GET /tasks/{ns}/{id}`).
    pub async fn get(&self, namespace: &str, id: &str) -> Result<TaskView> {
        Self::call(self.request(Method::GET, &Self::task(namespace, id, ""))).await
    }

    /// Deletes the task `namespace/id` (`DELETE /tasks/{ns}/{id}`).
    pub async fn delete(&self, namespace: &str, id: &str) -> Result<()> {
        // Answered with no body (204).
        let req = self.request(Method::DELETE, &Self::task(namespace, id, ""));
        let response = send(req).await?;
        if response.status().is_success() {
            return Ok(());
        }
        Err(ControlError::Api(api_error(response).await))
    }

    /// The route answers the page's tasks as an array and the next page's token in a
    /// header.
    pub async fn list(&self, query: &TaskQuery) -> Result<TaskList> {
        let req = self.request(Method::GET, "/tasks").query(query);
        let response = send(req).await?;
        if !response.status().is_success() {
            return Err(ControlError::Api(api_error(response).await));
        }
        let continue_token = response
            .headers()
            .get(CONTINUE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let items = response.json().await.map_err(|e| {
            ControlError::Api(ApiError::Internal(format!("unexpected API answer: {e}")))
        })?;
        Ok(TaskList {
            items,
            continue_token,
        })
    }

    /// Runs the task now, with `params` (`POST .../trigger`).
    pub async fn trigger(
        &self,
        namespace: &str,
        id: &str,
        params: &TriggerParams,
    ) -> Result<TriggerResult> {
        let path = Self::task(namespace, id, "/trigger");
        Self::call(self.request(Method::POST, &path).json(params)).await
    }

    /// A state change of the task by the route's last word `what` (`pause`, `resume`).
    pub async fn control(&self, namespace: &str, id: &str, what: &str) -> Result<TaskView> {
        let path = Self::task(namespace, id, &format!("/{what}"));
        Self::call(self.request(Method::POST, &path)).await
    }

    /// Kills the task's running execution, or `execution` of it (`POST .../kill`).
    pub async fn kill(
        &self,
        namespace: &str,
        id: &str,
        execution: Option<ExecutionId>,
    ) -> Result<KillResult> {
        let mut req = self.request(Method::POST, &Self::task(namespace, id, "/kill"));
        if let Some(e) = execution {
            req = req.query(&[("execution", e.to_string())]);
        }
        Self::call(req).await
    }

    /// The task's last `limit` executions, newest first (`GET .../history`).
    pub async fn history(
        &self,
        namespace: &str,
        id: &str,
        limit: usize,
    ) -> Result<Vec<ExecutionRecord>> {
        let path = Self::task(namespace, id, "/history");
        let req = self.request(Method::GET, &path).query(&[("limit", limit)]);
        Self::call(req).await
    }

    /// Runs the task's missed fires of a past range (`POST .../backfill`).
    pub async fn backfill(
        &self,
        namespace: &str,
        id: &str,
        params: &BackfillParams,
    ) -> Result<BackfillResult> {
        let path = Self::task(namespace, id, "/backfill");
        Self::call(self.request(Method::POST, &path).json(params)).await
    }
}

/// `s` as one path segment.
fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Sends `req`; no answer at all (refused, reset, timed out) may pass when tried again.
async fn send(req: RequestBuilder) -> Result<Response> {
    req.send()
        .await
        .map_err(|e| ControlError::Connect(format!("the API did not answer: {e}")))
}

/// The [`ApiError`] an error response stands for, by its `code`.
async fn api_error(response: Response) -> ApiError {
    let status = response.status();
    let retry_after_s = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let text = response.text().await.unwrap_or_default();
    let Ok(body) = serde_json::from_str::<ErrorBody>(&text) else {
        let message = format!(
            "HTTP {status}: {}",
            text.chars().take(200).collect::<String>()
        );
        return if status.is_server_error() {
            ApiError::Unavailable(message)
        } else {
            ApiError::Internal(message)
        };
    };
    body.into_error(status, retry_after_s)
}
