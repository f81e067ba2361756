//! Instants as integer milliseconds since the Unix epoch, UTC.
//!
//! Everything ax stores or passes between crates uses [`UtcMillis`]: it is what etcd state and
//! Redis messages hold, it orders and subtracts without time-zone questions, and it keeps the
//! core free of clocks (callers read the clock at the edge and pass `now` in). Time zones
//! appear only when a cron expression is evaluated or an instant is shown to a person.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// The largest clock offset from etcd a replica leads with, by default
/// (`scheduler.max_clock_skew`).
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(2);

/// The wall clock, injected into everything that runs around the core.
///
/// The core itself takes `now` as an argument; the shells (the scheduler role, the worker
/// pool, alert dispatch) read it through a `Clock` they are given, so a test hands them one
/// that follows tokio's paused time and whole failovers run on virtual time. Monotonic
/// deadlines are tokio's `Instant`s, which the same paused runtime drives.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The wall clock now.
    fn now(&self) -> UtcMillis;
}

/// The host's clock ([`UtcMillis::now`]): what a replica runs on.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UtcMillis {
        UtcMillis::now()
    }
}

/// A UTC instant in whole milliseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UtcMillis(pub i64);

impl UtcMillis {
    /// The latest instant: "whenever", for a deadline that has always passed.
    pub const MAX: UtcMillis = UtcMillis(i64::MAX);

    /// The system clock now. The one place in ax that reads the wall clock: nothing in this
    /// crate calls it (the core's logic takes `now` as an argument), the library crates read
    /// the [`Clock`] they are given (whose implementations call this), and only the binary
    /// and tests call it directly.
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }

    /// The instant of a `SystemTime`; before the epoch reads as the epoch.
    pub fn from_system_time(t: SystemTime) -> Self {
        let ms = t
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        UtcMillis(ms)
    }

    /// The instant as a chrono `DateTime<Utc>`; `None` outside chrono's range.
    pub fn to_datetime(self) -> Option<DateTime<Utc>> {
        Utc.timestamp_millis_opt(self.0).single()
    }

    /// The instant of a chrono `DateTime` (any zone), truncated to the millisecond.
    pub fn from_datetime<Tz: TimeZone>(dt: &DateTime<Tz>) -> Self {
        UtcMillis(dt.timestamp_millis())
    }

    /// `self + d`, saturating at the ends of the range.
    // Named methods rather than `ops::Add`: they take a `Duration` and saturate, which an
    // operator would hide.
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        UtcMillis(self.0.saturating_add(ms))
    }

    /// `self - d`, saturating at the ends of the range.
    #[allow(clippy::should_implement_trait)]
    pub fn sub(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        UtcMillis(self.0.saturating_sub(ms))
    }

    /// How far `self` lies after `earlier`; zero when it does not.
    pub fn since(self, earlier: UtcMillis) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// RFC 3339 in UTC with millisecond precision, for logs and people.
    pub fn to_rfc3339(self) -> String {
        self.to_datetime()
            .map(|d| d.to_rfc3339_opts(SecondsFormat::Millis, true))
            .unwrap_or_else(|| format!("{}ms", self.0))
    }
}

impl fmt::Display for UtcMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_formats() {
        let t = UtcMillis(1_700_000_000_123);
        assert_eq!(t.add(Duration::from_millis(7)).0, 1_700_000_000_130);
        assert_eq!(t.sub(Duration::from_secs(1)).0, 1_699_999_999_123);
        assert_eq!(t.since(UtcMillis(t.0 + 5)), Duration::ZERO);
        assert_eq!(t.to_rfc3339(), "2023-11-14T22:13:20.123Z");
        assert_eq!(UtcMillis(i64::MAX).add(Duration::from_secs(1)).0, i64::MAX);
    }
}
