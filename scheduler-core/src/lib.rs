//! ax's scheduling logic, free of I/O, clocks and async runtimes.
//!
//! Everything here is driven by an explicit `now` ([`time::UtcMillis`] or timer ticks), so the
//! engine reads the clock once at the edge and tests run on virtual time.

pub mod attempt;
pub mod backoff;
pub mod breaker;
pub mod concurrency;
mod cron;
pub mod deadline;
pub mod describe;
pub mod dispatcher;
pub mod duration_serde;
pub mod error;
pub mod etcd_keys;
pub mod execution;
pub mod execution_id;
pub mod fanout;
pub mod field_error;
pub mod finals;
pub mod handler;
pub mod intern;
pub mod key;
pub mod limiter;
pub mod misfire;
pub mod options;
pub mod overlap;
pub mod placement;
pub mod queue_set;
pub mod ready;
pub mod redact;
pub mod retry;
pub mod schedule;
pub mod secret_ref;
pub mod state;
pub mod status;
pub mod suggest;
pub mod task;
pub mod time;
pub mod timer;
pub mod validate;
pub mod workflow;

pub use attempt::HandlerError;
pub use backoff::ReconnectBackoff;
pub use concurrency::Concurrency;
pub use dispatcher::{
    Dispatch, Dispatcher, DispatcherConfig, InDoubt, Notice, DEFAULT_ROUTINE_WRITE_DELAY,
    LOST_END_ERROR,
};
pub use error::CoreError;
pub use execution::{
    AttemptEnd, AttemptOutcome, AttemptOutput, EnqueueOutcome, EventPosition, ExecutionEvent,
    MAX_COMMAND_OUTPUT_BYTES, MAX_OUTPUT_BYTES,
};
pub use execution_id::{ExecutionId, ParseExecutionIdError};
pub use intern::Interner;
pub use key::TaskKey;
pub use misfire::{plan_misfires, MisfirePlan, ScheduleCursor};
pub use options::TaskOptions;
pub use schedule::CompiledSchedule;
pub use state::TaskState;
pub use status::TaskStatus;
pub use task::{MisfirePolicy, OverlapPolicy, RetryPolicy, Schedule, TaskSpec};
pub use time::{Clock, SystemClock, UtcMillis};
pub use validate::{FieldError, ValidationErrors};

/// The Rust blocks of docs/timer.md, built as doctests so the page cannot drift from the API
/// (`tests/doc_blocks.rs`). Its two API listings are signatures without bodies, which no
/// compiler takes, so they are `ignore`: rustdoc's own page of each type is the checked one.
#[cfg(doctest)]
#[doc = include_str!("../../docs/timer.md")]
mod timer_md {}
