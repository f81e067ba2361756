//! `ax scheduled ...`: run a handler once at an instant or after a delay, kept in Redis
//! until due (no task in etcd), and read, cancel, move or list what waits.
//!
//! Every subcommand is one call of the control API's scheduled operations, the ones
//! `/api/v1/scheduled` and the SDK make, so the checks and the audit records are the same.

use std::time::Duration;

use clap::Subcommand;

use super::output;
use super::plumbing::{api_error, backend, print_stdout};
use super::OutputFormat;
use crate::cli::CliError;
use crate::config::Config;
use ax_control::api::{
    ApiBackend, Instant, RescheduleRequest, ScheduleBatch, ScheduleRequest, ScheduledView,
};
use ax_control::audit::Actor;
use ax_control::operations::Operations;
use ax_scheduler_core::UtcMillis;

/// `ax scheduled ...`
#[derive(Debug, Subcommand)]
pub enum ScheduledCommand {
    /// Schedule a handler to run once (prints the id that get, cancel and move take).
    Add {
        /// The handler that runs it.
        handler: String,
        /// Its namespace.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// Its payload, JSON.
        #[arg(long)]
        payload: Option<String>,
        /// The queue whose workers run it.
        #[arg(long)]
        queue: Option<String>,
        /// What its executions are called (default: the handler).
        #[arg(long)]
        name: Option<String>,
        /// When it is due: RFC 3339 (`2026-12-24T18:00:00Z`).
        #[arg(long, conflicts_with = "after", required_unless_present = "after", value_parser = parse_rfc3339)]
        at: Option<UtcMillis>,
        /// How long from now it is due (`30m`, `1h 30m`).
        #[arg(long, value_parser = parse_duration)]
        after: Option<Duration>,
        /// 0 (lowest) to 9.
        #[arg(long)]
        priority: Option<u8>,
        /// Longest one attempt may run (`30s`).
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// Submissions sharing it within 24 h run once: the first.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
    /// Show a scheduled execution as it waits.
    Get {
        /// Its id, `QUEUE/EXECUTION_ID`.
        id: String,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
    /// Cancel a scheduled execution before it runs.
    Cancel {
        /// Its id, `QUEUE/EXECUTION_ID`.
        id: String,
    },
    /// Move a scheduled execution to another instant.
    Move {
        /// Its id, `QUEUE/EXECUTION_ID`.
        id: String,
        /// The new instant, RFC 3339.
        #[arg(long, conflicts_with = "after", required_unless_present = "after", value_parser = parse_rfc3339)]
        at: Option<UtcMillis>,
        /// The new delay from now.
        #[arg(long, value_parser = parse_duration)]
        after: Option<Duration>,
    },
    /// List a queue's scheduled executions, soonest first.
    List {
        /// Queue name.
        #[arg(default_value = "default")]
        queue: String,
        /// How many to show (1-1000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
        /// Go on from the token a previous page printed.
        #[arg(long = "continue", value_name = "TOKEN")]
        continue_token: Option<String>,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
}

fn parse_rfc3339(s: &str) -> Result<UtcMillis, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| UtcMillis::from_datetime(&t))
        .map_err(|e| format!("`{s}` is not an RFC 3339 instant like 2026-12-24T18:00:00Z: {e}"))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("`{s}` is not a duration like 30m: {e}"))
}

/// Runs `ax scheduled ...` for `actor`.
pub(super) async fn run(
    config: &Config,
    actor: &Actor,
    cmd: ScheduledCommand,
) -> Result<(), CliError> {
    let b = backend(config).await?;
    let ops = Operations::new(&b, actor);
    match cmd {
        ScheduledCommand::Add {
            handler,
            namespace,
            payload,
            queue,
            name,
            at,
            after,
            priority,
            timeout,
            idempotency_key,
            output,
        } => {
            let payload = match payload {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| CliError::Usage(format!("--payload is not JSON: {e}")))?,
                None => serde_json::Value::Null,
            };
            let request = ScheduleRequest {
                namespace,
                name,
                handler,
                payload,
                queue,
                at: at.map(|t| Instant::Millis(t.0)),
                after,
                priority,
                timeout,
                retry: None,
                idempotency_key,
            };
            let reply = ops
                .schedule(ScheduleBatch {
                    executions: vec![request],
                })
                .await
                .map_err(api_error)?;
            print_stdout(&match output {
                OutputFormat::Json => output::json(&reply),
                OutputFormat::Table => reply
                    .scheduled
                    .iter()
                    .map(|r| {
                        let dup = if r.duplicate {
                            " (its idempotency key was used: this is that execution)"
                        } else {
                            ""
                        };
                        format!("scheduled {} due {}{dup}\n", r.id, r.due.to_rfc3339())
                    })
                    .collect(),
            })
        }
        ScheduledCommand::Get { id, output } => {
            let view = b.scheduled(id).await.map_err(api_error)?;
            print_stdout(&match output {
                OutputFormat::Json => output::json(&view),
                OutputFormat::Table => rows(std::slice::from_ref(&view)),
            })
        }
        ScheduledCommand::Cancel { id } => {
            let view = ops.cancel_scheduled(id).await.map_err(api_error)?;
            print_stdout(&format!(
                "cancelled {} (was due {})\n",
                view.id,
                view.due.to_rfc3339()
            ))
        }
        ScheduledCommand::Move { id, at, after } => {
            let to = RescheduleRequest {
                at: at.map(|t| Instant::Millis(t.0)),
                after,
            };
            let due = to.due(b.now()).map_err(api_error)?;
            let view = ops.reschedule(id, due).await.map_err(api_error)?;
            print_stdout(&format!("moved {} to {}\n", view.id, view.due.to_rfc3339()))
        }
        ScheduledCommand::List {
            queue,
            limit,
            continue_token,
            output,
        } => {
            let page = b
                .scheduled_page(queue, continue_token, usize::from(limit))
                .await
                .map_err(api_error)?;
            if let Some(token) = &page.continue_token {
                eprintln!("more follow: add --continue {token}");
            }
            print_stdout(&match output {
                OutputFormat::Json => output::json(&page),
                OutputFormat::Table => {
                    format!("{} scheduled in all\n{}", page.total, rows(&page.items))
                }
            })
        }
    }
}

/// Aligned rows: due, id, namespace/name, handler.
fn rows(views: &[ScheduledView]) -> String {
    let mut out = String::from("DUE                       ID                                                  NAME  HANDLER\n");
    for v in views {
        out.push_str(&format!(
            "{:<25} {:<51} {}/{}  {}\n",
            v.due.to_rfc3339(),
            v.id,
            v.namespace,
            v.name,
            v.handler
        ));
    }
    out
}
