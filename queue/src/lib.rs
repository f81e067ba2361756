//! ax's reliable Redis queue.
//!
//! A scheduler enqueues one [`ExecutionMessage`] per fire with [`Queue::enqueue_batch`] (idempotent
//! per task and fire instant, refused for a deposed leader's fencing token); workers take
//! messages with a [`Consumer`] (in priority order with aging, moved into a per-worker processing list) and settle them
//! with [`Queue::ack`], [`Queue::retry_later`] (a delayed set), [`Queue::dead_letter`] or
//! [`Queue::release`]; a settle that ends an attempt records its end in the queue's end log
//! in the same script, and [`Queue::relay_ends`] moves it on to the leader and the history. A [`Maintenance`] loop promotes due retries and gives back the messages
//! of workers whose heartbeat is gone. An execution whose receiver takes it on to report its
//! end later waits in an awaiting set instead of a worker's list (see `awaiting.rs`).
//! Keys are listed in `docs/redis-layout.md`.

mod awaiting;
mod config;
mod conn;
mod consumer;
mod control;
mod dlq;
mod ends;
mod enqueue;
mod error;
mod events;
mod fence;
mod history;
pub mod keys;
mod maintenance;
mod message;
mod millis;
mod origin;
mod partitions;
mod peek;
mod queue;
mod retry;
mod scheduled;
mod scripts;
mod server;
mod settle;
mod stats;
mod work;
mod workers;

pub use awaiting::{
    token_hash, AwaitSettle, AwaitStart, AwaitingRecord, AwaitingState, CompletionToken, EndBy,
    EndResult, Opened, Progress, ProgressResult, ReportedEnd, ReportedStatus, TokenClaim,
};
pub use config::{
    ClientIdentity, QueueConfig, QueueLimits, RedisTls, DEFAULT_DLQ_MAX_ENTRIES,
    DEFAULT_DLQ_RETENTION, DEFAULT_EXECUTION_HISTORY_MAX_ENTRIES,
    DEFAULT_EXECUTION_HISTORY_RETENTION, DEFAULT_HISTORY_CAP, DEFAULT_HISTORY_RETENTION,
    STRICT_PRIORITY_STEP,
};
pub use conn::{slot, Connection};
pub use consumer::{Consumer, PAUSED_POLL};
pub use control::{Kill, KillRecorder, KillState, Located, Place, StopOrder, StopProbe};
pub use dlq::DlqEntry;
pub use ends::{EndRecord, PendingEnd, Settled, END_RELAY_AFTER};
pub use enqueue::ENQUEUE_CHUNK;
pub use error::{QueueError, Result};
pub use events::{EventEntry, ExecutionEventRecord, EVENTS_CAP};
pub use fence::Fence;
pub use history::{ExecutionFilter, ExecutionItem, ExecutionPage, HistoryEntry, HISTORY_SCAN_MAX};
pub use keys::Keys;
pub use maintenance::{
    Maintenance, MaintenanceConfig, MaintenanceState, StepReport, DEFAULT_VISIBILITY_TIMEOUT,
};
pub use message::{new_execution_id, AttemptError, Dedupe, ExecutionMessage, Lineage};
pub use origin::{Origin, OriginKind, ORIGIN_PAYLOAD_MAX};
pub use partitions::{
    partition_name, partition_of, split_partition, MAX_PARTITIONS, PARTITION_SEPARATOR,
};
pub use peek::QueuePeek;
pub use queue::{Delivery, Queue, REPLICA_ACK_WAIT};
pub use retry::RetrySettle;
pub use scheduled::{
    Promoter, PromoterConfig, PromoterState, ScheduleOutcome, ScheduledEntry, ScheduledRef,
    Submission, PAGE_TIES_MAX, SCHEDULED_ID_MARK, SCHEDULED_PAGE_MAX, SCHEDULE_BATCH_MAX,
    SCHEDULE_CHUNK,
};
pub use server::ServerInfo;
pub use stats::{QueueStats, UNSERVED_AFTER};
