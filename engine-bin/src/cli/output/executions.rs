//! Execution records as tables: the history across tasks (`ax history`) and one task's
//! attempts (`ax task history`).
//!
//! Both are one line per attempt; the cross-task form adds the task, the answer and a page
//! token because it is paged.

use super::format::{instant, millis, one_line, table};
use ax_control::api::{ExecutionList, ExecutionRecord};

/// `ax history`: one line per attempt, newest first, and the token of the next page when
/// there is one (a page can be short, even empty, and still have one: each request scans a
/// bounded part of the history).
pub fn executions_table(page: &ExecutionList) -> String {
    let rows: Vec<Vec<String>> = page
        .items
        .iter()
        .map(|r| {
            vec![
                instant(r.finished),
                format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or("-"),
                    r.task_id.as_deref().unwrap_or("-")
                ),
                r.execution_id.to_string(),
                r.attempt.to_string(),
                r.outcome.to_string(),
                origin_word(r).to_owned(),
                millis(r.duration_ms),
                millis(r.lateness_ms),
                r.worker.clone().unwrap_or_else(|| "-".to_owned()),
                r.output
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), answer_code),
                one_line(r.error.as_deref().unwrap_or_default(), 120),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "FINISHED",
            "TASK",
            "EXECUTION",
            "ATTEMPT",
            "OUTCOME",
            "ORIGIN",
            "DURATION",
            "LATENESS",
            "WORKER",
            "ANSWER",
            "ERROR",
        ],
        &rows,
    );
    if let Some(token) = &page.continue_token {
        out.push_str(&format!("more: --continue {token}\n"));
    }
    out
}

/// The history table's answer column: an HTTP status, or a command's exit code.
fn answer_code(o: &ax_scheduler_core::AttemptOutput) -> String {
    match (o.status, o.exit_code) {
        (Some(s), _) => s.to_string(),
        (None, Some(c)) => format!("exit {c}"),
        (None, None) => "-".to_owned(),
    }
}

/// `ax task history`.
pub fn history_table(records: &[ExecutionRecord]) -> String {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.execution_id.to_string(),
                r.attempt.to_string(),
                r.due.to_string(),
                instant(r.started),
                millis(r.lateness_ms),
                millis(r.duration_ms),
                r.outcome.to_string(),
                origin_word(r).to_owned(),
                r.worker.clone().unwrap_or_else(|| "-".to_owned()),
                r.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            "EXECUTION",
            "ATTEMPT",
            "DUE",
            "STARTED",
            "LATENESS",
            "DURATION",
            "OUTCOME",
            "ORIGIN",
            "WORKER",
            "ERROR",
        ],
        &rows,
    )
}

/// How the attempt's execution started, in one word (`-` for one recorded before origins
/// were kept).
fn origin_word(r: &ExecutionRecord) -> &'static str {
    r.lineage.origin.as_ref().map_or("-", |o| o.kind.as_str())
}
