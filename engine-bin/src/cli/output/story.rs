//! One execution's story (`ax execution get`): a header naming the execution, its lineage and
//! its fire, then its events in order, one a line.
//!
//! Events are gathered as (instant, text) pairs first and laid out once, so every event gets
//! the same time column whatever part of the story it comes from; lines with no instant of
//! their own (an attempt's answer, a deadline) leave that column blank.

use ax_scheduler_core::{ExecutionId, UtcMillis};

use super::format::{millis, one_line};
use ax_control::api::{
    ExecutionRecord, ExecutionStory, FireView, Outcome, PendingAttempt, WaitingAttempt,
};

/// One line of the story: when, if known, and what happened.
type Event = (Option<UtcMillis>, String);

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
    let mut out = story_header(story);
    out.push('\n');
    for (at, text) in story_events(story) {
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

/// The story's events in order, from the fire to the dead letter.
fn story_events(story: &ExecutionStory) -> Vec<Event> {
    let mut events: Vec<Event> = Vec::new();
    events.push((story.due, started_text(story.origin.as_ref())));
    if story.enqueued.is_some() {
        events.push((story.enqueued, "enqueued".to_owned()));
    }
    for (i, a) in story.attempts.iter().enumerate() {
        attempt_events(&mut events, i > 0, a);
    }
    if let Some(w) = &story.waiting {
        waiting_events(&mut events, w);
    }
    if let Some(p) = &story.pending {
        events.push((Some(p.enqueued), pending_text(p)));
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
    if let Some(new) = story.requeued_as {
        events.push((None, format!("requeued as execution {new}")));
    }
    events
}

/// The story's first line: how the execution started.
fn started_text(origin: Option<&ax_queue::Origin>) -> String {
    use ax_queue::OriginKind;
    let Some(o) = origin else {
        return "fired (due)".to_owned();
    };
    let by = o
        .actor
        .as_deref()
        .map_or_else(String::new, |a| format!(" by {a}"));
    let payload = match (&o.payload, o.payload_bytes) {
        (Some(p), _) => format!(", payload {}", one_line(&p.to_string(), 200)),
        (None, Some(bytes)) => format!(", its own payload of {bytes} bytes"),
        (None, None) => String::new(),
    };
    match o.kind {
        OriginKind::Schedule => "fired (due)".to_owned(),
        OriginKind::Parent => "started by its upstream task's success".to_owned(),
        OriginKind::Manual => format!("run now, asked{by}{payload}"),
        OriginKind::Backfill => format!("backfill, asked{by}"),
        OriginKind::Requeue => match o.requeue_of {
            Some(of) => format!("requeue of dead letter {of}{by}"),
            None => format!("requeue of a dead letter{by}"),
        },
        OriginKind::Submitted => format!("scheduled ahead, submitted{by} (due)"),
    }
}

/// One finished attempt: its retry enqueue (when `retried`), start, end and answer.
fn attempt_events(events: &mut Vec<Event>, retried: bool, a: &ExecutionRecord) {
    let n = a.attempt;
    if retried {
        events.push((a.enqueued, format!("attempt {n} enqueued (retry)")));
    }
    // An attempt killed before any worker took it has no start to tell.
    if a.started.is_some() {
        events.push((
            a.started,
            format!(
                "attempt {n} started on {} ({} late)",
                a.worker.as_deref().unwrap_or("-"),
                millis(a.lateness_ms)
            ),
        ));
    }
    let mut end = format!("attempt {n} {}", a.outcome);
    if let Some(e) = &a.error {
        end.push_str(&format!(": {}", one_line(e, 200)));
    }
    if let Some(due) = a.retry_at {
        end.push_str(&format!(" (retry due {due})"));
    }
    events.push((a.finished, end));
    if let Some(o) = &a.output {
        answer_events(events, o);
    }
}

/// An attempt's answer: a command's exit code, stdout and stderr, or an HTTP status and body.
fn answer_events(events: &mut Vec<Event>, o: &ax_scheduler_core::AttemptOutput) {
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

/// The attempt in its queue now: waiting to be taken, for its retry time, or running.
fn pending_text(p: &PendingAttempt) -> String {
    let n = p.attempt;
    match (p.state, &p.worker) {
        (Outcome::Running, Some(w)) => format!("attempt {n} enqueued; running on {w} now"),
        (Outcome::Running, None) => {
            format!("attempt {n} enqueued; held for a worker that stopped (it comes back)")
        }
        (Outcome::Retrying, _) => format!("attempt {n} enqueued; waits for its retry time"),
        _ => format!("attempt {n} enqueued; waits to be taken"),
    }
}

/// The attempt accepted and waiting for its completion, with the job's last progress report.
fn waiting_events(events: &mut Vec<Event>, w: &WaitingAttempt) {
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

/// The lines above the events: the execution, its task and queue, its lineage and its fire.
fn story_header(story: &ExecutionStory) -> String {
    let mut out = format!(
        "execution {}\ntask:    {}/{}\nqueue:   {}\noutcome: {}\n",
        story.execution_id, story.namespace, story.task_id, story.queue, story.outcome
    );
    if let Some(lineage) = story.attempts.first().map(|a| &a.lineage) {
        if let Some(run) = &lineage.run_id {
            out.push_str(&format!("run:     {run}\n"));
        }
        if let (Some(i), Some(n), Some(f)) =
            (lineage.piece_index, lineage.piece_total, &lineage.fanout_id)
        {
            out.push_str(&format!("shard:   {i} of 0..{n} (fan-out {f})\n"));
        }
        if let Some(w) = &lineage.target_worker {
            out.push_str(&format!("worker:  {w} (broadcast: runs there only)\n"));
        }
    }
    if let Some(fire) = &story.fire {
        out.push_str(&fire_text(fire, story.execution_id));
    }
    out
}

/// The fire the execution belongs to: every execution of it, this one marked.
fn fire_text(fire: &FireView, this: ExecutionId) -> String {
    let mut out = format!(
        "fire:    {} ({} executions, {} recorded)\n",
        fire.fanout_id,
        fire.total,
        fire.executions.len()
    );
    for e in &fire.executions {
        let place = match (e.lineage.piece_index, &e.lineage.target_worker) {
            (Some(i), Some(w)) => format!("{i} on {w}"),
            (Some(i), None) => i.to_string(),
            _ => "-".to_owned(),
        };
        let mark = if e.execution_id == this {
            " (this one)"
        } else {
            ""
        };
        out.push_str(&format!(
            "  shard {place:<14} {}  {}{mark}\n",
            e.execution_id, e.outcome
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const F: &str = "0190f5a2-7b1c-7cc3-9a4e-1f2e3d4c0000";
    const E0: &str = "0190f5a2-7b1c-7cc3-9a4e-1f2e3d4c0000";
    const E1: &str = "0190f5a2-7b1c-7cc3-9a4e-1f2e3d4c0001";

    fn attempt(id: &str, index: u32, worker: &str, outcome: &str) -> ExecutionRecord {
        serde_json::from_value(json!({
            "execution_id": id, "attempt": 1, "due": 1000, "outcome": outcome,
            "fanout_id": F, "shard_index": index, "shard_total": 2,
            "target_worker": worker,
        }))
        .unwrap()
    }

    #[test]
    fn a_broadcast_execution_s_story_shows_its_worker_and_its_fire() {
        let story = ExecutionStory {
            execution_id: E1.parse().unwrap(),
            namespace: "ns".into(),
            task_id: "t".into(),
            queue: "default".into(),
            attempts: vec![attempt(E1, 1, "w2", "failed")],
            outcome: "failed".into(),
            complete: true,
            fire: Some(FireView {
                fanout_id: F.parse().unwrap(),
                total: 2,
                executions: vec![
                    attempt(E0, 0, "w1", "succeeded"),
                    attempt(E1, 1, "w2", "failed"),
                ],
            }),
            ..ExecutionStory::default()
        };
        let text = story_text(&story);
        assert!(
            text.contains(&format!("shard:   1 of 0..2 (fan-out {F})\n")),
            "{text}"
        );
        assert!(
            text.contains("worker:  w2 (broadcast: runs there only)\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("fire:    {F} (2 executions, 2 recorded)\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("  shard 0 on w1        {E0}  succeeded\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("  shard 1 on w2        {E1}  failed (this one)\n")),
            "{text}"
        );
    }
}
