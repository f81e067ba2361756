//! Tasks as the CLI shows them: the task list with each schedule in one line, and what a kill did.
//!
//! A schedule is summarized from the spec as written, so the list reads like the file that
//! registered the task.

use ax_scheduler_core::UtcMillis;

use super::format::{cron_zone, fire_lines_in, instant, json, table, zoned};
use ax_control::api::{KillResult, TaskView};

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
                shown_status(t),
                instant(t.next_fire),
                instant(t.last_fire),
                t.last_outcome
                    .map_or_else(|| "-".to_owned(), |o| o.to_string()),
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
    for t in tasks {
        if let Some(line) = throttle_line(t) {
            out.push_str(&format!("\n{line}\n"));
        }
    }
    out
}

/// The STATUS column: the state machine's status, or `THROTTLED` while the task's circuit
/// breaker skips most of its fires (a plain `SCHEDULED` would hide that it mostly does not run).
fn shown_status(t: &TaskView) -> String {
    if t.throttled.is_some() {
        return "THROTTLED".to_owned();
    }
    t.status.clone().unwrap_or_else(|| "-".to_owned())
}

/// Why a task is `THROTTLED`, in one sentence; `None` for one that is not.
fn throttle_line(t: &TaskView) -> Option<String> {
    let th = t.throttled.as_ref()?;
    Some(format!(
        "{}/{} is throttled since {}: {} of its last {} executions failed, so 1 fire in {} is dispatched until they succeed again",
        t.namespace, t.id, th.since, th.failures, th.executions, th.dispatch_every
    ))
}

/// `ax task get`: the task's facts, its instants in UTC and, for a cron in another zone, on
/// that zone's clock too; then why it is throttled or invalid, its next fires, and its spec.
pub fn task_text(t: &TaskView) -> String {
    let zone = t
        .spec
        .pointer("/schedule/timezone")
        .and_then(|z| z.as_str())
        .and_then(cron_zone);
    let at = |v: Option<UtcMillis>| v.map_or_else(|| "-".to_owned(), |v| zoned(v, zone));
    let status = match (&t.throttled, &t.status) {
        (Some(_), Some(s)) => format!("THROTTLED ({s})"),
        _ => shown_status(t),
    };
    let mut facts = vec![
        ["task".to_owned(), format!("{}/{}", t.namespace, t.id)],
        [
            "schedule".to_owned(),
            t.schedule_text
                .clone()
                .unwrap_or_else(|| schedule_summary(&t.spec)),
        ],
        ["status".to_owned(), status],
        ["next fire".to_owned(), at(t.next_fire)],
        ["last fire".to_owned(), at(t.last_fire)],
        [
            "last outcome".to_owned(),
            t.last_outcome
                .map_or_else(|| "never ran".to_owned(), |o| o.to_string()),
        ],
    ];
    if let Some(e) = &t.last_error {
        facts.push(["last error".to_owned(), e.clone()]);
    }
    if t.namespace_paused {
        facts.push(["paused by".to_owned(), format!("namespace {}", t.namespace)]);
    }
    let width = facts.iter().map(|[k, _]| k.len()).max().unwrap_or(0);
    let mut out: String = facts
        .iter()
        .map(|[k, v]| format!("{k:width$}  {v}\n"))
        .collect();
    if let Some(line) = throttle_line(t) {
        out.push_str(&format!("\n{line}\n"));
    }
    if !t.errors.is_empty() {
        out.push_str("\nproblems:\n");
        for e in &t.errors {
            out.push_str(&format!("  - {e}\n"));
        }
    }
    if !t.upcoming_fires.is_empty() {
        out.push('\n');
        out.push_str(&fire_lines_in(&t.upcoming_fires, zone));
    }
    out.push_str("\nspec:\n");
    out.push_str(&json(&t.spec));
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

/// A view with nothing recorded yet, for the renderers' tests.
#[cfg(test)]
pub(super) fn test_view(ns: &str, id: &str, spec: serde_json::Value, status: &str) -> TaskView {
    TaskView {
        namespace: ns.into(),
        id: id.into(),
        spec,
        status: Some(status.into()),
        next_fire: None,
        last_fire: None,
        errors: Vec::new(),
        last_outcome: None,
        last_error: None,
        namespace_paused: false,
        throttled: None,
        schedule_text: None,
        upcoming_fires: Vec::new(),
    }
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
            last_outcome: Some(ax_control::api::Outcome::Failed),
            ..test_view(
                "default",
                id,
                json!({"schedule": {"every": "10s"}}),
                "SCHEDULED",
            )
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

    #[test]
    fn get_reads_in_the_cron_zone_and_says_why_a_task_is_throttled() {
        let spec = json!({"schedule": {"cron": "0 30 9 * * *", "timezone": "America/New_York"}});
        let mut v = TaskView {
            // 2026-12-02T14:30:00Z is 09:30 in New York.
            next_fire: Some(UtcMillis(1_796_221_800_000)),
            schedule_text: Some("every day at 09:30 America/New_York".into()),
            upcoming_fires: vec![UtcMillis(1_796_221_800_000)],
            ..test_view("default", "report", spec, "SCHEDULED")
        };
        let text = task_text(&v);
        assert!(
            text.contains(
                "next fire     2026-12-02T14:30:00.000Z  2026-12-02 09:30:00 EST (-05:00)\n"
            ),
            "{text}"
        );
        assert!(text.contains("status        SCHEDULED\n"), "{text}");
        assert!(text.contains("last outcome  never ran\n"), "{text}");
        assert!(
            text.contains("next 1 fire(s), UTC and America/New_York:"),
            "{text}"
        );
        assert!(text.contains("spec:\n{"), "{text}");
        v.throttled = Some(ax_scheduler_core::breaker::Throttle {
            since: UtcMillis(0),
            failures: 3,
            executions: 4,
            dispatch_every: 10,
        });
        let text = task_text(&v);
        assert!(
            text.contains("status        THROTTLED (SCHEDULED)\n"),
            "{text}"
        );
        assert!(text.contains("default/report is throttled since"), "{text}");
    }

    #[test]
    fn a_throttled_task_says_so_and_why() {
        let mut v = TaskView {
            last_outcome: Some(ax_control::api::Outcome::Failed),
            ..test_view(
                "default",
                "flaky",
                json!({"schedule": {"every": "1s"}}),
                "SCHEDULED",
            )
        };
        assert!(!task_table(std::slice::from_ref(&v)).contains("THROTTLED"));
        v.throttled = Some(ax_scheduler_core::breaker::Throttle {
            since: UtcMillis(0),
            failures: 4,
            executions: 5,
            dispatch_every: 10,
        });
        let shown = task_table(&[v]);
        let row = shown.lines().nth(1).unwrap();
        assert!(
            row.contains("THROTTLED") && !row.contains("SCHEDULED"),
            "{shown}"
        );
        assert!(
            shown.contains("default/flaky is throttled since 1970-01-01T00:00:00.000Z: 4 of its last 5 executions failed, so 1 fire in 10 is dispatched"),
            "{shown}"
        );
    }
}
