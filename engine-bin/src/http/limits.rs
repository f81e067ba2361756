//! Bounds on what an `/api/v1` request may carry, checked before anything else reads it.
//!
//! The URL, the header count and the header bytes are fixed bounds well above any real
//! client (hyper refuses past 100 headers on its own, with no body to explain it); the body
//! size and the run-now rate are settings (`[limits]`). Each refusal is the API's JSON error
//! with `limit_exceeded`, a 4xx fitting the limit, and a message naming the limit and how
//! to raise it. The body bound is enforced twice on purpose: by `Content-Length` here, before
//! a byte of the body is read, and by axum's body limit while reading a chunked body that
//! announces no length ([`body`] turns that rejection into the same error).

use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Mutex, PoisonError};

use ax_scheduler_core::limiter::{KeyRefusal, KeyedBuckets};
use ax_scheduler_core::{ExecutionId, UtcMillis};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use ax_control::api::{ApiError, LimitKind, TaskKey};

/// Longest request target (path and query), bytes.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Most request headers.
pub const MAX_HEADERS: usize = 64;
/// Most bytes of all request headers, names and values.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Callers whose scheduling rate is tracked at once: far above the tokens an install
/// configures.
const MAX_TRACKED_CALLERS: usize = 1024;
/// Tasks whose run-now rate is tracked at once (idle ones are dropped to make room).
const MAX_TRACKED_TASKS: usize = 10_000;
/// Executions whose completion rate is tracked at once: far above the jobs one replica's
/// workers start in the few seconds a bucket takes to refill.
const MAX_TRACKED_EXECUTIONS: usize = 16_384;

/// The configurable limits (`[limits]`), as the API applies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiLimits {
    /// `limits.max_request_bytes`.
    pub max_request_bytes: usize,
    /// `limits.triggers_per_task_per_minute`.
    pub triggers_per_task_per_minute: u32,
    /// `limits.operate_actions_per_minute`.
    pub operate_actions_per_minute: u32,
    /// `limits.reads_per_minute`.
    pub reads_per_minute: u32,
    /// `limits.scheduled_per_minute`.
    pub scheduled_per_minute: u32,
}

impl From<&crate::config::Limits> for ApiLimits {
    fn from(l: &crate::config::Limits) -> Self {
        ApiLimits {
            max_request_bytes: l.max_request_bytes,
            triggers_per_task_per_minute: l.triggers_per_task_per_minute,
            operate_actions_per_minute: l.operate_actions_per_minute,
            reads_per_minute: l.reads_per_minute,
            scheduled_per_minute: l.scheduled_per_minute,
        }
    }
}

impl Default for ApiLimits {
    fn default() -> Self {
        (&crate::config::Limits::default()).into()
    }
}

fn limit(kind: LimitKind, message: String) -> ApiError {
    ApiError::Limit {
        kind,
        message,
        retry_after_s: None,
    }
}

/// A refused rate: 429, and when to try again (`Retry-After`).
pub(super) fn rate_limited(message: String, wait_s: u64) -> ApiError {
    ApiError::Limit {
        kind: LimitKind::Rate,
        message,
        retry_after_s: Some(wait_s),
    }
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
/// per task or per execution. Bounded in memory and in work by [`KeyedBuckets`]' own bound,
/// `max_keys` split over [`SHARDS`] locks so concurrent callers rarely wait for each other.
/// The keys of the completion route are chosen by whoever calls it, so without the bound a
/// stream of made-up execution ids would grow the map (and the work of each prune) without
/// end.
#[derive(Clone, Debug)]
pub(super) struct PerMinute<K> {
    per_minute: u32,
    hasher: RandomState,
    shards: Arc<[Mutex<KeyedBuckets<K>>]>,
}

/// Locks one [`PerMinute`] is split over.
const SHARDS: usize = 16;

/// Why [`PerMinute::take`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The key used up its rate; the next call may come in this many seconds.
    Rate(u64),
    /// Too many keys are active at once to track one more; try again in this many seconds.
    Crowded(u64),
}

impl<K: Eq + Hash + Clone> PerMinute<K> {
    pub(super) fn new(per_minute: u32, max_keys: usize) -> Self {
        let per_shard = max_keys.div_ceil(SHARDS).max(1);
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(KeyedBuckets::new(
                    f64::from(per_minute) / 60.0,
                    f64::from(per_minute),
                    per_shard,
                ))
            })
            .collect();
        PerMinute {
            per_minute,
            hasher: RandomState::new(),
            shards,
        }
    }

    /// The rate, per minute.
    pub(super) fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Takes one for `key` at `now`, or says why not.
    pub(super) fn take(&self, key: &K, now: UtcMillis) -> Result<(), Refused> {
        self.take_n(key, 1, now)
    }

    /// Takes `n` at once for `key` at `now` (a batch), or none and says why not.
    pub(super) fn take_n(&self, key: &K, n: u32, now: UtcMillis) -> Result<(), Refused> {
        let index = (self.hasher.hash_one(key) as usize) % self.shards.len();
        let mut shard = self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let seconds = |at: UtcMillis| (at.0 - now.0).max(0).unsigned_abs().div_ceil(1000);
        shard
            .try_take_n(key, n, now)
            .map_err(|refused| match refused {
                KeyRefusal::Rate(at) => Refused::Rate(seconds(at)),
                KeyRefusal::Crowded(at) => Refused::Crowded(seconds(at)),
            })
    }

    /// Keys tracked, over all shards.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

/// The refusal of a [`Refused::Crowded`] take, for `what` (`"run-now requests"`).
pub(super) fn crowded(what: &str, wait_s: u64) -> ApiError {
    rate_limited(
        format!(
            "this replica tracks the rate of too many {what} at once to take another; try \
             again in {wait_s} s"
        ),
        wait_s,
    )
}

/// Executions scheduled per caller through this replica: a token bucket per caller (the
/// token's name), a minute's worth of burst; a request of N executions takes N at once.
#[derive(Clone, Debug)]
pub struct ScheduleLimiter(PerMinute<std::sync::Arc<str>>);

impl ScheduleLimiter {
    /// At most `per_minute` executions per caller per minute.
    pub fn new(per_minute: u32) -> Self {
        ScheduleLimiter(PerMinute::new(per_minute, MAX_TRACKED_CALLERS))
    }

    /// Admits `n` executions of `who` at `now`, or says when to try again.
    pub fn admit(
        &self,
        who: &ax_control::api::Principal,
        n: usize,
        now: UtcMillis,
    ) -> Result<(), ApiError> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let per_minute = self.0.per_minute();
        self.0
            .take_n(&who.name, n, now)
            .map_err(|refused| match refused {
                Refused::Rate(wait_s) => rate_limited(
                    format!(
                        "caller `{}` scheduled its {per_minute} executions a minute                          (limits.scheduled_per_minute); these {n} may come in {wait_s} s",
                        who.name
                    ),
                    wait_s,
                ),
                Refused::Crowded(wait_s) => crowded("callers", wait_s),
            })
    }
}

/// Run-now requests per task through this replica: a token bucket per task, a minute's
/// worth of burst.
#[derive(Clone, Debug)]
pub struct TriggerLimiter(PerMinute<TaskKey>);

impl TriggerLimiter {
    /// At most `per_minute` run-now requests per task per minute.
    pub fn new(per_minute: u32) -> Self {
        TriggerLimiter(PerMinute::new(per_minute, MAX_TRACKED_TASKS))
    }

    /// Admits one run-now request of `key` at `now`, or says when the next one may come.
    pub fn admit(&self, key: &TaskKey, now: UtcMillis) -> Result<(), ApiError> {
        self.0.take(key, now).map_err(|refused| match refused {
            Refused::Rate(wait_s) => rate_limited(
                format!(
                    "task {key} was run now {} times in the last minute, the limit \
                     (limits.triggers_per_task_per_minute); try again in {wait_s} s",
                    self.0.per_minute
                ),
                wait_s,
            ),
            Refused::Crowded(wait_s) => crowded("tasks run now", wait_s),
        })
    }
}

/// Reports (progress and ends) one execution may make a minute through the completion
/// route: far above a job that reports every few seconds, low enough that a runaway loop
/// cannot keep Redis busy for one execution.
pub const COMPLETIONS_PER_EXECUTION_PER_MINUTE: u32 = 120;

/// The rate of completion calls per execution id (`POST /executions/{id}/complete`), which
/// no API token guards; keyed by the parsed [`ExecutionId`], so text that is no execution id
/// is refused before it is counted.
#[derive(Clone, Debug)]
pub struct CompletionLimiter(PerMinute<ExecutionId>);

impl CompletionLimiter {
    /// A limiter at [`COMPLETIONS_PER_EXECUTION_PER_MINUTE`].
    pub fn new() -> Self {
        CompletionLimiter(PerMinute::new(
            COMPLETIONS_PER_EXECUTION_PER_MINUTE,
            MAX_TRACKED_EXECUTIONS,
        ))
    }

    /// Takes one call for `execution` at `now`, or refuses with 429.
    pub fn admit(&self, execution: ExecutionId, now: UtcMillis) -> Result<(), ApiError> {
        self.0
            .take(&execution, now)
            .map_err(|refused| match refused {
                Refused::Rate(wait_s) => rate_limited(
                    format!(
                        "execution {execution} was reported on more than \
                     {COMPLETIONS_PER_EXECUTION_PER_MINUTE} times in the last minute; try \
                     again in {wait_s} s"
                    ),
                    wait_s,
                ),
                Refused::Crowded(wait_s) => crowded("reporting executions", wait_s),
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
            operate_actions_per_minute: 1,
            reads_per_minute: 1,
            scheduled_per_minute: 1000,
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

    #[test]
    fn the_tracked_keys_are_bounded_and_a_crowded_limiter_refuses_only_new_keys() {
        // 6 a minute: a bucket is full again 10 s after its one take.
        let p = PerMinute::<u64>::new(6, 64);
        let cap = 64usize.div_ceil(SHARDS) * SHARDS;
        let t0 = UtcMillis(1_000);
        let mut crowded = 0;
        for key in 0..10_000u64 {
            match p.take(&key, t0) {
                Ok(()) => {}
                Err(Refused::Crowded(wait_s)) => {
                    assert_eq!(wait_s, 10);
                    crowded += 1;
                }
                Err(other) => panic!("{other:?}"),
            }
        }
        assert!(p.len() <= cap, "{} keys tracked", p.len());
        assert_eq!(crowded, 10_000 - p.len());
        // A tracked key keeps its own rate meanwhile.
        let tracked = (0..10_000u64).find(|k| p.take(k, t0).is_ok()).unwrap();
        for _ in 0..4 {
            p.take(&tracked, t0).unwrap();
        }
        assert_eq!(p.take(&tracked, t0), Err(Refused::Rate(10)));
        // Once the buckets are full again, the idle ones make room.
        let later = UtcMillis(t0.0 + 60_000);
        assert_eq!(p.take(&20_000, later), Ok(()));
        assert!(p.len() < cap);
    }

    #[test]
    fn a_crowded_shard_prunes_at_most_once_per_refill() {
        let p = PerMinute::<u64>::new(60, 1);
        // One key per shard at most: find two keys of the same shard.
        let shard = |k: &u64| (p.hasher.hash_one(k) as usize) % SHARDS;
        let a = 0u64;
        let b = (1..).find(|k| shard(k) == shard(&a)).unwrap();
        let t0 = UtcMillis(0);
        p.take(&a, t0).unwrap();
        // `a` is full again after 1 s; a prune at 0.5 s finds nothing to drop and holds off
        // the next one until 1.5 s.
        assert_eq!(p.take(&b, UtcMillis(500)), Err(Refused::Crowded(1)));
        assert_eq!(p.take(&b, UtcMillis(1_200)), Err(Refused::Crowded(1)));
        assert_eq!(p.take(&b, UtcMillis(1_500)), Ok(()));
    }

    #[test]
    fn completions_are_limited_per_execution() {
        let c = CompletionLimiter::new();
        let id: ExecutionId = "0190f5a2-7b1c-7cc3-9a4e-1f2e3d4c5b6a".parse().unwrap();
        let t0 = UtcMillis(0);
        for _ in 0..COMPLETIONS_PER_EXECUTION_PER_MINUTE {
            c.admit(id, t0).unwrap();
        }
        let e = c.admit(id, t0).unwrap_err();
        assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(e.to_string().contains("in the last minute"), "{e}");
    }
}
