//! How each execution of a task runs, as one typed value: [`TaskOptions`].
//!
//! Every face that defines work sets these the same way: the JSON spec (its validator reads
//! these fields into a `TaskOptions`), the embedded kernel's `Job`, and the SDK building a
//! [`TaskSpec`] in code. So the bounds live here once, as the `check_*` functions below: the
//! JSON validator calls them on each value as it reads it (so its problems keep their order
//! and field paths), and [`TaskOptions::check`] calls the same ones on values built in code.
//! Durations have ceilings as well as floors: a retry interval of `u64::MAX` seconds is not a
//! policy, and arithmetic on it anywhere downstream would have to be proven not to overflow.

use std::sync::Arc;
use std::time::Duration;

use crate::field_error::{FieldError, ValidationErrors};
use crate::task::{
    MisfirePolicy, OverlapPolicy, RetryPolicy, Schedule, TaskSpec, DEFAULT_PRIORITY,
    DEFAULT_TIMEOUT, MAX_IDEMPOTENCY_KEY_LEN, MAX_MULTIPLIER, MAX_PAYLOAD_BYTES, MAX_PRIORITY,
    MAX_RETRIES,
};

/// Longest `timeout` of one attempt: 30 days.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longest `retry.initial_interval` or `retry.max_interval`: 30 days.
pub const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longest `retry.max_elapsed`: a year.
pub const MAX_RETRY_ELAPSED: Duration = Duration::from_secs(366 * 24 * 3600);
/// Longest `expect_success_within`: a year.
pub const MAX_EXPECT_SUCCESS_WITHIN: Duration = Duration::from_secs(366 * 24 * 3600);

/// The options of a task's executions, with the documented defaults (`docs/tasks.md`).
///
/// ```
/// use std::time::Duration;
/// use ax_scheduler_core::options::TaskOptions;
/// use ax_scheduler_core::OverlapPolicy;
///
/// let options = TaskOptions::new()
///     .priority(7)
///     .timeout(Duration::from_secs(120))
///     .overlap(OverlapPolicy::Allow);
/// assert!(options.check().is_ok());
/// assert!(TaskOptions::new().priority(12).check().unwrap_err().has("priority"));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TaskOptions {
    /// 0 (lowest) ..= 9 (highest); default 5.
    pub priority: u8,
    /// Longest one attempt may run; default 30 s, at most [`MAX_TIMEOUT`].
    pub timeout: Duration,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// Executions that share this key within the dedupe window run once (one-shots only).
    pub idempotency_key: Option<String>,
    /// What to do with fires missed while nothing could fire them.
    pub misfire: MisfirePolicy,
    /// What a periodic fire does while the previous execution still runs.
    pub overlap: OverlapPolicy,
    /// Each fire must be followed by a success within this long, or it is reported.
    pub expect_success_within: Option<Duration>,
}

impl Default for TaskOptions {
    fn default() -> Self {
        TaskOptions {
            priority: DEFAULT_PRIORITY,
            timeout: DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
            idempotency_key: None,
            misfire: MisfirePolicy::default(),
            overlap: OverlapPolicy::default(),
            expect_success_within: None,
        }
    }
}

impl TaskOptions {
    /// The defaults.
    pub fn new() -> Self {
        TaskOptions::default()
    }

    /// Whether a setting that applies only to a schedule (misfire, overlap,
    /// `expect_success_within`) differs from its default: one execution run once has no
    /// schedule, so such a setting would be dropped unsaid.
    pub fn sets_schedule_only(&self) -> bool {
        let d = TaskOptions::default();
        self.misfire != d.misfire
            || self.overlap != d.overlap
            || self.expect_success_within.is_some()
    }

    /// Sets [`priority`](Self::priority).
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// Sets [`timeout`](Self::timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`retry`](Self::retry).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets [`idempotency_key`](Self::idempotency_key).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets [`misfire`](Self::misfire).
    pub fn misfire(mut self, misfire: MisfirePolicy) -> Self {
        self.misfire = misfire;
        self
    }

    /// Sets [`overlap`](Self::overlap).
    pub fn overlap(mut self, overlap: OverlapPolicy) -> Self {
        self.overlap = overlap;
        self
    }

    /// Sets [`expect_success_within`](Self::expect_success_within).
    pub fn expect_success_within(mut self, within: Duration) -> Self {
        self.expect_success_within = Some(within);
        self
    }

    /// Every value out of its bounds, with the field path the JSON form uses.
    pub fn check(&self) -> Result<(), ValidationErrors> {
        let mut errors = Vec::new();
        let mut push = |path: &str, problem: Option<String>| {
            if let Some(reason) = problem {
                errors.push(FieldError::new(path, reason));
            }
        };
        push("priority", check_priority(i128::from(self.priority)));
        push("timeout", check_timeout(self.timeout));
        if let Some(key) = &self.idempotency_key {
            push("idempotency_key", check_idempotency_key(key));
        }
        if let Some(within) = self.expect_success_within {
            push("expect_success_within", check_expect_success_within(within));
        }
        // In the JSON form's field order: retry comes between timeout and the key.
        let retry_at = errors
            .iter()
            .position(|e| e.path != "priority" && e.path != "timeout")
            .unwrap_or(errors.len());
        errors.splice(retry_at..retry_at, check_retry(&self.retry));
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.into())
        }
    }
}

impl TaskSpec {
    /// A spec with every default: `handler` runs on `schedule`, in the default queue, with
    /// [`TaskOptions::default`] and a `null` payload. Check it with [`TaskSpec::validate`].
    ///
    /// ```
    /// use ax_scheduler_core::options::TaskOptions;
    /// use ax_scheduler_core::{Schedule, TaskSpec};
    ///
    /// let spec = TaskSpec::new("shop", "receipts", "mail.receipts", Schedule::cron("0 6 * * *", "UTC"))
    ///     .with_options(TaskOptions::new().priority(8));
    /// assert!(spec.validate().is_ok());
    /// assert_eq!(spec.options().priority, 8);
    /// ```
    pub fn new(namespace: &str, id: &str, handler: &str, schedule: Schedule) -> TaskSpec {
        let o = TaskOptions::default();
        TaskSpec {
            id: id.into(),
            namespace: namespace.into(),
            handler: handler.into(),
            schedule,
            payload: serde_json::Value::Null,
            http: None,
            command: None,
            queue: crate::task::DEFAULT_QUEUE.into(),
            priority: o.priority,
            concurrency: None,
            timeout: o.timeout,
            retry: Arc::new(o.retry),
            idempotency_key: o.idempotency_key,
            misfire: o.misfire,
            overlap: o.overlap,
            paused: false,
            fanout: None,
            depends_on: Vec::new(),
            expect_success_within: o.expect_success_within,
            labels: Default::default(),
            version: crate::task::DEFAULT_VERSION,
            created_at: None,
        }
    }

    /// The spec with `options` in place of its own.
    pub fn with_options(mut self, options: TaskOptions) -> TaskSpec {
        self.priority = options.priority;
        self.timeout = options.timeout;
        self.retry = Arc::new(options.retry);
        self.idempotency_key = options.idempotency_key;
        self.misfire = options.misfire;
        self.overlap = options.overlap;
        self.expect_success_within = options.expect_success_within;
        self
    }

    /// The spec with `payload` as the handler's input.
    pub fn with_payload(mut self, payload: serde_json::Value) -> TaskSpec {
        self.payload = payload;
        self
    }

    /// The spec's execution options.
    pub fn options(&self) -> TaskOptions {
        TaskOptions {
            priority: self.priority,
            timeout: self.timeout,
            retry: RetryPolicy::clone(&self.retry),
            idempotency_key: self.idempotency_key.clone(),
            misfire: self.misfire,
            overlap: self.overlap,
            expect_success_within: self.expect_success_within,
        }
    }
}

impl Schedule {
    /// A cron schedule: `expr` (5 fields, or 6 with seconds first) in the IANA zone
    /// `timezone`. Checked when the spec is.
    pub fn cron(expr: &str, timezone: &str) -> Schedule {
        Schedule::Cron {
            expr: expr.to_owned(),
            timezone: timezone.to_owned(),
        }
    }
}

/// Why `priority` is out of range, if it is.
pub fn check_priority(priority: i128) -> Option<String> {
    (!(0..=i128::from(MAX_PRIORITY)).contains(&priority)).then(|| {
        format!("priority {priority} is out of range 0-{MAX_PRIORITY} (0 lowest, 9 highest)")
    })
}

/// Why `d` is not a duration in `(0, max]`, if it is not.
fn check_bounded(d: Duration, max: Duration) -> Option<String> {
    if d.is_zero() {
        return Some("is zero; give a positive duration".to_owned());
    }
    (d > max).then(|| {
        format!(
            "{} is above the limit of {}",
            humantime::format_duration(d),
            humantime::format_duration(max)
        )
    })
}

/// Why `timeout` is out of range, if it is.
pub fn check_timeout(timeout: Duration) -> Option<String> {
    check_bounded(timeout, MAX_TIMEOUT)
}

/// Why `expect_success_within` is out of range, if it is.
pub fn check_expect_success_within(within: Duration) -> Option<String> {
    check_bounded(within, MAX_EXPECT_SUCCESS_WITHIN)
}

/// The size of `payload` as compact JSON, the size its bound is on.
pub fn payload_bytes(payload: &serde_json::Value) -> usize {
    serde_json::to_vec(payload).map_or(usize::MAX, |b| b.len())
}

/// Why a payload of `size` bytes (as compact JSON) is refused, if it is.
pub fn check_payload_size(size: usize) -> Option<String> {
    (size > MAX_PAYLOAD_BYTES).then(|| {
        format!(
            "is {size} bytes serialized; the limit is {MAX_PAYLOAD_BYTES} bytes (32 KiB); store large data elsewhere and pass a reference"
        )
    })
}

/// Why an idempotency key is refused, if it is.
pub fn check_idempotency_key(key: &str) -> Option<String> {
    (key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN).then(|| {
        format!(
            "must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} bytes, found {}",
            key.len()
        )
    })
}

/// Why `retry.max_retries` is out of range, if it is.
pub fn check_max_retries(n: i128) -> Option<String> {
    (!(0..=i128::from(MAX_RETRIES)).contains(&n))
        .then(|| format!("max_retries {n} is out of range 0-{MAX_RETRIES}"))
}

/// Every bound a retry policy breaks, under `retry.`. The JSON validator reads the section
/// field by field and then calls this on the policy it built, so the bounds are these.
pub fn check_retry(p: &RetryPolicy) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut push = |path: &str, problem: Option<String>| {
        if let Some(reason) = problem {
            errors.push(FieldError::new(path, reason));
        }
    };
    push(
        "retry.max_retries",
        check_max_retries(i128::from(p.max_retries)),
    );
    push(
        "retry.initial_interval",
        check_bounded(p.initial_interval, MAX_RETRY_INTERVAL),
    );
    push(
        "retry.max_interval",
        check_bounded(p.max_interval, MAX_RETRY_INTERVAL),
    );
    push(
        "retry.multiplier",
        (!(1.0..=MAX_MULTIPLIER).contains(&p.multiplier)).then(|| {
            format!(
                "{} is out of range 1-{MAX_MULTIPLIER}; 1 keeps the wait constant, 2 doubles it",
                p.multiplier
            )
        }),
    );
    push(
        "retry.jitter",
        (!(0.0..=1.0).contains(&p.jitter)).then(|| {
            format!(
                "{} is out of range 0-1 (0.2 spreads waits by +-20%)",
                p.jitter
            )
        }),
    );
    if let Some(elapsed) = p.max_elapsed {
        push(
            "retry.max_elapsed",
            check_bounded(elapsed, MAX_RETRY_ELAPSED),
        );
    }
    if p.max_interval < p.initial_interval {
        push(
            "retry.max_interval",
            Some(format!(
                "{} is below initial_interval {}",
                humantime::format_duration(p.max_interval),
                humantime::format_duration(p.initial_interval)
            )),
        );
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_only_settings_are_told_apart() {
        assert!(!TaskOptions::new().priority(9).sets_schedule_only());
        assert!(TaskOptions::new()
            .misfire(MisfirePolicy::Skip)
            .sets_schedule_only());
        assert!(TaskOptions::new()
            .expect_success_within(Duration::from_secs(1))
            .sets_schedule_only());
    }

    #[test]
    fn the_defaults_hold_and_each_bound_is_named_by_its_path() {
        assert!(TaskOptions::default().check().is_ok());
        let bad = TaskOptions::new()
            .priority(10)
            .timeout(Duration::ZERO)
            .idempotency_key("")
            .expect_success_within(MAX_EXPECT_SUCCESS_WITHIN + Duration::from_secs(1))
            .retry(RetryPolicy {
                max_retries: MAX_RETRIES + 1,
                initial_interval: Duration::from_secs(u64::MAX),
                multiplier: f64::NAN,
                jitter: 2.0,
                ..RetryPolicy::default()
            });
        let errors = bad.check().unwrap_err();
        for path in [
            "priority",
            "timeout",
            "idempotency_key",
            "expect_success_within",
            "retry.max_retries",
            "retry.initial_interval",
            "retry.multiplier",
            "retry.jitter",
            "retry.max_interval",
        ] {
            assert!(errors.has(path), "{path} missing from {errors}");
        }
    }

    #[test]
    fn a_spec_built_in_code_round_trips_its_options_and_passes_the_json_checks() {
        let options = TaskOptions::new()
            .priority(2)
            .timeout(Duration::from_secs(90))
            .misfire(MisfirePolicy::Skip)
            .overlap(OverlapPolicy::Replace)
            .expect_success_within(Duration::from_secs(600));
        let spec = TaskSpec::new("ns", "t", "log", Schedule::Every(Duration::from_secs(5)))
            .with_options(options.clone());
        assert_eq!(spec.options(), options);
        spec.validate().unwrap();
        let parsed = TaskSpec::from_json(&spec.to_json(), "ns", "t").unwrap();
        assert_eq!(parsed.options(), options);
        let over = spec.with_options(TaskOptions::new().timeout(MAX_TIMEOUT * 2));
        assert!(over.validate().unwrap_err().has("timeout"));
    }
}
