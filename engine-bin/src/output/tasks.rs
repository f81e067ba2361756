//! Tasks as the CLI shows them: the task list with each schedule in one line, and what a kill did.
//!
//! A schedule is summarized from the spec as written, so the list reads like the file that
//! registered the task.

use ax_scheduler_core::UtcMillis;

use super::format::{instant, table};
use crate::api::{KillResult, TaskView};

/// One line for a spec's `schedule` object, as written (`cron 0 9 * * * Asia/Shanghai`,
/// `every 10s`, `delay 5m`, `at <instant>`).
pub fn schedule_summary(spec: &serde_json::Value) -> String {
    let Some(schedule) = spec.get("schedule").and_then(|s| s.as_object()) else {
        return "-".to_owned();
    };
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(expr) = schedule.get("cron") {
        let tz = schedule.get("timezone").map(text).unwrap_or_default();
        return format!("cron {} {}", text(expr), tz).trim_end().to_owned();
    }
    for kind in ["every", "delay"] {
        if let Some(v) = schedule.get(kind) {
            return format!("{kind} {}", text(v));
        }
    }
    if let Some(v) = schedule.get("at") {
        return match v.as_i64() {
            Some(ms) => format!("at {}", UtcMillis(ms)),
            None => format!("at {}", text(v)),
        };
    }
    "-".to_owned()
}

/// `ax task list`.
pub fn task_table(tasks: &[TaskView]) -> String {
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            vec![
                format!("{}/{}", t.namespace, t.id),
                t.schedule_text
                    .clone()
                    .unwrap_or_else(|| schedule_summary(&t.spec)),
                t.status.clone().unwrap_or_else(|| "-".to_owned()),
                instant(t.next_fire),
                instant(t.last_fire),
                t.last_outcome.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "TASK",
            "SCHEDULE",
            "STATUS",
            "NEXT FIRE",
            "LAST FIRE",
            "LAST OUTCOME",
        ],
        &rows,
    );
    // A row cannot hold why a spec is refused, and INVALID alone leaves the reader guessing.
    for t in tasks.iter().filter(|t| !t.errors.is_empty()) {
        out.push_str(&format!("\n{}/{} is invalid:\n", t.namespace, t.id));
        for e in &t.errors {
            out.push_str(&format!("  - {e}\n"));
        }
    }
    out
}

/// What `ax task kill` did: one line per execution.
pub fn kill_text(r: &KillResult) -> String {
    r.killed
        .iter()
        .map(|k| {
            let what = match k.state.as_str() {
                "waiting" => "removed before it ran",
                "retry_pending" => "its pending retry removed",
                "running" => "its worker stops it within a second",
                "already_killed" => "killed already",
                other => other,
            };
            format!("execution {} killed: {what}\n", k.execution_id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn schedules_read_as_written() {
        let s = |v| schedule_summary(&json!({ "schedule": v }));
        assert_eq!(
            s(json!({"cron": "0 9 * * *", "timezone": "Asia/Shanghai"})),
            "cron 0 9 * * * Asia/Shanghai"
        );
        assert_eq!(s(json!({"cron": "0 9 * * *"})), "cron 0 9 * * *");
        assert_eq!(s(json!({"every": "10s"})), "every 10s");
        assert_eq!(s(json!({"delay": "5m"})), "delay 5m");
        assert_eq!(s(json!({"at": 0})), "at 1970-01-01T00:00:00.000Z");
        assert_eq!(schedule_summary(&json!("not an object")), "-");
    }

    #[test]
    fn the_table_shows_the_last_outcome_and_why_a_spec_is_invalid() {
        let view = |id: &str| TaskView {
            namespace: "default".into(),
            id: id.into(),
            spec: json!({"schedule": {"every": "10s"}}),
            status: Some("SCHEDULED".into()),
            next_fire: None,
            last_fire: None,
            errors: Vec::new(),
            last_outcome: Some("failed".into()),
            last_error: None,
            namespace_paused: false,
            schedule_text: None,
            upcoming_fires: Vec::new(),
        };
        let mut bad = view("bad");
        bad.status = Some("INVALID".into());
        bad.last_outcome = None;
        bad.errors = vec!["namespace: `ops` does not match the key's `default`".into()];
        let shown = task_table(&[view("good"), bad]);
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].ends_with("LAST OUTCOME"), "{shown}");
        assert!(lines[1].ends_with("failed"), "{shown}");
        assert!(
            shown.contains("default/bad is invalid:\n  - namespace: `ops` does not match"),
            "{shown}"
        );
    }
}
