//! The task model: what a user writes under `{prefix}/tasks/{namespace}/{id}`.
//!
//! The JSON form is the user-facing contract (see `docs/tasks.md`). Durations are written as
//! humantime strings (`"30s"`, `"5m"`), instants as RFC 3339; inside the process they are
//! `std::time::Duration` and [`UtcMillis`]. Parsing and validation live in `validate`:
//! they report every problem at once with its field path, so this module only holds the
//! types and their documented defaults.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::UtcMillis;

/// Default namespace when a spec names none.
pub const DEFAULT_NAMESPACE: &str = "default";
/// Default queue when a spec names none.
pub const DEFAULT_QUEUE: &str = "default";
/// Default execution timeout: 30 s, what an HTTP callback is usually given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default priority, the middle of 0 (lowest) ..= 9 (highest).
pub const DEFAULT_PRIORITY: u8 = 5;
/// Highest priority.
pub const MAX_PRIORITY: u8 = 9;
/// Largest payload, serialized as compact JSON: 32 KB keeps a spec well inside etcd's request
/// limit and a message cheap to copy through Redis.
pub const MAX_PAYLOAD_BYTES: usize = 32 * 1024;
/// Shortest `every` interval: the timer ticks at 10 ms, but a task firing faster than once a
/// second would swamp etcd state writes and the queue.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// Longest `delay` or `every`: ten years (365-day years); an instant further away is an `at`.
pub const MAX_SCHEDULE_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Time zone of a cron schedule that names none.
pub const DEFAULT_TIMEZONE: &str = "UTC";
/// Spec version when a spec names none.
pub const DEFAULT_VERSION: u64 = 1;
/// Longest id, namespace, queue or handler name (they are etcd key and Redis key segments).
pub const MAX_NAME_LEN: usize = 128;
/// Longest idempotency key.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 256;
/// Most labels on a task.
pub const MAX_LABELS: usize = 64;
/// Most pieces of one fanned-out fire (the spec's `fanout.shards`).
pub const MAX_PIECES: u32 = 1000;
/// Most parents (`depends_on`) of one task.
pub const MAX_PARENTS: usize = 16;
/// Default `depends_on[].within`: a parent has a day to finish its part of a run.
pub const DEFAULT_DEPENDENCY_WITHIN: Duration = Duration::from_secs(24 * 3600);
/// Longest `depends_on[].within`: a run's progress is kept in the child's state until then.
pub const MAX_DEPENDENCY_WITHIN: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest label key or value, bytes.
pub const MAX_LABEL_BYTES: usize = 256;
/// Most `http.headers` of a task.
pub const MAX_HTTP_HEADERS: usize = 32;
/// Longest `http.headers` name plus value, bytes.
pub const MAX_HTTP_HEADER_BYTES: usize = 8 * 1024;
/// Header names a task may not set (compared ignoring case): the ones the HTTP client
/// frames the request with, whose value from a task would smuggle a second request or
/// mislead a proxy, and (by prefix, [`RESERVED_HTTP_HEADER_PREFIX`]) ax's own.
pub const RESERVED_HTTP_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];
/// Prefix of the headers ax sets on its own requests (execution id, attempt, completion).
pub const RESERVED_HTTP_HEADER_PREFIX: &str = "x-ax-";

/// Whether a task may not set the header `name` ([`RESERVED_HTTP_HEADERS`]).
pub fn is_reserved_http_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    RESERVED_HTTP_HEADERS.contains(&lower.as_str())
        || lower.starts_with(RESERVED_HTTP_HEADER_PREFIX)
}

/// Longest `http.url`, bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// Most `command.args` of a task.
pub const MAX_COMMAND_ARGS: usize = 64;
/// Longest `command.args` entry or `command.env` value, bytes.
pub const MAX_COMMAND_ARG_BYTES: usize = 4096;
/// Most `command.env` entries of a task.
pub const MAX_COMMAND_ENV: usize = 32;
/// Highest `retry.max_retries`.
pub const MAX_RETRIES: u32 = 100;
/// Highest `retry.multiplier`.
pub const MAX_MULTIPLIER: f64 = 100.0;

/// A task as registered: what to run, when, and how to treat failures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Task id; the last segment of its etcd key.
    pub id: Arc<str>,
    /// Namespace; the segment before the id in its etcd key.
    pub namespace: Arc<str>,
    /// Name of the handler that runs it (`http`, `log`, or a user handler).
    pub handler: Arc<str>,
    /// When it fires.
    pub schedule: Schedule,
    /// Handler input, any JSON, at most [`MAX_PAYLOAD_BYTES`] serialized.
    #[serde(default)]
    pub payload: serde_json::Value,
    /// Target of the built-in `http` handler; required when `handler` is `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpTarget>,
    /// What the built-in `command` handler runs; required when `handler` is `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandCall>,
    /// Redis queue its executions go to, so heavy tasks can get workers of their own.
    pub queue: Arc<str>,
    /// 0 (lowest) ..= 9 (highest).
    pub priority: u8,
    /// At most `max` executions with the same resolved key run at once, across all workers
    /// (see [`crate::concurrency`]); over it they wait, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<crate::concurrency::Concurrency>,
    /// Longest one execution may run before it is stopped and counted as failed.
    #[serde(with = "crate::duration_serde")]
    pub timeout: Duration,
    /// How failed executions are retried.
    pub retry: Arc<RetryPolicy>,
    /// Executions that share this key within the dedupe window run once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// What to do with fires missed while no leader acted.
    pub misfire: MisfirePolicy,
    /// What to do when a periodic fire comes while the previous execution still runs.
    pub overlap: OverlapPolicy,
    /// A paused task stays registered but does not fire.
    pub paused: bool,
    /// Each fire runs as several executions (see [`Fanout`]); `None`: one execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fanout: Option<Fanout>,
    /// The tasks this one runs after (empty: an ordinary task with a schedule of its own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<Dependency>,
    /// Each due fire must be followed by a successful execution within this long, or an
    /// alert says why not (see [`crate::deadline`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::duration_serde::option"
    )]
    pub expect_success_within: Option<Duration>,
    /// Free-form labels for people and tooling.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Spec version: a register with a higher version replaces an existing spec.
    pub version: u64,
    /// When the spec was created (set by the CLI); a `delay` counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<UtcMillis>,
}

/// Where the built-in `http` handler posts the execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpTarget {
    /// `http://` or `https://` URL that receives a POST with the execution as JSON.
    pub url: String,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Follow 3xx answers (up to 10 hops, each checked like the first request; `headers` go
    /// only to the URL's own origin). Off by default: a redirect fails the execution.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follow_redirects: bool,
    /// The receiver may answer `202 Accepted` and report the end later through the
    /// completion URL the request carries (`"async": true`; see `docs/tasks.md`). Opt-in, so
    /// a receiver that answers 202 without knowing the contract is not left waiting for.
    #[serde(default, rename = "async", skip_serializing_if = "std::ops::Not::not")]
    pub await_completion: bool,
}

/// What the built-in `command` handler runs: a command by the name a replica's configuration
/// gives it, never a path. The replica's `[worker.commands.<name>]` entry says which
/// executable that is, its leading arguments and which `env` names a task may set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandCall {
    /// The configured command's name.
    pub name: String,
    /// Arguments after the command's configured ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables for the command, each allowed by its configuration.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// When a task fires. Exactly one kind per task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// Once, at an instant.
    At(UtcMillis),
    /// Once, a duration after the task's `created_at` (or after the engine first recorded it).
    Delay(#[serde(with = "crate::duration_serde")] Duration),
    /// Repeatedly, every interval, counted from the anchor the engine records.
    Every(#[serde(with = "crate::duration_serde")] Duration),
    /// On a cron expression (5 fields, or 6 with seconds first) in an IANA time zone.
    Cron {
        /// The expression as written.
        expr: String,
        /// IANA zone name; default `UTC`.
        timezone: String,
    },
    /// No time of its own: the task fires when its parents (`depends_on`) have finished a
    /// run. In the JSON form the `schedule` field is absent.
    Dependent,
}

/// How one fire of a task is split into executions (see [`crate::fanout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fanout {
    /// `{"shards": N}`: N executions (pieces), each told its piece index (0-based) and
    /// the piece count.
    #[serde(rename = "shards")]
    Pieces(u32),
    /// One execution on every live worker of the task's queue, counted when the fire is
    /// sent; each is addressed to its worker (see [`crate::fanout`]).
    Broadcast,
}

/// One parent of a dependent task (`depends_on`): see [`crate::workflow`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    /// The parent, `namespace/id`.
    pub task: String,
    /// Which of the parent's outcomes lets the child run.
    pub on: DependOn,
    /// How long after the run started the parent may take to finish; later, the child's
    /// step is skipped.
    #[serde(with = "crate::duration_serde")]
    pub within: Duration,
}

/// The parent outcome a dependency waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DependOn {
    /// The parent's execution succeeded.
    Success,
    /// The parent's execution failed for good (retries exhausted, or killed).
    Failure,
    /// Either.
    Any,
}

/// Retry settings: exponential backoff with jitter, bounded in count and in total time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 disables retry.
    pub max_retries: u32,
    /// Wait before the first retry.
    #[serde(with = "crate::duration_serde")]
    pub initial_interval: Duration,
    /// Cap on any one wait.
    #[serde(with = "crate::duration_serde")]
    pub max_interval: Duration,
    /// Growth factor between waits, >= 1.
    pub multiplier: f64,
    /// Randomization factor in 0..=1: a wait `w` becomes uniform in `w*(1-j) ..= w*(1+j)`.
    pub jitter: f64,
    /// No retry starts later than this after the first attempt began; `None` for no limit.
    #[serde(default, with = "crate::duration_serde::option")]
    pub max_elapsed: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // Three layers of waiting (10 s, 30 s, 2 min) as an exponential policy: 10 s x 3.
        RetryPolicy {
            max_retries: 3,
            initial_interval: Duration::from_secs(10),
            max_interval: Duration::from_secs(600),
            multiplier: 3.0,
            jitter: 0.2,
            max_elapsed: Some(Duration::from_secs(3600)),
        }
    }
}

/// Missed-fire handling: what a new leader does about fires missed while no leader acted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MisfirePolicy {
    /// Run one execution for all the fires missed, then continue on schedule.
    #[default]
    FireOnce,
    /// Run every missed fire within the catch-up window.
    FireAll,
    /// Run none of them; continue with the next future fire.
    Skip,
}

/// Concurrent-execution handling for periodic tasks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverlapPolicy {
    /// Start the new execution alongside the running one.
    Allow,
    /// Hold the fire until the running execution finishes.
    #[default]
    Forbid,
    /// Cancel the running execution and start the new one.
    Replace,
}
