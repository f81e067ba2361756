//! Bounds on what an `/api/v1` request may carry, checked before anything else reads it.
//!
//! The URL, the header count and the header bytes are fixed bounds well above any real
//! client (hyper refuses past 100 headers on its own, with no body to explain it); the body
//! size and the run-now rate are settings (`[limits]`). Each refusal is the API's JSON error
//! with `limit_exceeded`, a 4xx fitting the limit, and a message naming the limit and how
//! to raise it. The body bound is enforced twice on purpose: by `Content-Length` here, before
//! a byte of the body is read, and by axum's body limit while reading a chunked body that
//! announces no length ([`body`] turns that rejection into the same error).

use std::sync::{Arc, Mutex, PoisonError};

use ax_scheduler_core::limiter::KeyedBuckets;
use ax_scheduler_core::{ExecutionId, UtcMillis};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::{ApiError, LimitKind, TaskKey};

/// Longest request target (path and query), bytes.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Most request headers.
pub const MAX_HEADERS: usize = 64;
/// Most bytes of all request headers, names and values.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Tasks whose run-now rate is tracked at once before idle ones are dropped.
const MAX_TRACKED_TASKS: usize = 10_000;

/// The configurable limits (`[limits]`), as the API applies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiLimits {
    /// `limits.max_request_bytes`.
    pub max_request_bytes: usize,
    /// `limits.triggers_per_task_per_minute`.
    pub triggers_per_task_per_minute: u32,
}

impl From<&crate::config::Limits> for ApiLimits {
    fn from(l: &crate::config::Limits) -> Self {
        ApiLimits {
            max_request_bytes: l.max_request_bytes,
            triggers_per_task_per_minute: l.triggers_per_task_per_minute,
        }
    }
}

impl Default for ApiLimits {
    fn default() -> Self {
        (&crate::config::Limits::default()).into()
    }
}

fn limit(kind: LimitKind, message: String) -> ApiError {
    ApiError::Limit { kind, message }
}

fn body_too_large(max: usize) -> ApiError {
    limit(
        LimitKind::Body,
        format!(
            "the request body is larger than {max} bytes (limits.max_request_bytes); a task \
             spec's payload is limited to 32 KiB anyway"
        ),
    )
}

/// Middleware: refuses a request whose URL, headers or announced body exceed the limits.
pub async fn check_request(
    State(limits): State<ApiLimits>,
    request: Request,
    next: Next,
) -> Response {
    match request_error(&request, &limits) {
        Some(e) => e.into_response(),
        None => next.run(request).await,
    }
}

/// What is wrong with `request`'s size, if anything.
fn request_error(request: &Request, limits: &ApiLimits) -> Option<ApiError> {
    let uri = request
        .uri()
        .path_and_query()
        .map_or(0, |pq| pq.as_str().len());
    if uri > MAX_URI_BYTES {
        return Some(limit(
            LimitKind::Url,
            format!("the URL is {uri} bytes; the limit is {MAX_URI_BYTES}"),
        ));
    }
    let headers = request.headers();
    if headers.len() > MAX_HEADERS {
        return Some(limit(
            LimitKind::Headers,
            format!(
                "the request has {} headers; the limit is {MAX_HEADERS}",
                headers.len()
            ),
        ));
    }
    let header_bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    if header_bytes > MAX_HEADER_BYTES {
        return Some(limit(
            LimitKind::Headers,
            format!(
                "the request headers are {header_bytes} bytes; the limit is {MAX_HEADER_BYTES}"
            ),
        ));
    }
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limits.max_request_bytes as u64) {
        return Some(body_too_large(limits.max_request_bytes));
    }
    None
}

/// A request body as read under axum's body limit, or the limit's error.
pub fn body(read: Result<Bytes, BytesRejection>, limits: &ApiLimits) -> Result<Bytes, ApiError> {
    read.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            body_too_large(limits.max_request_bytes)
        } else {
            ApiError::invalid(format!("cannot read the request body: {}", e.body_text()))
        }
    })
}

/// A token bucket per key with a minute's worth of burst, for what one replica's API admits
/// per task or per execution.
#[derive(Clone, Debug)]
struct PerMinute<K> {
    per_minute: u32,
    buckets: Arc<Mutex<KeyedBuckets<K>>>,
}

impl<K: Eq + std::hash::Hash + Clone> PerMinute<K> {
    fn new(per_minute: u32) -> Self {
        PerMinute {
            per_minute,
            buckets: Arc::new(Mutex::new(KeyedBuckets::new(
                f64::from(per_minute) / 60.0,
                f64::from(per_minute),
                MAX_TRACKED_TASKS,
            ))),
        }
    }

    /// Takes one for `key` at `now`, or says in how many seconds the next one may come.
    fn take(&self, key: &K, now: UtcMillis) -> Result<(), u64> {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        buckets
            .try_take(key, now)
            .map_err(|next| (next.0 - now.0).max(0).unsigned_abs().div_ceil(1000))
    }
}

/// Run-now requests per task through this replica: a token bucket per task, a minute's
/// worth of burst.
#[derive(Clone, Debug)]
pub struct TriggerLimiter(PerMinute<TaskKey>);

impl TriggerLimiter {
    /// At most `per_minute` run-now requests per task per minute.
    pub fn new(per_minute: u32) -> Self {
        TriggerLimiter(PerMinute::new(per_minute))
    }

    /// Admits one run-now request of `key` at `now`, or says when the next one may come.
    pub fn admit(&self, key: &TaskKey, now: UtcMillis) -> Result<(), ApiError> {
        self.0.take(key, now).map_err(|wait_s| {
            limit(
                LimitKind::Rate,
                format!(
                    "task {key} was run now {} times in the last minute, the limit \
                     (limits.triggers_per_task_per_minute); try again in {wait_s} s",
                    self.0.per_minute
                ),
            )
        })
    }
}

/// Reports (progress and ends) one execution may make a minute through the completion
/// route: far above a job that reports every few seconds, low enough that a runaway loop
/// cannot keep Redis busy for one execution.
pub const COMPLETIONS_PER_EXECUTION_PER_MINUTE: u32 = 120;

/// The rate of completion calls per execution id (`POST /executions/{id}/complete`), which
/// no API token guards.
#[derive(Clone, Debug)]
pub struct CompletionLimiter(PerMinute<ExecutionId>);

impl CompletionLimiter {
    /// A limiter at [`COMPLETIONS_PER_EXECUTION_PER_MINUTE`].
    pub fn new() -> Self {
        CompletionLimiter(PerMinute::new(COMPLETIONS_PER_EXECUTION_PER_MINUTE))
    }

    /// Takes one call for `execution` at `now`, or refuses with 429.
    pub fn admit(&self, execution: ExecutionId, now: UtcMillis) -> Result<(), ApiError> {
        self.0.take(&execution, now).map_err(|wait_s| {
            limit(
                LimitKind::Rate,
                format!(
                    "execution {execution} was reported on more than \
                     {COMPLETIONS_PER_EXECUTION_PER_MINUTE} times in the last minute; try \
                     again in {wait_s} s"
                ),
            )
        })
    }
}

impl Default for CompletionLimiter {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    fn request(uri: &str, headers: &[(&str, String)]) -> Request {
        let mut b = Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, v);
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn each_limit_names_itself() {
        let l = ApiLimits {
            max_request_bytes: 2048,
            triggers_per_task_per_minute: 1,
        };
        assert!(request_error(&request("/api/v1/tasks", &[]), &l).is_none());
        let long = format!("/api/v1/tasks?namespace={}", "a".repeat(MAX_URI_BYTES));
        let e = request_error(&request(&long, &[]), &l).unwrap();
        assert_eq!(e.status(), StatusCode::URI_TOO_LONG);
        let many: Vec<(&str, String)> = (0..=MAX_HEADERS).map(|_| ("x-a", "1".into())).collect();
        let e = request_error(&request("/", &many), &l).unwrap();
        assert_eq!(e.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        assert!(e.to_string().contains("headers"), "{e}");
        let big = [("x-big", "b".repeat(MAX_HEADER_BYTES))];
        let e = request_error(&request("/", &big), &l).unwrap();
        assert_eq!(e.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let announced = [("content-length", "2049".to_owned())];
        let e = request_error(&request("/", &announced), &l).unwrap();
        assert_eq!(e.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.to_string().contains("limits.max_request_bytes"), "{e}");
    }

    #[test]
    fn run_now_is_limited_per_task() {
        let t = TriggerLimiter::new(2);
        let a = TaskKey {
            namespace: "ns".into(),
            id: "a".into(),
        };
        let b = TaskKey {
            namespace: "ns".into(),
            id: "b".into(),
        };
        let t0 = UtcMillis(1_000);
        assert!(t.admit(&a, t0).is_ok());
        assert!(t.admit(&a, t0).is_ok());
        let e = t.admit(&a, t0).unwrap_err();
        assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(e.to_string().contains("try again in 30 s"), "{e}");
        assert!(t.admit(&b, t0).is_ok());
        assert!(t.admit(&a, UtcMillis(31_000)).is_ok());
    }
}
