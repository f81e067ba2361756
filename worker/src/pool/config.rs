//! A worker pool's settings and their defaults.
//!
//! One plain struct with public fields and a `Default`, so the binary fills it from its
//! configuration and a test changes only what it tests; the combinations that cannot work
//! are refused once, by [`super::WorkerPool::new`].

use std::time::Duration;

/// Settings of a worker pool.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Unique id of this worker (names its processing lists and heartbeat). Default
    /// `worker-` and a random suffix; give each process its own.
    pub worker_id: String,
    /// Queues to serve. Default `["default"]`.
    pub queues: Vec<String>,
    /// Attempts running at once. Default [`DEFAULT_CONCURRENCY`].
    pub concurrency: usize,
    /// Most messages taken in one round trip. Default 64.
    pub fetch_batch: usize,
    /// Messages taken ahead of a free slot, waiting in this pool. They count as this worker's
    /// (they go back to the queue on shutdown, or to another worker if this one dies), so
    /// keep it small when handlers are long and another replica may be idle. Default
    /// [`DEFAULT_PREFETCH`].
    pub prefetch: usize,
    /// How long in-flight attempts may run on after shutdown starts. Default
    /// [`DEFAULT_SHUTDOWN_GRACE`].
    pub shutdown_grace: Duration,
    /// Heartbeat period. Default 1 s.
    pub heartbeat_interval: Duration,
    /// Lifetime of a heartbeat key. Default 5 s.
    pub heartbeat_ttl: Duration,
    /// How long a silent worker's messages stay with it before the reaper gives them back.
    /// Default [`ax_queue::DEFAULT_VISIBILITY_TIMEOUT`].
    pub visibility_timeout: Duration,
    /// Longest blocking wait for a message (also bounds how long stopping takes). Default 1 s.
    pub block_timeout: Duration,
    /// Period of promoting due retries and reaping dead workers. Default 250 ms.
    pub maintenance_interval: Duration,
    /// Record every attempt in the task's history list. Default true.
    pub record_history: bool,
    /// How long settling an attempt is retried through Redis errors. Default 30 s.
    pub settle_retry_for: Duration,
    /// Slow start: the pool starts at half its concurrency and opens a tenth more every
    /// second, and goes back to half when a backlog arrives (a first attempt starting 10 s or
    /// more after its fire, right after on-time ones: a takeover's replay, a burst come due),
    /// so a backlog does not hit the downstreams all at once. Default true.
    pub slow_start: bool,
    /// How often the processing lists are checked against what the pool really has in hand.
    /// Default 10 s.
    pub reconcile_interval: Duration,
    /// Address blocks the `http` handler may call besides public addresses (see
    /// [`crate::egress`]). Default none.
    pub http_allow_cidrs: Vec<crate::egress::IpNet>,
    /// Host names the `http` handler may call whatever they resolve to. Default none.
    pub http_allow_hosts: Vec<crate::egress::HostPattern>,
    /// The public base URL of ax's API (`https://ax.example.com`), under which the jobs of
    /// `http.async` tasks report their end. Default none: such tasks fail, saying so.
    pub completion_public_url: Option<String>,
    /// The wall clock the pool stamps starts, ends, heartbeats and deadlines with; a test
    /// passes one that follows tokio's paused time.
    pub clock: std::sync::Arc<dyn ax_scheduler_core::Clock>,
}

/// Attempts a pool runs at once by default. Handlers are async I/O (an HTTP call waits on the
/// network, not on a core), so the bound is what the targets and memory take, not the cores:
/// twice the cores ran at most 40 calls a second against a 100 ms endpoint on two cores. A
/// running attempt holds its message (a payload is at most 32 KiB) and the handler's future;
/// the `http` handler does not read response bodies. Lower it for CPU-bound handlers.
pub const DEFAULT_CONCURRENCY: usize = 64;

/// Messages a pool takes ahead of a free slot, by default.
pub const DEFAULT_PREFETCH: usize = 16;

/// How long in-flight attempts may run on after shutdown starts, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

impl Default for WorkerConfig {
    fn default() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        WorkerConfig {
            worker_id: format!("worker-{}", &id[..12]),
            clock: std::sync::Arc::new(ax_scheduler_core::SystemClock),
            queues: vec![ax_scheduler_core::task::DEFAULT_QUEUE.to_string()],
            concurrency: DEFAULT_CONCURRENCY,
            fetch_batch: 64,
            prefetch: DEFAULT_PREFETCH,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_ttl: Duration::from_secs(5),
            visibility_timeout: ax_queue::DEFAULT_VISIBILITY_TIMEOUT,
            block_timeout: Duration::from_secs(1),
            maintenance_interval: Duration::from_millis(250),
            record_history: true,
            settle_retry_for: Duration::from_secs(30),
            slow_start: true,
            reconcile_interval: Duration::from_secs(10),
            http_allow_cidrs: Vec::new(),
            http_allow_hosts: Vec::new(),
            completion_public_url: None,
        }
    }
}
