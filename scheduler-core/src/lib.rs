//! ax's scheduling logic, free of I/O, clocks and async runtimes.
//!
//! Everything here is driven by an explicit `now` ([`time::UtcMillis`] or timer ticks), so the
//! engine reads the clock once at the edge and tests run on virtual time.

pub mod breaker;
pub mod duration_serde;
pub mod limiter;
pub mod ready;
pub mod task;
pub mod time;
pub mod timer;

pub use task::{MisfirePolicy, OverlapPolicy, RetryPolicy, Schedule, TaskSpec};
pub use time::UtcMillis;
