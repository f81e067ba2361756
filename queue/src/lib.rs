//! ax's reliable Redis queue.
//!
//! A scheduler enqueues one [`ExecutionMessage`] per fire with [`Queue::enqueue`] (idempotent
//! per task and fire instant, refused for a deposed leader's fencing token); workers take
//! messages with a [`Consumer`] (BLMOVE into a per-worker processing list) and settle them
//! with [`Queue::ack`], [`Queue::retry_later`] (a delayed set), [`Queue::dead_letter`] or
//! [`Queue::release`]. A [`Maintenance`] loop promotes due retries and gives back the messages
//! of workers whose heartbeat is gone. Keys are listed in `docs/redis-layout.md`.

mod config;
mod consumer;
mod dlq;
mod error;
mod events;
mod history;
pub mod keys;
mod maintenance;
mod message;
mod queue;
mod scripts;

pub use config::QueueConfig;
pub use consumer::Consumer;
pub use dlq::DlqEntry;
pub use error::{QueueError, Result};
pub use events::{ExecutionEventKind, ExecutionEventRecord, EVENTS_CAP};
pub use history::{HistoryEntry, HistoryOutcome};
pub use keys::Keys;
pub use maintenance::{Maintenance, MaintenanceConfig, MaintenanceState, StepReport};
pub use message::{AttemptError, ExecutionMessage};
pub use queue::{Delivery, EnqueueOutcome, Queue, QueueStats, ENQUEUE_CHUNK};

/// The current instant from the system clock, for the edges that must read it.
pub fn now() -> ax_scheduler_core::UtcMillis {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    ax_scheduler_core::UtcMillis(ms)
}
