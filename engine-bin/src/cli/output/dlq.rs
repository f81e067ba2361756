//! The dead letters as a table (`ax dlq list`), and what a requeue did (`ax dlq requeue`).
//!
//! The last error is shown whole: it is what an operator decides a requeue on. A requeue
//! names each new execution beside its dead letter, and whether it runs the task's current
//! spec (with what of the target changed) or the stored message.

use super::format::table;
use ax_control::api::{DeadLetter, DlqRequeued, RequeueOnto};

/// `ax dlq requeue`: the count, then one line per dead letter: old id, new id, task, onto.
pub fn requeued_text(done: &DlqRequeued) -> String {
    let mut out = format!("requeued {} dead letter(s)\n", done.count);
    if done.requeued.is_empty() {
        return out;
    }
    let rows: Vec<Vec<String>> = done
        .requeued
        .iter()
        .map(|r| {
            let onto = match r.onto {
                RequeueOnto::Stored => "the stored message".to_owned(),
                RequeueOnto::CurrentSpec if r.changed.is_empty() => "the current spec".to_owned(),
                RequeueOnto::CurrentSpec => {
                    format!("the current spec (changed: {})", r.changed.join(", "))
                }
            };
            vec![
                r.dead_letter.to_string(),
                r.execution_id.to_string(),
                format!("{}/{}", r.namespace, r.task_id),
                onto,
            ]
        })
        .collect();
    out.push_str(&table(
        &["DEAD LETTER", "NEW EXECUTION", "TASK", "RUNS"],
        &rows,
    ));
    let listed = u64::try_from(done.requeued.len()).unwrap_or(u64::MAX);
    if done.count > listed {
        out.push_str(&format!("... and {} more\n", done.count - listed));
    }
    out
}

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
