//! When a failed attempt is tried again. The decision is the scheduling core's
//! ([`ax_scheduler_core::retry`]), shared with the embedded kernel; the pool spends the
//! wait in Redis's delayed set, carrying the attempt number and the first attempt's instant
//! in the message, so it keeps no retry state in memory.

pub use ax_scheduler_core::retry::{base_interval, decide, RetryDecision};
