//! Durations as Redis takes them: whole milliseconds.
//!
//! TTLs, scores and the connection's own retry delays all pass through one conversion, kept
//! below both the connection and the queue client so that either can use it.

use std::time::Duration;

/// A duration as whole milliseconds (for Redis TTLs and scores).
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
