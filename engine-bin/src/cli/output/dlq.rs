//! The dead letters as a table (`ax dlq list`).
//!
//! The last error is shown whole: it is what an operator decides a requeue on.

use super::format::table;
use ax_control::api::DeadLetter;

/// `ax dlq list`.
pub fn dlq_table(letters: &[DeadLetter]) -> String {
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|d| {
            vec![
                d.execution_id.to_string(),
                format!("{}/{}", d.namespace, d.task_id),
                d.queue.clone(),
                d.attempts.to_string(),
                d.dead_at.to_string(),
                d.last_error.clone(),
            ]
        })
        .collect();
    table(
        &[
            "EXECUTION",
            "TASK",
            "QUEUE",
            "ATTEMPTS",
            "DEAD AT",
            "LAST ERROR",
        ],
        &rows,
    )
}
