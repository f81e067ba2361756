//! The client's second way to a cluster: `/api/v1` of any `ax serve` replica, with a
//! bearer token, for a service outside the network of etcd and Redis.
//!
//! Every call is one request to the route the console and the CLI's backend answer from
//! (`docs/openapi.json`), so the replica runs the same validation before any write (every
//! problem of a spec at once, a handler no live worker serves) and records the audit entry
//! under the token's name. An error response is read back into the same [`ApiError`] the
//! backend mode returns, by its stable `code`; a request that got no answer is
//! [`Error::Connect`] (retryable).

use ax_engine::api::{
    ApiError, KillResult, LimitKind, PutTaskResult, TaskList, TaskQuery, TaskView, TriggerParams,
    TriggerResult,
};
use ax_engine::api::{BackfillParams, BackfillResult, ExecutionRecord};
use ax_engine::http::routes::CONTINUE_HEADER;
use ax_scheduler_core::ExecutionId;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::{Error, Result};

/// A replica's `/api/v1` and the token to call it with.
pub(crate) struct HttpApi {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// The error shape of every route: `{"error": {"code", "message", "errors"}}`.
#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    code: String,
    message: String,
    #[serde(default)]
    errors: Vec<String>,
}

impl HttpApi {
    /// The API under `base` (`https://ax.example.com`, with or without `/api/v1`).
    pub(crate) fn new(base: &str, token: &str) -> Result<Self> {
        let base = base.trim_end_matches('/');
        let base = base.strip_suffix("/api/v1").unwrap_or(base);
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Config(format!(
                "the API's URL must start with http:// or https://: {base}"
            )));
        }
        if token.trim().is_empty() {
            return Err(Error::Config("the API needs a token".into()));
        }
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| Error::Config(format!("HTTP client: {e}")))?;
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
        let enc = |s: &str| {
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        format!("/tasks/{}/{}{tail}", enc(namespace), enc(id))
    }

    /// Sends `req` and reads a success as a `T`, an error response as its [`ApiError`].
    async fn call<T: DeserializeOwned>(req: RequestBuilder) -> Result<T> {
        let response = send(req).await?;
        if response.status().is_success() {
            return response.json::<T>().await.map_err(|e| {
                Error::Api(ApiError::Internal(format!("unexpected API answer: {e}")))
            });
        }
        Err(Error::Api(api_error(response).await))
    }

    pub(crate) async fn put(&self, doc: serde_json::Value) -> Result<PutTaskResult> {
        Self::call(self.request(Method::POST, "/tasks").json(&doc)).await
    }

    pub(crate) async fn get(&self, namespace: &str, id: &str) -> Result<TaskView> {
        Self::call(self.request(Method::GET, &Self::task(namespace, id, ""))).await
    }

    pub(crate) async fn delete(&self, namespace: &str, id: &str) -> Result<()> {
        // Answered with no body (204).
        let req = self.request(Method::DELETE, &Self::task(namespace, id, ""));
        let response = send(req).await?;
        if response.status().is_success() {
            return Ok(());
        }
        Err(Error::Api(api_error(response).await))
    }

    /// The route answers the page's tasks as an array and the next page's token in a
    /// header.
    pub(crate) async fn list(&self, query: &TaskQuery) -> Result<TaskList> {
        let req = self.request(Method::GET, "/tasks").query(query);
        let response = send(req).await?;
        if !response.status().is_success() {
            return Err(Error::Api(api_error(response).await));
        }
        let continue_token = response
            .headers()
            .get(CONTINUE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let items = response
            .json()
            .await
            .map_err(|e| Error::Api(ApiError::Internal(format!("unexpected API answer: {e}"))))?;
        Ok(TaskList {
            items,
            continue_token,
        })
    }

    pub(crate) async fn trigger(
        &self,
        namespace: &str,
        id: &str,
        params: &TriggerParams,
    ) -> Result<TriggerResult> {
        let path = Self::task(namespace, id, "/trigger");
        Self::call(self.request(Method::POST, &path).json(params)).await
    }

    pub(crate) async fn control(&self, namespace: &str, id: &str, what: &str) -> Result<TaskView> {
        let path = Self::task(namespace, id, &format!("/{what}"));
        Self::call(self.request(Method::POST, &path)).await
    }

    pub(crate) async fn kill(
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

    pub(crate) async fn history(
        &self,
        namespace: &str,
        id: &str,
        limit: usize,
    ) -> Result<Vec<ExecutionRecord>> {
        let path = Self::task(namespace, id, "/history");
        let req = self.request(Method::GET, &path).query(&[("limit", limit)]);
        Self::call(req).await
    }

    pub(crate) async fn backfill(
        &self,
        namespace: &str,
        id: &str,
        params: &BackfillParams,
    ) -> Result<BackfillResult> {
        let path = Self::task(namespace, id, "/backfill");
        Self::call(self.request(Method::POST, &path).json(params)).await
    }
}

/// Sends `req`; no answer at all (refused, reset, timed out) may pass when tried again.
async fn send(req: RequestBuilder) -> Result<Response> {
    req.send()
        .await
        .map_err(|e| Error::Connect(format!("the API did not answer: {e}")))
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
    let Ok(ErrorBody { error }) = serde_json::from_str::<ErrorBody>(&text) else {
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
    let m = error.message;
    match error.code.as_str() {
        "invalid_input" => ApiError::Invalid {
            errors: if error.errors.is_empty() {
                vec![m.clone()]
            } else {
                error.errors
            },
            message: m,
        },
        "bad_cursor" => ApiError::BadCursor(m),
        "unauthorized" => ApiError::Unauthorized(m),
        "forbidden" => ApiError::Forbidden(m),
        "api_closed" => ApiError::Closed(m),
        "cross_origin" => ApiError::CrossOrigin(m),
        "unknown_host" => ApiError::UnknownHost(m),
        "unsupported_media_type" => ApiError::UnsupportedMediaType(m),
        "not_found" => ApiError::NotFound(m),
        "conflict" => ApiError::Conflict(m),
        "limit_exceeded" => ApiError::Limit {
            kind: match status {
                StatusCode::TOO_MANY_REQUESTS => LimitKind::Rate,
                StatusCode::PAYLOAD_TOO_LARGE => LimitKind::Body,
                _ => LimitKind::Count,
            },
            message: m,
            retry_after_s,
        },
        "backend_unavailable" => ApiError::Unavailable(m),
        _ => ApiError::Internal(m),
    }
}
