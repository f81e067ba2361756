//! What the CLI prints: aligned tables for people, and the API's JSON for scripts.
//!
//! Rendering is pure (views in, text out) so it is tested without etcd or Redis. The JSON
//! form (`--output json`) is exactly what `/api/v1` returns, so a script can move between the
//! CLI and the API without reparsing anything. One submodule per thing shown (tasks, the
//! audit log, executions, one execution's story, dead letters, status, a queue's contents, a
//! chain of tasks), all on one shared cell formatting.

mod audit_log;
mod chain;
mod dlq;
mod executions;
mod format;
mod queue;
mod status;
mod story;
mod tasks;

pub use audit_log::audit_table;
pub use chain::Chain;
pub use dlq::{dlq_table, requeued_text};
pub use executions::{executions_table, history_table};
pub use format::{fire_lines, json, table};
pub use queue::queue_text;
pub use status::status_text;
pub use story::story_text;
pub use tasks::{kill_text, schedule_summary, task_table, task_text};
