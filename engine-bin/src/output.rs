//! What the CLI prints: aligned tables for people, and the API's JSON for scripts.
//!
//! Rendering is pure (views in, text out) so it is tested without etcd or Redis. The JSON
//! form (`--output json`) is exactly what `/api/v1` returns, so a script can move between the
//! CLI and the API without reparsing anything.

use ax_scheduler_core::UtcMillis;
use serde::Serialize;

use crate::api::{
    DeadLetter, ExecutionList, ExecutionRecord, ExecutionStory, KillResult, StatusView, TaskView,
};

/// `value` as pretty JSON with a final newline.
pub fn json<T: Serialize>(value: &T) -> String {
    // The API types are plain data: serializing them cannot fail.
    let mut s = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("\"{e}\""));
    s.push('\n');
    s
}

/// Columns padded to their widest cell, two spaces apart; no trailing blanks.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            let pad = widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(cell.chars().count())
                + 2;
            line.push_str(&" ".repeat(pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn instant(t: Option<UtcMillis>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.to_string())
}

fn millis(ms: Option<u64>) -> String {
    ms.map_or_else(
        || "-".to_owned(),
        |ms| humantime::format_duration(std::time::Duration::from_millis(ms)).to_string(),
    )
}

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
            ]
        })
        .collect();
    table(
        &["TASK", "SCHEDULE", "STATUS", "NEXT FIRE", "LAST FIRE"],
        &rows,
    )
}

/// The audit log as a table, newest first: when, who, through what, the action, its target
/// and the detail as compact JSON.
pub fn audit_table(records: &[crate::audit::AuditRecord]) -> String {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.at.to_string(),
                r.actor.clone(),
                r.via.clone(),
                r.action.clone(),
                if r.target.is_empty() {
                    "-".to_owned()
                } else {
                    r.target.clone()
                },
                r.detail
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            ]
        })
        .collect();
    table(&["AT", "ACTOR", "VIA", "ACTION", "TARGET", "DETAIL"], &rows)
}

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
                r.execution_id.clone(),
                r.attempt.to_string(),
                r.outcome.clone(),
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

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max).collect();
        cut.push_str("...");
        cut
    }
}

/// A job's progress report in words: `progress 40%: copying`.
fn progress_text(p: &ax_queue::Progress) -> String {
    let mut out = "progress".to_owned();
    if let Some(percent) = p.percent {
        out.push_str(&format!(" {percent}%"));
    }
    if let Some(m) = &p.message {
        out.push_str(&format!(": {}", one_line(m, 200)));
    }
    out
}

/// `ax execution get`: the execution's story in order, one event per line: fire, enqueue,
/// each attempt's start and end (with its worker, error and the start of its answer), each
/// retry, the attempt waiting for its completion with the job's last progress report, the
/// dead letter, then the outcome.
pub fn story_text(story: &ExecutionStory) -> String {
    let mut events: Vec<(Option<UtcMillis>, String)> = Vec::new();
    events.push((story.due, "fired (due)".to_owned()));
    if story.enqueued.is_some() {
        events.push((story.enqueued, "enqueued".to_owned()));
    }
    for (i, a) in story.attempts.iter().enumerate() {
        let n = a.attempt;
        if i > 0 {
            events.push((a.enqueued, format!("attempt {n} enqueued (retry)")));
        }
        events.push((
            a.started,
            format!(
                "attempt {n} started on {} ({} late)",
                a.worker.as_deref().unwrap_or("-"),
                millis(a.lateness_ms)
            ),
        ));
        let mut end = format!("attempt {n} {}", a.outcome);
        if let Some(e) = &a.error {
            end.push_str(&format!(": {}", one_line(e, 200)));
        }
        if let Some(due) = a.retry_at {
            end.push_str(&format!(" (retry due {due})"));
        }
        events.push((a.finished, end));
        if let Some(o) = &a.output {
            let more = if o.truncated { " ..." } else { "" };
            if o.status.is_none() && (o.exit_code.is_some() || !o.stderr.is_empty()) {
                let code = o
                    .exit_code
                    .map_or_else(|| "-".to_owned(), |c| c.to_string());
                events.push((
                    None,
                    format!(
                        "  exit code {code}; stdout: {}{more}",
                        one_line(&o.body, 1024)
                    ),
                ));
                if !o.stderr.is_empty() {
                    events.push((None, format!("  stderr: {}", one_line(&o.stderr, 1024))));
                }
            } else {
                let status = o.status.map_or_else(|| "-".to_owned(), |s| s.to_string());
                events.push((
                    None,
                    format!("  answer: HTTP {status} {}{more}", one_line(&o.body, 1024)),
                ));
            }
        }
    }
    if let Some(w) = &story.waiting {
        let n = w.attempt;
        events.push((
            Some(w.started),
            format!(
                "attempt {n} started on {}; accepted, waiting for its completion",
                w.worker
            ),
        ));
        if let Some(p) = &w.progress {
            events.push((Some(p.at), format!("attempt {n} {}", progress_text(p))));
        }
        if let Some(due) = w.deadline {
            events.push((
                None,
                format!("  its completion or next progress report is due by {due}"),
            ));
        }
    }
    if let Some(d) = &story.dead_letter {
        events.push((
            Some(d.dead_at),
            format!(
                "dead-lettered after {} attempt(s): {}",
                d.attempts,
                one_line(&d.last_error, 200)
            ),
        ));
    }
    let mut out = format!(
        "execution {}\ntask:    {}/{}\nqueue:   {}\noutcome: {}\n",
        story.execution_id, story.namespace, story.task_id, story.queue, story.outcome
    );
    if let Some(lineage) = story.attempts.first().map(|a| &a.lineage) {
        if let Some(run) = &lineage.run_id {
            out.push_str(&format!("run:     {run}\n"));
        }
        if let (Some(i), Some(n), Some(f)) =
            (lineage.shard_index, lineage.shard_total, &lineage.fanout_id)
        {
            out.push_str(&format!("shard:   {i} of 0..{n} (fan-out {f})\n"));
        }
        if let Some(w) = &lineage.target_worker {
            out.push_str(&format!("worker:  {w} (broadcast: runs there only)\n"));
        }
    }
    if let Some(fire) = &story.fire {
        out.push_str(&format!(
            "fire:    {} ({} executions, {} recorded)\n",
            fire.fanout_id,
            fire.total,
            fire.executions.len()
        ));
        for e in &fire.executions {
            let place = match (e.lineage.shard_index, &e.lineage.target_worker) {
                (Some(i), Some(w)) => format!("{i} on {w}"),
                (Some(i), None) => i.to_string(),
                _ => "-".to_owned(),
            };
            let mark = if e.execution_id == story.execution_id {
                " (this one)"
            } else {
                ""
            };
            out.push_str(&format!(
                "  shard {place:<14} {}  {}{mark}\n",
                e.execution_id, e.outcome
            ));
        }
    }
    out.push('\n');
    for (at, text) in events {
        let at = at.map_or_else(String::new, |t| t.to_string());
        out.push_str(&format!("{at:<26}{text}\n"));
    }
    if !story.complete {
        out.push_str(
            "(the search stopped at its bound: later attempts may exist; see ax history --task)\n",
        );
    }
    out
}

/// `ax task history`.
pub fn history_table(records: &[ExecutionRecord]) -> String {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.execution_id.clone(),
                r.attempt.to_string(),
                r.due.to_string(),
                instant(r.started),
                millis(r.lateness_ms),
                millis(r.duration_ms),
                r.outcome.clone(),
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
            "WORKER",
            "ERROR",
        ],
        &rows,
    )
}

/// `ax dlq list`.
pub fn dlq_table(letters: &[DeadLetter]) -> String {
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|d| {
            vec![
                d.execution_id.clone(),
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

/// `ax status`.
pub fn status_text(s: &StatusView) -> String {
    let leader = match (&s.leader, &s.shards) {
        (Some(leader), _) => leader.clone(),
        // Nobody holds the leader key by design: the shards below say who schedules.
        (None, Some(_)) => "none (sharded scheduling: see shards)".to_owned(),
        (None, None) => "none".to_owned(),
    };
    let mut out = format!("leader: {leader}\n\nreplicas: {}\n", s.replicas.len());
    if !s.replicas.is_empty() {
        let rows: Vec<Vec<String>> = s
            .replicas
            .iter()
            .map(|r| {
                let leads = s.leader.as_deref() == Some(r.id.as_str());
                vec![
                    r.id.clone(),
                    r.roles.join(","),
                    r.version.clone(),
                    if leads { "leader" } else { "" }.to_owned(),
                ]
            })
            .collect();
        out.push_str(&table(&["INSTANCE", "ROLES", "VERSION", ""], &rows));
    }
    out.push_str(&format!("\nqueues: {}\n", s.queues.len()));
    if !s.queues.is_empty() {
        let rows: Vec<Vec<String>> = s
            .queues
            .iter()
            .map(|q| {
                vec![
                    if q.partitions > 1 {
                        format!("{} ({} partitions)", q.name, q.partitions)
                    } else {
                        q.name.clone()
                    },
                    q.depth.to_string(),
                    millis(q.oldest_age_ms),
                    q.dlq_size.to_string(),
                    q.workers.len().to_string(),
                    if q.paused { "paused" } else { "active" }.to_owned(),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "QUEUE",
                "DEPTH",
                "OLDEST",
                "DEAD LETTERS",
                "WORKERS",
                "STATE",
            ],
            &rows,
        ));
    }
    if let Some(shards) = &s.shards {
        out.push_str(&shards_text(shards));
    }
    out.push_str(&format!("\ndead letters: {}\n", s.dlq_size));
    if !s.paused_namespaces.is_empty() {
        out.push_str(&format!(
            "\npaused namespaces: {}\n",
            s.paused_namespaces.len()
        ));
        let rows: Vec<Vec<String>> = s
            .paused_namespaces
            .iter()
            .map(|p| {
                vec![
                    p.namespace.clone(),
                    p.paused_at.to_string(),
                    p.paused_by.clone(),
                ]
            })
            .collect();
        out.push_str(&table(&["NAMESPACE", "PAUSED AT", "BY"], &rows));
    }
    if let Some(db) = s.etcd_db {
        let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
        let share = if db.quota_bytes > 0 {
            db.bytes as f64 * 100.0 / db.quota_bytes as f64
        } else {
            0.0
        };
        out.push_str(&format!(
            "etcd database: {:.1} MiB of {:.0} MiB quota ({share:.1} %)\n",
            mib(db.bytes),
            mib(db.quota_bytes)
        ));
        if share >= 80.0 {
            out.push_str("\nwarning: etcd's database is near its quota: check auto-compaction and defragment (docs/deploy.md)\n");
        }
    }
    for w in &s.redis_warnings {
        out.push_str(&format!("\nwarning: {w}\n"));
    }
    out
}

/// The shard map: shards per owner, and the shards nobody owns.
fn shards_text(shards: &crate::api::ShardsView) -> String {
    let mut per_owner: std::collections::BTreeMap<&str, Vec<u32>> = Default::default();
    for o in &shards.owners {
        per_owner.entry(o.owner.as_str()).or_default().push(o.shard);
    }
    let mut out = format!(
        "\nshards: {} ({} owned)\n",
        shards.total,
        shards.owners.len()
    );
    let rows: Vec<Vec<String>> = per_owner
        .iter()
        .map(|(owner, list)| {
            let names: Vec<String> = list.iter().map(u32::to_string).collect();
            vec![(*owner).to_owned(), list.len().to_string(), names.join(",")]
        })
        .collect();
    if !rows.is_empty() {
        out.push_str(&table(&["OWNER", "SHARDS", "WHICH"], &rows));
    }
    let owned: std::collections::BTreeSet<u32> = shards.owners.iter().map(|o| o.shard).collect();
    let unowned: Vec<String> = (0..shards.total)
        .filter(|s| !owned.contains(s))
        .map(|s| s.to_string())
        .collect();
    if !unowned.is_empty() {
        out.push_str(&format!(
            "warning: shards without an owner (their tasks do not fire): {}\n",
            unowned.join(",")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::{QueueView, ReplicaView};

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["A", "BB"],
            &[
                vec!["long cell".into(), "x".into()],
                vec!["y".into(), "z".into()],
            ],
        );
        assert_eq!(t, "A          BB\nlong cell  x\ny          z\n");
    }

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
    fn status_marks_the_leader() {
        let s = StatusView {
            leader_since: None,
            clock: None,
            leader: Some("ax-1".into()),
            replicas: vec![
                ReplicaView {
                    id: "ax-0".into(),
                    roles: vec!["worker".into()],
                    version: "0.1.0".into(),
                    started_at: None,
                    heartbeat_age_ms: None,
                },
                ReplicaView {
                    id: "ax-1".into(),
                    roles: vec!["scheduler".into(), "worker".into()],
                    version: "0.1.0".into(),
                    started_at: None,
                    heartbeat_age_ms: None,
                },
            ],
            queues: vec![QueueView {
                name: "default".into(),
                depth: 3,
                oldest_age_ms: Some(1500),
                dlq_size: 2,
                paused: true,
                workers: vec!["py-1".into()],
                partitions: 1,
            }],
            dlq_size: 2,
            redis_warnings: Vec::new(),
            etcd_db: None,
            paused_namespaces: vec![],
            shards: None,
        };
        let text = status_text(&s);
        assert!(text.starts_with("leader: ax-1\n"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("ax-1") && l.ends_with("leader")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("ax-0") && !l.contains("leader")),
            "{text}"
        );
        assert!(text.contains("default  3      1s 500ms"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("default") && l.ends_with("paused")),
            "{text}"
        );
        assert!(text.ends_with("dead letters: 2\n"), "{text}");
        let warned = StatusView {
            redis_warnings: vec!["Redis has neither AOF nor RDB persistence".into()],
            ..s
        };
        assert!(status_text(&warned)
            .ends_with("\nwarning: Redis has neither AOF nor RDB persistence\n"));
        let full = StatusView {
            etcd_db: Some(crate::api::EtcdDbView {
                bytes: 1800 * 1024 * 1024,
                quota_bytes: 2048 * 1024 * 1024,
            }),
            ..warned
        };
        let text = status_text(&full);
        assert!(
            text.contains("etcd database: 1800.0 MiB of 2048 MiB quota (87.9 %)"),
            "{text}"
        );
        assert!(
            text.contains("warning: etcd's database is near its quota"),
            "{text}"
        );
    }

    #[test]
    fn status_shows_the_shard_map_and_unowned_shards() {
        let owner = |shard, owner: &str| ax_election::ShardOwnerRecord {
            shard,
            owner: owner.into(),
            token: 7,
        };
        let text = shards_text(&crate::api::ShardsView {
            total: 4,
            owners: vec![owner(0, "ax-1"), owner(1, "ax-0"), owner(3, "ax-1")],
        });
        assert!(text.contains("shards: 4 (3 owned)"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("ax-1") && l.ends_with("2       0,3")),
            "{text}"
        );
        assert!(
            text.contains("shards without an owner (their tasks do not fire): 2"),
            "{text}"
        );
    }
}

/// The chain of dependent tasks (`depends_on`) around one task, for `ax task graph`.
#[derive(Debug, PartialEq, Eq)]
pub struct Chain {
    focus: String,
    /// `namespace/id`, status, problems; in running order (parents first).
    nodes: Vec<(String, String, Vec<String>)>,
    /// Parent, child, the outcome waited for, the window.
    edges: Vec<(String, String, String, String)>,
}

impl Chain {
    /// The tasks connected to `namespace/id` through `depends_on`, either way, from the listed
    /// `tasks`; `None` when `key` is not among them. A spec that does not parse has no edges.
    pub fn around(namespace: &str, id: &str, tasks: &[TaskView]) -> Option<Chain> {
        use std::collections::{BTreeMap, BTreeSet};
        let focus = format!("{namespace}/{id}");
        let mut status: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        let mut edges = Vec::new();
        for t in tasks {
            let name = format!("{}/{}", t.namespace, t.id);
            let shown = t.status.clone().unwrap_or_else(|| "-".to_owned());
            status.insert(name.clone(), (shown, t.errors.clone()));
            let bytes = serde_json::to_vec(&t.spec).unwrap_or_default();
            if let Ok(spec) = ax_scheduler_core::TaskSpec::from_json(&bytes, &t.namespace, &t.id) {
                for d in &spec.depends_on {
                    let on = serde_json::to_value(d.on)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    let within = humantime::format_duration(d.within).to_string();
                    edges.push((d.task.clone(), name.clone(), on, within));
                }
            }
        }
        if !status.contains_key(&focus) {
            return None;
        }
        // Everything reachable from the focus along edges, either way.
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut stack = vec![focus.clone()];
        while let Some(n) = stack.pop() {
            if !seen.insert(n.clone()) {
                continue;
            }
            for (from, to, _, _) in &edges {
                if *from == n {
                    stack.push(to.clone());
                }
                if *to == n {
                    stack.push(from.clone());
                }
            }
        }
        edges.retain(|(from, to, _, _)| seen.contains(from) && seen.contains(to));
        // Parents first (Kahn's order); what a cycle leaves over follows by name.
        let mut order: Vec<String> = Vec::new();
        let mut remaining: BTreeSet<String> = seen.clone();
        loop {
            let ready: Vec<String> = remaining
                .iter()
                .filter(|n| {
                    !edges
                        .iter()
                        .any(|(from, to, _, _)| to == *n && remaining.contains(from))
                })
                .cloned()
                .collect();
            if ready.is_empty() {
                order.extend(remaining.iter().cloned());
                break;
            }
            for n in ready {
                remaining.remove(&n);
                order.push(n);
            }
        }
        let nodes = order
            .into_iter()
            .map(|n| {
                let (s, errors) = status
                    .get(&n)
                    .cloned()
                    .unwrap_or_else(|| ("MISSING".to_owned(), Vec::new()));
                (n, s, errors)
            })
            .collect();
        Some(Chain {
            focus,
            nodes,
            edges,
        })
    }

    /// One line per task, parents first, with the edges it waits on and its problems.
    pub fn text(&self) -> String {
        let mut out = format!(
            "chain of {}: {} task(s), {} edge(s)\n\n",
            self.focus,
            self.nodes.len(),
            self.edges.len()
        );
        let width = self.nodes.iter().map(|(n, ..)| n.len()).max().unwrap_or(0);
        for (name, status, errors) in &self.nodes {
            let after: Vec<String> = self
                .edges
                .iter()
                .filter(|(_, to, _, _)| to == name)
                .map(|(from, _, on, within)| format!("{from} (on {on}, within {within})"))
                .collect();
            let what = if after.is_empty() {
                "first task".to_owned()
            } else {
                format!("after {}", after.join(", "))
            };
            out.push_str(&format!("{name:<width$}  {status:<9}  {what}\n"));
            for e in errors {
                out.push_str(&format!("{:<width$}  ! {e}\n", ""));
            }
        }
        out
    }

    /// Graphviz DOT: parents on the left, each edge labelled with the outcome it waits for.
    pub fn dot(&self) -> String {
        let mut out = format!("digraph \"{}\" {{\n  rankdir=LR;\n", self.focus);
        for (name, status, _) in &self.nodes {
            let style = if name == &self.focus {
                ", style=bold"
            } else {
                ""
            };
            out.push_str(&format!(
                "  \"{name}\" [label=\"{name}\\n{status}\"{style}];\n"
            ));
        }
        for (from, to, on, within) in &self.edges {
            out.push_str(&format!(
                "  \"{from}\" -> \"{to}\" [label=\"{on} / {within}\"];\n"
            ));
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod chain_tests {
    use super::*;
    use crate::api::FireView;
    use serde_json::json;

    fn view(ns: &str, id: &str, spec: serde_json::Value, status: &str) -> TaskView {
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
            schedule_text: None,
            upcoming_fires: Vec::new(),
        }
    }

    #[test]
    fn a_chain_prints_parents_first_in_text_and_dot() {
        let tasks = vec![
            view(
                "ns",
                "c",
                json!({"handler":"log","depends_on":[{"task":"a"},{"task":"b","on":"any","within":"30s"}]}),
                "WAITING",
            ),
            view(
                "ns",
                "a",
                json!({"handler":"log","depends_on":[{"task":"r"}]}),
                "WAITING",
            ),
            view(
                "ns",
                "b",
                json!({"handler":"log","depends_on":[{"task":"r"}]}),
                "WAITING",
            ),
            view(
                "ns",
                "r",
                json!({"handler":"log","schedule":{"every":"1m"}}),
                "SCHEDULED",
            ),
            view(
                "ns",
                "lone",
                json!({"handler":"log","schedule":{"every":"1m"}}),
                "SCHEDULED",
            ),
        ];
        let chain = Chain::around("ns", "a", &tasks).unwrap();
        let text = chain.text();
        assert_eq!(
            text,
            "chain of ns/a: 4 task(s), 4 edge(s)\n\n\
             ns/r  SCHEDULED  first task\n\
             ns/a  WAITING    after ns/r (on success, within 1day)\n\
             ns/b  WAITING    after ns/r (on success, within 1day)\n\
             ns/c  WAITING    after ns/a (on success, within 1day), ns/b (on any, within 30s)\n"
        );
        let dot = chain.dot();
        assert!(dot.starts_with("digraph \"ns/a\" {"), "{dot}");
        assert!(
            dot.contains("\"ns/b\" -> \"ns/c\" [label=\"any / 30s\"];"),
            "{dot}"
        );
        assert!(
            dot.contains("\"ns/a\" [label=\"ns/a\\nWAITING\", style=bold];"),
            "{dot}"
        );
        assert!(Chain::around("ns", "nope", &tasks).is_none());
    }

    fn attempt(id: &str, index: u32, worker: &str, outcome: &str) -> ExecutionRecord {
        serde_json::from_value(json!({
            "execution_id": id, "attempt": 1, "due": 1000, "outcome": outcome,
            "fanout_id": "f-1", "shard_index": index, "shard_total": 2,
            "target_worker": worker,
        }))
        .unwrap()
    }

    #[test]
    fn a_broadcast_execution_s_story_shows_its_worker_and_its_fire() {
        let story = ExecutionStory {
            execution_id: "e-1".into(),
            namespace: "ns".into(),
            task_id: "t".into(),
            queue: "default".into(),
            attempts: vec![attempt("e-1", 1, "w2", "failed")],
            outcome: "failed".into(),
            complete: true,
            fire: Some(FireView {
                fanout_id: "f-1".into(),
                total: 2,
                executions: vec![
                    attempt("e-0", 0, "w1", "succeeded"),
                    attempt("e-1", 1, "w2", "failed"),
                ],
            }),
            ..ExecutionStory::default()
        };
        let text = story_text(&story);
        assert!(
            text.contains("shard:   1 of 0..2 (fan-out f-1)\n"),
            "{text}"
        );
        assert!(
            text.contains("worker:  w2 (broadcast: runs there only)\n"),
            "{text}"
        );
        assert!(
            text.contains("fire:    f-1 (2 executions, 2 recorded)\n"),
            "{text}"
        );
        assert!(
            text.contains("  shard 0 on w1        e-0  succeeded\n"),
            "{text}"
        );
        assert!(
            text.contains("  shard 1 on w2        e-1  failed (this one)\n"),
            "{text}"
        );
    }
}
