//! One queue's contents (`ax queue show`): what runs and where, what waits in take order, and
//! the pending retries by due time, each a table under a line with its total.
//!
//! A list the API cut at the limit says how many more there are, so a short table is never
//! read as the whole queue.

use super::format::{instant, table};
use ax_control::api::{QueueContents, QueuedExecution};

fn part(
    out: &mut String,
    title: &str,
    total: u64,
    list: &[QueuedExecution],
    heads: &[&str],
    cells: impl Fn(&QueuedExecution) -> Vec<String>,
) {
    out.push_str(&format!("\n{title}: {total}\n"));
    if list.is_empty() {
        return;
    }
    let mut all = vec!["EXECUTION", "TASK", "ATTEMPT"];
    all.extend_from_slice(heads);
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|e| {
            let mut row = vec![
                e.execution_id.to_string(),
                format!("{}/{}", e.namespace, e.task_id),
                e.attempt.to_string(),
            ];
            row.extend(cells(e));
            row
        })
        .collect();
    out.push_str(&table(&all, &rows));
    let shown = u64::try_from(list.len()).unwrap_or(u64::MAX);
    if total > shown {
        out.push_str(&format!("(the first {shown}; --limit shows more)\n"));
    }
}

/// `ax queue show`.
pub fn queue_text(q: &QueueContents) -> String {
    let mut out = format!(
        "queue {}{}\n",
        q.name,
        if q.paused {
            " (paused: workers take nothing until `ax queue resume`)"
        } else {
            ""
        }
    );
    let running = u64::try_from(q.running.len()).unwrap_or(u64::MAX);
    part(
        &mut out,
        "running",
        running,
        &q.running,
        &["WORKER", "ENQUEUED"],
        |e| {
            vec![
                e.worker.clone().unwrap_or_else(|| "-".into()),
                instant(Some(e.enqueued_at)),
            ]
        },
    );
    part(
        &mut out,
        "waiting",
        q.waiting_total,
        &q.waiting,
        &["PRIORITY", "DUE", "ENQUEUED"],
        |e| {
            vec![
                e.priority.to_string(),
                instant(Some(e.fire_at)),
                instant(Some(e.enqueued_at)),
            ]
        },
    );
    part(
        &mut out,
        "retrying",
        q.retrying_total,
        &q.retrying,
        &["RETRY DUE", "DUE"],
        |e| vec![instant(e.retry_at), instant(Some(e.fire_at))],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ax_scheduler_core::{ExecutionId, UtcMillis};

    #[test]
    fn each_part_says_its_total_and_when_it_is_cut() {
        let e = QueuedExecution {
            execution_id: ExecutionId::from_u128(1),
            namespace: "default".into(),
            task_id: "t".into(),
            attempt: 2,
            fire_at: UtcMillis(0),
            enqueued_at: UtcMillis(1000),
            priority: 5,
            retry_at: Some(UtcMillis(60_000)),
            worker: None,
        };
        let q = QueueContents {
            name: "default".into(),
            paused: true,
            waiting_total: 3,
            waiting: vec![e.clone()],
            retrying_total: 1,
            retrying: vec![e],
            running: Vec::new(),
        };
        let text = queue_text(&q);
        assert!(text.starts_with("queue default (paused"), "{text}");
        assert!(text.contains("\nrunning: 0\n\nwaiting: 3\n"), "{text}");
        assert!(text.contains("(the first 1; --limit shows more)"), "{text}");
        assert!(text.contains("retrying: 1\n"), "{text}");
        assert!(text.contains("1970-01-01T00:01:00.000Z"), "{text}");
    }
}
