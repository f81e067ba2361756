use super::*;
use crate::execution::{AttemptOutcome, EnqueueOutcome, EventPosition, ExecutionEvent};
use crate::execution_id::ExecutionId;
use crate::status::TaskStatus;
use crate::task::{MisfirePolicy, OverlapPolicy, TaskSpec};
use crate::validate::FieldError;
use std::collections::HashMap;
use std::sync::Arc;

const T0: i64 = 1_800_000_000_000;

fn at(ms: i64) -> UtcMillis {
    UtcMillis(T0 + ms)
}

fn spec(id: &str, json: &str) -> TaskSpec {
    TaskSpec::from_json(json.as_bytes(), "default", id).expect("valid test spec")
}

fn finished(
    outcome: AttemptOutcome,
    error: Option<String>,
    retry_at: Option<UtcMillis>,
) -> ExecutionEvent {
    ExecutionEvent::Finished {
        at: UtcMillis(0),
        end: crate::execution::AttemptEnd {
            outcome,
            error,
            retry_at,
        },
    }
}

/// The spec of an `at` one-shot due at `at(ms)`.
fn one_shot_at(ms: i64) -> String {
    let when = at(ms).to_rfc3339();
    format!(r#"{{"handler":"log","schedule":{{"at":"{when}"}}}}"#)
}

/// A dispatcher started at `at(0)` whose enqueue is limited to `per_sec` fires a second,
/// bursts of one.
fn rate_limited(per_sec: f64) -> Dispatcher {
    let config = DispatcherConfig {
        rate_limit: Some((per_sec, 1.0)),
        ..DispatcherConfig::default()
    };
    Dispatcher::new(config, at(0))
}

/// A dispatcher started at `at(0)` with one task `id` (spec revision 5, nothing recorded).
fn one_task(id: &str, json: &str) -> Dispatcher {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    d.upsert(key(id), spec(id, json), 5, None, at(0));
    d
}

fn key(id: &str) -> TaskKey {
    TaskKey::new("default", id)
}

/// Polls every 10 ms from `from` to `to` (inclusive) and returns (poll time, dispatch).
fn run(d: &mut Dispatcher, from: i64, to: i64) -> Vec<(i64, Dispatch)> {
    let mut out = Vec::new();
    let mut t = from;
    while t <= to {
        for x in d.poll(at(t)) {
            out.push((t, x));
        }
        t += 10;
    }
    out
}

#[test]
fn every_task_fires_on_cadence_never_early_and_re_arms() {
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    assert_eq!(d.state(&key("a")).unwrap().next_fire_at, Some(at(1000)));
    let fired = run(&mut d, 0, 5000);
    let dues: Vec<_> = fired.iter().map(|(_, x)| x.fire_at.0 - T0).collect();
    assert_eq!(dues, vec![1000, 2000, 3000, 4000, 5000]);
    for (polled, x) in &fired {
        assert!(*polled >= x.fire_at.0 - T0, "never early");
        assert!(*polled - (x.fire_at.0 - T0) <= 10, "at most one tick late");
    }
    let state = d.state(&key("a")).unwrap();
    assert_eq!(state.fire_count, 5);
    assert_eq!(state.last_fire_at, Some(at(5000)));
    assert_eq!(state.next_fire_at, Some(at(6000)));
    assert_eq!(state.anchor_at, Some(at(0)));
}

#[test]
fn state_writes_are_coalesced_per_task() {
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    d.upsert(
        key("b"),
        spec("b", r#"{"handler":"log","schedule":{"every":"1s"}}"#),
        6,
        None,
        at(0),
    );
    run(&mut d, 0, 10_000);
    let writes = d.take_state_writes(UtcMillis::MAX);
    assert_eq!(writes.len(), 2, "two tasks, ten fires each, two writes");
    assert!(writes
        .iter()
        .all(|(_, s)| s.as_ref().unwrap().fire_count == 10));
    assert!(d.take_state_writes(UtcMillis::MAX).is_empty());
}

#[test]
fn no_state_writes_are_recorded_when_states_are_not_kept() {
    let config = DispatcherConfig {
        write_states: false,
        ..DispatcherConfig::default()
    };
    let mut d = Dispatcher::new(config, at(0));
    let every = r#"{"handler":"log","schedule":{"every":"1s"}}"#;
    d.upsert(key("a"), spec("a", every), 5, None, at(0));
    let fired = run(&mut d, 0, 3000);
    assert_eq!(fired.len(), 3, "the fires are the same");
    assert_eq!(d.state(&key("a")).unwrap().fire_count, 3);
    d.remove(&key("a"), at(3000));
    assert!(d.take_state_writes(UtcMillis::MAX).is_empty());
}

#[test]
fn failover_fire_once_runs_the_latest_missed_fire_once() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(60_000));
    let mut recorded = TaskState::new(5, at(0), at(0));
    recorded.last_fire_at = Some(at(10_000));
    d.upsert(
        key("a"),
        spec("a", r#"{"handler":"log","schedule":{"every":"10s"}}"#),
        5,
        Some(recorded),
        at(65_000),
    );
    let fired = d.poll(at(65_000));
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].fire_at, at(60_000));
    assert!(d.take_notices().iter().any(|n| matches!(
        n,
        Notice::Misfired {
            missed: 5,
            skipped: 4,
            ..
        }
    )));
    assert_eq!(d.state(&key("a")).unwrap().next_fire_at, Some(at(70_000)));
}

#[test]
fn failover_skip_and_fire_all() {
    let mut recorded = TaskState::new(5, at(0), at(0));
    recorded.last_fire_at = Some(at(10_000));

    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    d.upsert(
        key("s"),
        spec(
            "s",
            r#"{"handler":"log","schedule":{"every":"10s"},"misfire":"skip"}"#,
        ),
        5,
        Some(recorded.clone()),
        at(65_000),
    );
    assert!(d.poll(at(65_000)).is_empty());
    assert!(matches!(
        d.take_notices()[..],
        [Notice::Misfired { skipped: 5, .. }]
    ));

    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    d.upsert(
        key("f"),
        spec(
            "f",
            r#"{"handler":"log","schedule":{"every":"10s"},"misfire":"fire_all"}"#,
        ),
        5,
        Some(recorded),
        at(65_000),
    );
    let dues: Vec<_> = d
        .poll(at(65_000))
        .iter()
        .map(|x| x.fire_at.0 - T0)
        .collect();
    assert_eq!(dues, vec![20_000, 30_000, 40_000, 50_000, 60_000]);
}

#[test]
fn fires_older_than_the_catch_up_window_raise_a_notice() {
    let mut recorded = TaskState::new(5, at(0), at(0));
    recorded.last_fire_at = Some(at(0));
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let now = 3_600_000;
    d.upsert(
        key("a"),
        spec("a", r#"{"handler":"log","schedule":{"every":"1m"}}"#),
        5,
        Some(recorded),
        at(now),
    );
    assert_eq!(d.poll(at(now)).len(), 1);
    let notices = d.take_notices();
    assert!(matches!(notices[..], [Notice::Misfired { beyond_window, .. }] if beyond_window > 0));
}

#[test]
fn delay_counts_from_created_at_or_the_recorded_anchor() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let created = UtcMillis(T0 + 1000).to_rfc3339();
    let json =
        format!(r#"{{"handler":"log","schedule":{{"delay":"5s"}},"created_at":"{created}"}}"#);
    d.upsert(key("a"), spec("a", &json), 5, None, at(3000));
    assert_eq!(d.state(&key("a")).unwrap().next_fire_at, Some(at(6000)));

    // Without created_at, a new leader continues the countdown the first one recorded.
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let recorded = TaskState::new(5, at(2000), at(2000));
    d.upsert(
        key("b"),
        spec("b", r#"{"handler":"log","schedule":{"delay":"5s"}}"#),
        5,
        Some(recorded),
        at(4000),
    );
    assert_eq!(d.state(&key("b")).unwrap().next_fire_at, Some(at(7000)));
    let fired = run(&mut d, 4000, 20_000);
    assert_eq!(fired.len(), 1, "a one-shot fires once");
    assert_eq!(d.armed_len(), 0);
}

#[test]
fn a_fired_one_shot_does_not_fire_again_on_takeover() {
    let mut recorded = TaskState::new(5, at(0), at(0));
    recorded.last_fire_at = Some(at(1000));
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let json = format!(
        r#"{{"handler":"log","schedule":{{"at":"{}"}}}}"#,
        at(1000).to_rfc3339()
    );
    d.upsert(key("a"), spec("a", &json), 5, Some(recorded), at(50_000));
    assert!(d.poll(at(50_000)).is_empty());
    assert_eq!(d.armed_len(), 0);
}

#[test]
fn pause_resume_delete_and_same_revision() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let every = r#"{"handler":"log","schedule":{"every":"1s"}}"#;
    let paused = r#"{"handler":"log","schedule":{"every":"1s"},"paused":true}"#;
    d.upsert(key("a"), spec("a", every), 5, None, at(0));
    assert_eq!(run(&mut d, 0, 2000).len(), 2);
    d.upsert(key("a"), spec("a", paused), 6, None, at(2500));
    assert_eq!(d.state(&key("a")).unwrap().status, TaskStatus::Paused);
    assert!(run(&mut d, 2500, 6000).is_empty());
    d.upsert(key("a"), spec("a", every), 7, None, at(6500));
    let fired = run(&mut d, 6500, 8000);
    let dues: Vec<_> = fired.iter().map(|(_, x)| x.fire_at.0 - T0).collect();
    assert_eq!(
        dues,
        vec![7000, 8000],
        "resume continues on the anchor's cadence, no replay"
    );
    // The same revision delivered again changes nothing.
    d.upsert(key("a"), spec("a", every), 7, None, at(8000));
    assert_eq!(d.armed_len(), 1);
    d.remove(&key("a"), at(0));
    assert!(run(&mut d, 8000, 12_000).is_empty());
    let writes = d.take_state_writes(UtcMillis::MAX);
    assert!(writes.iter().any(|(k, s)| **k == key("a") && s.is_none()));
}

#[test]
fn paused_one_shot_fires_when_resumed_after_its_time() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let when = at(1000).to_rfc3339();
    let p = format!(r#"{{"handler":"log","schedule":{{"at":"{when}"}},"paused":true}}"#);
    let r = format!(r#"{{"handler":"log","schedule":{{"at":"{when}"}}}}"#);
    d.upsert(key("a"), spec("a", &p), 5, None, at(0));
    assert!(run(&mut d, 0, 3000).is_empty());
    d.upsert(key("a"), spec("a", &r), 6, None, at(3000));
    let fired = run(&mut d, 3000, 5000);
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].1.fire_at, at(1000));
}

#[test]
fn run_now_has_its_own_id_and_keeps_the_schedule() {
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"10s"}}"#);
    assert!(d.trigger(&key("a"), ExecutionId::from_u128(1), at(3000)));
    assert!(!d.trigger(&key("nope"), ExecutionId::from_u128(2), at(3000)));
    let fired = d.poll(at(3000));
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].run_now, Some(ExecutionId::from_u128(1)));
    assert_eq!(d.state(&key("a")).unwrap().next_fire_at, Some(at(10_000)));
    assert_eq!(
        d.state(&key("a")).unwrap().fire_count,
        0,
        "run-now is not a scheduled fire"
    );
}

#[test]
fn forbid_holds_one_fire_until_the_previous_execution_ends() {
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    let first = d.poll(at(1000)).pop().unwrap();
    d.on_enqueued(&first, EnqueueOutcome::Enqueued, at(1000));
    // The next two fires find the execution still active.
    for t in [2000, 3000] {
        let x = d.poll(at(t)).pop().unwrap();
        d.on_enqueued(&x, EnqueueOutcome::Held, at(t));
    }
    assert!(d.poll(at(3500)).is_empty());
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(0),
        0,
        &finished(AttemptOutcome::Succeeded, None, None),
        at(3600),
    );
    let again = d.poll(at(3600));
    assert_eq!(
        again.len(),
        1,
        "one held fire runs, the other coalesced into it"
    );
    assert_eq!(again[0].fire_at, at(3000));
    d.on_enqueued(&again[0], EnqueueOutcome::Enqueued, at(3600));
    // The retry timer finds nothing held any more.
    assert!(run(&mut d, 3610, 3990).is_empty());
    assert_eq!(run(&mut d, 4000, 4000).len(), 1);
}

#[test]
fn a_held_fire_asks_again_when_its_completion_event_is_lost() {
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1h"}}"#);
    let x = d.poll(at(3_600_000)).pop().unwrap();
    d.on_enqueued(&x, EnqueueOutcome::Held, at(3_600_000));
    let retried = run(&mut d, 3_600_010, 3_605_000);
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].0, 3_605_000);
    assert_eq!(retried[0].1.fire_at, at(3_600_000));
}

/// Fires task `a` (every 1 s) four times, each execution failing: its breaker opens.
fn fail_four_times(d: &mut Dispatcher) {
    for t in 1..=4 {
        assert_eq!(d.poll(at(t * 1000)).len(), 1);
        d.on_execution(
            &key("a"),
            ExecutionId::from_u128(u128::try_from(t).unwrap()),
            0,
            &finished(AttemptOutcome::Failed, Some("boom".into()), None),
            at(t * 1000 + 100),
        );
    }
}

/// A one-shot has no breaker: its failing attempts open none (no alert, no THROTTLED), and
/// its spec changed to fire again is not skipped for the failures of its earlier fire.
#[test]
fn a_one_shot_has_no_breaker_to_open_or_to_skip_its_next_fire() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    d.upsert(key("a"), spec("a", &one_shot_at(1000)), 5, None, at(0));
    let fired = d.poll(at(1000));
    assert_eq!(fired.len(), 1);
    let execution = ExecutionId::for_fire(&key("a"), at(1000));
    for attempt in 0..5 {
        let retry = (attempt < 4).then(|| at(1100 + i64::from(attempt) * 100));
        let failed = finished(AttemptOutcome::Failed, Some("boom".into()), retry);
        d.on_execution(
            &key("a"),
            execution,
            attempt,
            &failed,
            at(1050 + i64::from(attempt) * 100),
        );
    }
    assert!(
        !d.take_notices()
            .iter()
            .any(|n| matches!(n, Notice::CircuitOpened { .. })),
        "five failed attempts of a one-shot open no breaker"
    );
    assert!(d.state(&key("a")).unwrap().throttled.is_none());
    assert_eq!(d.throttled_len(), 0);
    d.upsert(key("a"), spec("a", &one_shot_at(10_000)), 6, None, at(2000));
    assert_eq!(d.poll(at(10_000)).len(), 1, "its new fire goes");
}

/// A periodic task whose breaker is open, changed into a one-shot, drops the breaker: the
/// one-shot's fire goes, and the task is no longer shown throttled.
#[test]
fn a_task_made_a_one_shot_drops_its_open_breaker() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let every = r#"{"handler":"log","schedule":{"every":"1s"},"overlap":"allow"}"#;
    d.upsert(key("a"), spec("a", every), 5, None, at(0));
    fail_four_times(&mut d);
    assert!(d.state(&key("a")).unwrap().throttled.is_some());
    d.take_notices();
    d.upsert(key("a"), spec("a", &one_shot_at(20_000)), 6, None, at(5000));
    assert!(d
        .take_notices()
        .iter()
        .any(|n| matches!(n, Notice::CircuitClosed { .. })));
    assert!(d.state(&key("a")).unwrap().throttled.is_none());
    assert_eq!(d.throttled_len(), 0);
    assert_eq!(d.poll(at(20_000)).len(), 1, "not skipped");
}

#[test]
fn breaker_opens_slows_dispatch_and_notices() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    d.upsert(
        key("a"),
        spec(
            "a",
            r#"{"handler":"log","schedule":{"every":"1s"},"overlap":"allow"}"#,
        ),
        5,
        None,
        at(0),
    );
    fail_four_times(&mut d);
    assert!(d
        .take_notices()
        .iter()
        .any(|n| matches!(n, Notice::CircuitOpened { .. })));
    let fired = run(&mut d, 5000, 104_000);
    assert_eq!(fired.len(), 10, "100 fires at a tenth");
    let state = d.state(&key("a")).unwrap();
    assert_eq!(state.failure_count, 4);
    assert_eq!(state.last_error.as_deref(), Some("boom"));
}

#[test]
fn an_open_breaker_is_marked_in_the_state_and_skipped_fires_rewrite_the_next_fire() {
    let mut d = one_task(
        "a",
        r#"{"handler":"log","schedule":{"every":"1s"},"overlap":"allow"}"#,
    );
    fail_four_times(&mut d);
    assert_eq!(d.throttled_len(), 1);
    let throttle = d.state(&key("a")).unwrap().throttled.clone().unwrap();
    assert_eq!((throttle.failures, throttle.executions), (4, 4));
    assert_eq!(throttle.dispatch_every, 10);
    d.take_state_writes(UtcMillis::MAX);

    // A skipped fire writes the state again, its next fire the one ahead of now.
    assert!(d.poll(at(5000)).is_empty(), "skipped by the open breaker");
    let writes = d.take_state_writes(at(5000));
    let written = writes
        .iter()
        .find(|(k, _)| **k == key("a"))
        .and_then(|(_, s)| s.clone())
        .expect("the skipped fire's state is written");
    assert!(written.throttled.is_some());
    assert!(written.next_fire_at.unwrap() > at(5000));

    // Successes close it: the mark goes and the count drops to zero.
    for t in 6..=40 {
        for _ in d.poll(at(t * 1000)) {
            d.on_execution(
                &key("a"),
                ExecutionId::from_u128(u128::try_from(1000 + t).unwrap()),
                0,
                &finished(AttemptOutcome::Succeeded, None, None),
                at(t * 1000 + 100),
            );
        }
    }
    let after = run(&mut d, 301_000, 302_000);
    assert!(
        !after.is_empty(),
        "closed once the failures left the window"
    );
    assert!(d.state(&key("a")).unwrap().throttled.is_none());
    assert_eq!(d.throttled_len(), 0);
}

#[test]
fn rate_limit_spreads_a_burst_in_priority_order() {
    let mut d = rate_limited(100.0);
    let when = at(1000).to_rfc3339();
    for i in 0..50 {
        let p = if i % 2 == 0 { 9 } else { 0 };
        let json = format!(r#"{{"handler":"log","schedule":{{"at":"{when}"}},"priority":{p}}}"#);
        d.upsert(
            key(&format!("t{i}")),
            spec(&format!("t{i}"), &json),
            5,
            None,
            at(0),
        );
    }
    let fired = run(&mut d, 1000, 2000);
    assert_eq!(fired.len(), 50);
    assert!(
        fired.last().unwrap().0 >= 1480,
        "100 a second: 50 take about half a second"
    );
    let first_low = fired
        .iter()
        .position(|(_, x)| x.spec.priority == 0)
        .unwrap();
    assert!(
        first_low >= 20,
        "high priority first while aging has not caught up"
    );
    let wake = d.next_wakeup(at(2000));
    assert_eq!(wake, None);
}

/// A one-shot whose fire came due is owed until dispatched, though its state already shows
/// no next fire: while it waits behind the rate limit, and once its namespace's pause parked
/// it on leaving the ready queue.
#[test]
fn a_fire_due_and_not_dispatched_is_pending() {
    let mut d = rate_limited(10.0);
    for id in ["a", "b", "c"] {
        d.upsert(key(id), spec(id, &one_shot_at(1000)), 5, None, at(0));
    }
    assert!(!d.fire_pending(&key("a")), "armed, not due");
    let first = d.poll(at(1000));
    assert_eq!(first.len(), 1, "one token");
    let sent = first[0].key.clone();
    assert!(!d.fire_pending(&sent), "dispatched");
    let waiting: Vec<TaskKey> = ["a", "b", "c"]
        .iter()
        .map(|id| key(id))
        .filter(|k| *k != *sent)
        .collect();
    for k in &waiting {
        assert!(d.state(k).unwrap().next_fire_at.is_none());
        assert!(d.fire_pending(k), "{k} waits behind the rate limit");
    }
    d.pause_namespace("default");
    assert!(d.poll(at(1100)).is_empty(), "parked on leaving the queue");
    assert!(d.poll(at(1200)).is_empty());
    for k in &waiting {
        assert!(d.fire_pending(k), "{k} parked");
    }
    d.resume_namespace("default", at(1300));
    let rest = run(&mut d, 1300, 2000);
    assert_eq!(rest.len(), 2);
    for k in &waiting {
        assert!(!d.fire_pending(k), "{k} dispatched");
    }
    d.remove(&sent, at(2000));
    assert!(!d.fire_pending(&sent), "gone");
}

#[test]
fn a_burst_polled_in_batches_is_the_burst_polled_at_once() {
    let when = at(1000).to_rfc3339();
    let burst = |d: &mut Dispatcher| {
        for i in 0..25 {
            let p = i % 3;
            let json =
                format!(r#"{{"handler":"log","schedule":{{"at":"{when}"}},"priority":{p}}}"#);
            d.upsert(
                key(&format!("t{i}")),
                spec(&format!("t{i}"), &json),
                5,
                None,
                at(0),
            );
        }
    };
    let mut whole = Dispatcher::new(DispatcherConfig::default(), at(0));
    burst(&mut whole);
    let at_once: Vec<String> = whole
        .poll(at(1000))
        .iter()
        .map(|x| x.key.to_string())
        .collect();
    assert_eq!(at_once.len(), 25);

    let mut batched = Dispatcher::new(DispatcherConfig::default(), at(0));
    burst(&mut batched);
    let mut in_batches = Vec::new();
    let mut out = Vec::new();
    loop {
        batched.poll_into(at(1000), 4, &mut out);
        if out.is_empty() {
            break;
        }
        assert!(out.len() <= 4, "a batch stops at its size");
        in_batches.extend(out.drain(..).map(|x| x.key.to_string()));
    }
    assert_eq!(in_batches, at_once, "the same fires, in the same order");
}

#[test]
fn invalid_spec_stops_the_task_and_records_errors() {
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    d.take_state_writes(UtcMillis::MAX);
    d.mark_invalid(
        key("a"),
        6,
        vec![FieldError::new(
            "schedule.cron",
            "minute 61 is out of range 0-59",
        )],
        at(500),
    );
    assert!(run(&mut d, 500, 5000).is_empty());
    let writes = d.take_state_writes(UtcMillis::MAX);
    let state = writes[0].1.as_ref().unwrap();
    assert_eq!(state.status, TaskStatus::Invalid);
    assert_eq!(state.validation_errors[0].path, "schedule.cron");
    // A fixed spec brings it back.
    d.upsert(
        key("a"),
        spec("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#),
        7,
        Some(state.clone()),
        at(5000),
    );
    assert_eq!(run(&mut d, 5000, 6000).len(), 1);
}

#[test]
fn retry_and_final_outcome_states() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let json = format!(
        r#"{{"handler":"log","schedule":{{"at":"{}"}}}}"#,
        at(1000).to_rfc3339()
    );
    d.upsert(key("a"), spec("a", &json), 5, None, at(0));
    assert_eq!(d.poll(at(1000)).len(), 1);
    assert_eq!(d.state(&key("a")).unwrap().status, TaskStatus::Running);
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(0),
        0,
        &finished(AttemptOutcome::Failed, Some("503".into()), Some(at(9_000))),
        at(1100),
    );
    assert_eq!(d.state(&key("a")).unwrap().status, TaskStatus::Retrying);
    // The retry's end arrives before its start.
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(0),
        1,
        &finished(AttemptOutcome::Succeeded, None, None),
        at(2100),
    );
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(0),
        1,
        &ExecutionEvent::Started { at: at(2000) },
        at(2200),
    );
    let state = d.state(&key("a")).unwrap();
    assert_eq!(state.status, TaskStatus::Success);
    assert_eq!(state.success_count, 1);
}

#[test]
fn misfire_policy_skip_drops_a_missed_one_shot() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let json = format!(
        r#"{{"handler":"log","schedule":{{"at":"{}"}},"misfire":"skip"}}"#,
        at(1000).to_rfc3339()
    );
    let s = spec("a", &json);
    assert_eq!(s.misfire, MisfirePolicy::Skip);
    d.upsert(key("a"), s, 5, None, at(5000));
    assert!(d.poll(at(5000)).is_empty());
}

#[test]
fn a_long_forbid_execution_holds_one_fire_for_an_hour_without_multiplying() {
    // An `every: 1s` task whose first execution runs for an hour: every later fire finds it
    // active. Fires are counted once each, the task owns at most one retry timer, and the
    // re-dispatches of the held fire stay at one per retry period.
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    let first = d.poll(at(1000)).pop().unwrap();
    d.on_enqueued(&first, EnqueueOutcome::Enqueued, at(1000));
    let mut dispatches = 0u64;
    let mut most_timers = 0;
    for t in (1010..=3_601_000).step_by(10) {
        for x in d.poll(at(t)) {
            dispatches += 1;
            d.on_enqueued(&x, EnqueueOutcome::Held, at(t));
        }
        most_timers = most_timers.max(d.armed_len());
    }
    let state = d.state(&key("a")).unwrap();
    assert_eq!(state.fire_count, 3_601, "one count per schedule instant");
    assert!(most_timers <= 2, "{most_timers} timers for one task");
    // 3 600 scheduled fires plus one held re-dispatch per 5 s retry period.
    assert!(dispatches <= 3_600 + 720 + 1, "{dispatches} dispatches");
    // The execution ends: the one held fire (the newest) runs once.
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(0),
        0,
        &finished(AttemptOutcome::Succeeded, None, None),
        at(3_601_005),
    );
    let again = d.poll(at(3_601_005));
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].fire_at, at(3_601_000));
    d.on_enqueued(&again[0], EnqueueOutcome::Enqueued, at(3_601_005));
    assert_eq!(d.state(&key("a")).unwrap().fire_count, 3_601);
    assert_eq!(d.armed_len(), 1, "only the schedule's timer is left");
}

#[test]
fn a_stall_inside_a_term_applies_the_misfire_policy() {
    // The leader's loop stops for ten minutes (Redis down while the lease holds, a forward
    // clock step): the fires missed meanwhile follow each task's policy, as at a takeover.
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    for (id, misfire) in [("once", "fire_once"), ("skip", "skip"), ("all", "fire_all")] {
        let json =
            format!(r#"{{"handler":"log","schedule":{{"every":"1s"}},"misfire":"{misfire}"}}"#);
        d.upsert(key(id), spec(id, &json), 5, None, at(0));
    }
    assert_eq!(run(&mut d, 10, 2000).len(), 6, "two on-time fires each");
    let after = d.poll(at(602_000));
    let fired = |id: &str| -> Vec<UtcMillis> {
        after
            .iter()
            .filter(|x| *x.key.id == *id)
            .map(|x| x.fire_at)
            .collect()
    };
    assert_eq!(
        fired("once"),
        vec![at(602_000)],
        "one fire, the latest missed"
    );
    assert!(fired("skip").is_empty(), "skip runs nothing");
    assert_eq!(
        fired("all").len(),
        600,
        "every missed fire inside the window"
    );
    // The cadence continues from now.
    assert_eq!(run(&mut d, 602_010, 603_000).len(), 3);
    let notices = d.take_notices();
    assert!(notices
        .iter()
        .any(|n| matches!(n, Notice::Misfired { key, skipped, .. } if &*key.id == "skip" && *skipped == 600)));
}

#[test]
fn a_huge_error_is_capped_in_the_state() {
    // A failing 1 MB URL echoed into the error: the state must stay far below etcd's
    // request limit.
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    assert_eq!(d.poll(at(1000)).len(), 1);
    let huge = format!("POST http://x/{} failed", "a".repeat(1_000_000));
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(0),
        0,
        &finished(AttemptOutcome::Failed, Some(huge.clone()), Some(at(5000))),
        at(1100),
    );
    let retrying = d.state(&key("a")).unwrap().last_error.clone().unwrap();
    assert!(retrying.len() <= crate::execution::MAX_ERROR_LEN);
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(0),
        0,
        &finished(AttemptOutcome::Failed, Some(huge), None),
        at(1200),
    );
    let state = d.state(&key("a")).unwrap();
    let last = state.last_error.as_deref().unwrap();
    assert!(
        last.len() <= crate::execution::MAX_ERROR_LEN,
        "{}",
        last.len()
    );
    assert!(serde_json::to_vec(state).unwrap().len() < 8 * 1024);
}

#[test]
fn an_end_read_from_history_is_applied_once() {
    // A new leader finds a one-shot RUNNING whose end a dead leader heard and never wrote.
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let json = format!(
        r#"{{"handler":"log","schedule":{{"at":"{}"}}}}"#,
        at(1000).to_rfc3339()
    );
    d.upsert(key("a"), spec("a", &json), 5, None, at(0));
    assert_eq!(d.poll(at(1000)).len(), 1);
    let in_flight = d.in_flight();
    assert_eq!(in_flight.len(), 1);
    assert_eq!(in_flight[0].1, at(1000));
    let end = crate::execution::AttemptEnd::succeeded();
    d.reconcile(
        &key("a"),
        ExecutionId::from_u128(42),
        0,
        at(1500),
        &end,
        at(2000),
    );
    let state = d.state(&key("a")).unwrap();
    assert_eq!(
        (state.status, state.success_count),
        (TaskStatus::Success, 1)
    );
    assert!(d.in_flight().is_empty());
    // Its event still arrives (it was in the list after all): not counted twice.
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(42),
        0,
        &finished(AttemptOutcome::Succeeded, None, None),
        at(2100),
    );
    assert_eq!(d.state(&key("a")).unwrap().success_count, 1);
    // Another execution's end is applied as usual.
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(43),
        0,
        &finished(AttemptOutcome::Succeeded, None, None),
        at(2200),
    );
    assert_eq!(d.state(&key("a")).unwrap().success_count, 2);
}

#[test]
fn a_held_fire_survives_a_failover() {
    let mut old = one_task("a", r#"{"handler":"log","schedule":{"every":"1h"}}"#);
    let x = old.poll(at(3_600_000)).pop().unwrap();
    old.on_enqueued(&x, EnqueueOutcome::Held, at(3_600_000));
    let written = old
        .take_state_writes(at(3_600_000))
        .into_iter()
        .find_map(|(_, s)| s)
        .unwrap();
    assert_eq!(written.held_fire_at, Some(at(3_600_000)));
    // The leader dies; the next one loads the written state and sends the held fire.
    let mut new = Dispatcher::new(DispatcherConfig::default(), at(3_601_000));
    new.upsert(
        key("a"),
        spec("a", r#"{"handler":"log","schedule":{"every":"1h"}}"#),
        5,
        Some(written),
        at(3_601_000),
    );
    let again = new.poll(at(3_601_000));
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].fire_at, at(3_600_000));
    assert_eq!(
        new.state(&key("a")).unwrap().fire_count,
        1,
        "not a new fire"
    );
    new.on_enqueued(&again[0], EnqueueOutcome::Enqueued, at(3_601_000));
    assert_eq!(new.state(&key("a")).unwrap().held_fire_at, None);
}

#[test]
fn an_event_read_again_after_a_failover_is_not_applied_twice() {
    let pos = |seq| EventPosition { ms: 1_000, seq };
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    let fire = d.poll(at(1000)).pop().unwrap();
    d.on_enqueued(&fire, EnqueueOutcome::Enqueued, at(1000));
    let success = finished(AttemptOutcome::Succeeded, None, None);
    d.on_event(
        &key("a"),
        pos(1),
        ExecutionId::from_u128(7),
        0,
        &success,
        at(1100),
    );
    // The same event again (this leader read it twice): nothing changes.
    d.on_event(
        &key("a"),
        pos(1),
        ExecutionId::from_u128(7),
        0,
        &success,
        at(1150),
    );
    let written = d.state(&key("a")).unwrap().clone();
    assert_eq!(written.success_count, 1);
    assert_eq!(written.last_event, Some(pos(1)));
    // The leader dies after writing the state and before acknowledging the event: its
    // successor starts from the written state and reads the event again.
    let mut next = Dispatcher::new(DispatcherConfig::default(), at(1200));
    next.upsert(
        key("a"),
        spec("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#),
        5,
        Some(written),
        at(1200),
    );
    next.on_event(
        &key("a"),
        pos(1),
        ExecutionId::from_u128(7),
        0,
        &success,
        at(1200),
    );
    assert_eq!(next.state(&key("a")).unwrap().success_count, 1);
    // A later event still counts.
    let failure = finished(AttemptOutcome::Failed, Some("boom".into()), None);
    next.on_event(
        &key("a"),
        pos(2),
        ExecutionId::from_u128(8),
        0,
        &failure,
        at(2100),
    );
    let state = next.state(&key("a")).unwrap();
    assert_eq!((state.success_count, state.failure_count), (1, 1));
    assert_eq!(state.last_event, Some(pos(2)));
    // The fire is sent again (its state was not written), refused as a duplicate, and its
    // end read from the history: the end its event brought is not counted again.
    next.reconcile(
        &key("a"),
        ExecutionId::from_u128(8),
        0,
        at(2050),
        &crate::execution::AttemptEnd::new(AttemptOutcome::Failed, Some("boom".into())),
        at(2200),
    );
    let state = next.state(&key("a")).unwrap();
    assert_eq!((state.success_count, state.failure_count), (1, 1));
}

#[test]
fn a_one_shot_sent_again_after_a_failover_ends_as_its_replayed_end_says() {
    // The dead leader sent the one-shot and heard its end, and wrote neither. Its successor
    // arms it afresh, applies the end it claims from the event stream, sends the fire again
    // (refused as a duplicate) and reads the end from the history.
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let json = format!(
        r#"{{"handler":"log","schedule":{{"at":"{}"}}}}"#,
        at(1000).to_rfc3339()
    );
    d.upsert(key("a"), spec("a", &json), 5, None, at(2000));
    let pos = |seq| EventPosition { ms: 1_500, seq };
    d.on_event(
        &key("a"),
        pos(0),
        ExecutionId::from_u128(42),
        0,
        &ExecutionEvent::Started { at: at(1001) },
        at(2000),
    );
    d.on_event(
        &key("a"),
        pos(1),
        ExecutionId::from_u128(42),
        0,
        &finished(AttemptOutcome::Succeeded, None, None),
        at(2000),
    );
    let again = d.poll(at(2000));
    assert_eq!(again.len(), 1);
    d.on_enqueued(&again[0], EnqueueOutcome::Duplicate, at(2000));
    assert_eq!(d.state(&key("a")).unwrap().status, TaskStatus::Running);
    let end = crate::execution::AttemptEnd::succeeded();
    d.reconcile(
        &key("a"),
        ExecutionId::from_u128(42),
        0,
        at(1002),
        &end,
        at(2100),
    );
    let state = d.state(&key("a")).unwrap();
    assert_eq!(
        (state.status, state.success_count, state.failure_count),
        (TaskStatus::Success, 1, 0)
    );
}

/// State writes (each one etcd put) per execution under steady periodic load, flushing every
/// 500 ms as the engine does, for executions of `run_ms`; and the writes of a takeover
/// that finds every state as the last leader left it.
fn write_amplification(run_ms: i64) -> (f64, usize) {
    const TASKS: usize = 200;
    let json = r#"{"handler":"log","schedule":{"every":"1s"},"overlap":"allow"}"#;
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    for i in 0..TASKS {
        let id = format!("t{i:03}");
        d.upsert(key(&id), spec(&id, json), 5, None, at(0));
    }
    d.take_state_writes(UtcMillis::MAX);
    // (when, task, execution, event)
    let mut events: Vec<(i64, TaskKey, u128, ExecutionEvent)> = Vec::new();
    let (mut writes, mut executions, mut next_exec) = (0usize, 0usize, 0u128);
    for t in (10..=60_000).step_by(10) {
        for dispatch in d.poll(at(t)) {
            d.on_enqueued(&dispatch, EnqueueOutcome::Enqueued, at(t));
            next_exec += 1;
            let k = (*dispatch.key).clone();
            events.push((
                t + 5,
                k.clone(),
                next_exec,
                ExecutionEvent::Started { at: at(t + 5) },
            ));
            events.push((
                t + 5 + run_ms,
                k,
                next_exec,
                ExecutionEvent::Finished {
                    at: at(t + 5 + run_ms),
                    end: crate::execution::AttemptEnd::succeeded(),
                },
            ));
        }
        let (due, later): (Vec<_>, Vec<_>) = events.into_iter().partition(|e| e.0 <= t);
        events = later;
        for (_, k, exec, event) in due {
            if matches!(event, ExecutionEvent::Finished { .. }) {
                executions += 1;
            }
            d.on_execution(&k, ExecutionId::from_u128(exec), 0, &event, at(t));
        }
        if t % 500 == 0 {
            writes += d.take_state_writes(at(t)).len();
        }
    }
    // A takeover: every state as written, the same catalog.
    let mut next = Dispatcher::new(DispatcherConfig::default(), at(60_010));
    for i in 0..TASKS {
        let id = format!("t{i:03}");
        let state = d.state(&key(&id)).cloned();
        next.upsert(key(&id), spec(&id, json), 5, state, at(60_010));
    }
    let takeover = next.take_state_writes(UtcMillis::MAX).len();
    (writes as f64 / executions as f64, takeover)
}

#[test]
fn at_most_one_state_write_per_short_execution_and_none_for_an_unchanged_takeover() {
    let (short, takeover) = write_amplification(10);
    let (long, _) = write_amplification(700);
    println!("state writes per execution: {short:.3} (10 ms runs), {long:.3} (700 ms runs); takeover writes {takeover}");
    assert!(short <= 1.05, "{short} writes per 10 ms execution");
    assert!(long <= 1.05, "{long} writes per 700 ms execution");
    assert_eq!(takeover, 0, "a takeover writes only what changed");
}

#[test]
fn a_paused_namespace_fires_nothing_and_its_misfire_policy_decides_at_resume() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let every = |misfire: &str| {
        format!(r#"{{"handler":"log","schedule":{{"every":"1s"}},"misfire":"{misfire}"}}"#)
    };
    let in_ns = |ns: &str, id: &str, json: &str| {
        (
            TaskKey::new(ns, id),
            TaskSpec::from_json(json.as_bytes(), ns, id).unwrap(),
        )
    };
    for (k, s) in [
        in_ns("batch", "once", &every("fire_once")),
        in_ns("batch", "all", &every("fire_all")),
        in_ns("batch", "skip", &every("skip")),
        in_ns("web", "other", &every("fire_once")),
    ] {
        d.upsert(k, s, 5, None, at(0));
    }
    d.pause_namespace("batch");
    assert_eq!(d.paused_namespaces().collect::<Vec<_>>(), ["batch"]);
    let fired = run(&mut d, 0, 10_000);
    assert!(
        fired.iter().all(|(_, x)| &*x.key.namespace == "web"),
        "a paused namespace fires nothing"
    );
    assert_eq!(fired.len(), 10, "the others keep their cadence");
    // A run-now is an operator's request: it runs even while paused.
    assert!(d.trigger(
        &TaskKey::new("batch", "once"),
        ExecutionId::from_u128(1),
        at(10_000)
    ));
    assert_eq!(d.poll(at(10_000)).len(), 1);

    d.resume_namespace("batch", at(10_010));
    let resumed: Vec<(String, i64)> = d
        .poll(at(10_010))
        .into_iter()
        .map(|x| (x.key.id.to_string(), x.fire_at.0 - T0))
        .collect();
    let count = |id: &str| resumed.iter().filter(|(i, _)| i == id).count();
    assert_eq!(
        count("once"),
        1,
        "fire_once runs one missed fire: {resumed:?}"
    );
    assert_eq!(
        count("all"),
        10,
        "fire_all runs every missed fire: {resumed:?}"
    );
    assert_eq!(count("skip"), 0, "skip runs none: {resumed:?}");
    // And the cadence goes on.
    let next: Vec<String> = run(&mut d, 10_020, 11_000)
        .into_iter()
        .map(|(_, x)| x.key.id.to_string())
        .collect();
    for id in ["once", "all", "skip", "other"] {
        assert!(next.iter().any(|n| n == id), "{id} fires again: {next:?}");
    }
}

#[test]
fn a_takeover_into_a_paused_namespace_parks_its_missed_fires() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(60_000));
    d.pause_namespace("default");
    let mut recorded = TaskState::new(5, at(0), at(0));
    recorded.last_fire_at = Some(at(10_000));
    d.upsert(
        key("a"),
        spec("a", r#"{"handler":"log","schedule":{"every":"10s"}}"#),
        5,
        Some(recorded),
        at(65_000),
    );
    assert!(d.poll(at(65_000)).is_empty(), "the missed fire is parked");
    assert!(run(&mut d, 65_010, 90_000).is_empty());
    d.resume_namespace("default", at(90_010));
    let fired = d.poll(at(90_010));
    assert_eq!(fired.len(), 1, "fire_once: one run for all missed");
}

fn deadline_misses(d: &mut Dispatcher) -> Vec<crate::deadline::Miss> {
    d.take_notices()
        .into_iter()
        .filter_map(|n| match n {
            Notice::DeadlineMissed { miss, .. } => Some(miss),
            _ => None,
        })
        .collect()
}

const DEADLINE_TASK: &str =
    r#"{"handler":"log","schedule":{"every":"10s"},"expect_success_within":"5s"}"#;

#[test]
fn a_deadline_is_alerted_once_per_missed_fire_and_a_success_meets_the_next() {
    let mut d = one_task("a", DEADLINE_TASK);
    // The fire at 10 s goes out and fails for good; its deadline passes at 15 s.
    let x = d.poll(at(10_000)).pop().unwrap();
    d.on_enqueued(&x, EnqueueOutcome::Enqueued, at(10_000));
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(1),
        0,
        &finished(AttemptOutcome::Failed, Some("HTTP 503".into()), None),
        at(11_000),
    );
    assert!(deadline_misses(&mut d).is_empty());
    d.poll(at(14_990));
    assert!(
        deadline_misses(&mut d).is_empty(),
        "not before the deadline"
    );
    d.poll(at(15_000));
    let misses = deadline_misses(&mut d);
    assert_eq!(misses.len(), 1, "{misses:?}");
    assert_eq!(misses[0].first_fire, at(10_000));
    assert_eq!(
        misses[0].reason,
        crate::deadline::MissReason::Failing {
            consecutive_failures: 1,
            last_error: Some("HTTP 503".into())
        }
    );
    assert_eq!(
        d.state(&key("a")).unwrap().deadline_mark,
        Some(at(10_000)),
        "recorded, to be written"
    );
    // Polling on does not raise it again; the fire at 20 s succeeds and meets its deadline.
    run(&mut d, 15_010, 19_990);
    assert!(deadline_misses(&mut d).is_empty());
    let x = d.poll(at(20_000)).pop().unwrap();
    d.on_enqueued(&x, EnqueueOutcome::Enqueued, at(20_000));
    d.on_execution(
        &key("a"),
        ExecutionId::from_u128(2),
        0,
        &finished(AttemptOutcome::Succeeded, None, None),
        at(21_000),
    );
    run(&mut d, 20_010, 29_990);
    assert!(deadline_misses(&mut d).is_empty());
}

#[test]
fn a_new_leader_does_not_alert_a_missed_deadline_again_and_names_the_outage() {
    let mut old = one_task("a", DEADLINE_TASK);
    // The fire at 10 s is sent and never ends; its deadline is alerted at 15 s.
    let x = old.poll(at(10_000)).pop().unwrap();
    old.on_enqueued(&x, EnqueueOutcome::Enqueued, at(10_000));
    old.poll(at(15_000));
    let misses = deadline_misses(&mut old);
    assert_eq!(
        misses[0].reason,
        crate::deadline::MissReason::Running {
            since: Some(at(10_000))
        }
    );
    let written = old
        .take_state_writes(UtcMillis::MAX)
        .into_iter()
        .find_map(|(_, s)| s)
        .unwrap();
    assert_eq!(written.deadline_mark, Some(at(10_000)));

    // The leader dies at 16 s; nobody leads until 40 s.
    let mut new = Dispatcher::new(DispatcherConfig::default(), at(40_000));
    new.upsert(
        key("a"),
        spec("a", DEADLINE_TASK),
        5,
        Some(written),
        at(40_000),
    );
    let misses = deadline_misses(&mut new);
    assert_eq!(misses.len(), 1, "{misses:?}");
    // The fire at 10 s is not alerted again; those at 20 and 30 s were due with no leader.
    assert_eq!(
        (misses[0].first_fire, misses[0].last_fire, misses[0].missed),
        (at(20_000), at(30_000), 2)
    );
    assert_eq!(
        misses[0].reason,
        crate::deadline::MissReason::Running {
            since: Some(at(10_000))
        },
        "the execution of 10 s still runs: that is why, not the outage"
    );
}

#[test]
fn fires_never_sent_before_a_takeover_miss_for_want_of_a_leader() {
    let mut old = one_task("a", DEADLINE_TASK);
    let written = old
        .take_state_writes(UtcMillis::MAX)
        .into_iter()
        .find_map(|(_, s)| s)
        .unwrap();
    let mut new = Dispatcher::new(DispatcherConfig::default(), at(17_000));
    new.upsert(
        key("a"),
        spec("a", DEADLINE_TASK),
        5,
        Some(written),
        at(17_000),
    );
    let misses = deadline_misses(&mut new);
    assert_eq!(misses.len(), 1, "{misses:?}");
    assert_eq!(
        misses[0].reason,
        crate::deadline::MissReason::NoLeader {
            leader_since: at(17_000)
        }
    );
    assert_eq!(misses[0].reason.as_str(), "no_leader");
}

#[test]
fn a_paused_namespace_or_task_is_not_judged_and_a_spec_change_starts_afresh() {
    let mut d = one_task("a", DEADLINE_TASK);
    d.pause_namespace("default");
    run(&mut d, 0, 60_000);
    assert!(deadline_misses(&mut d).is_empty());
    d.resume_namespace("default", at(60_000));
    // The parked fire runs at resume (fire_once) and fails; its deadline is not judged
    // (due while paused), the next fire's (70 s, by 75 s) is.
    run(&mut d, 60_010, 74_990);
    assert!(deadline_misses(&mut d).is_empty());
    run(&mut d, 75_000, 75_000);
    assert_eq!(deadline_misses(&mut d).len(), 1);

    // A paused task.
    let paused = r#"{"handler":"log","schedule":{"every":"10s"},"expect_success_within":"5s","paused":true}"#;
    d.upsert(key("a"), spec("a", paused), 6, None, at(80_000));
    run(&mut d, 80_000, 200_000);
    assert!(deadline_misses(&mut d).is_empty());
    // Resumed at 200 s: the first judged fire is 210 s, missed at 215 s.
    d.upsert(key("a"), spec("a", DEADLINE_TASK), 7, None, at(200_000));
    run(&mut d, 200_000, 214_990);
    assert!(deadline_misses(&mut d).is_empty());
    run(&mut d, 215_000, 215_000);
    let misses = deadline_misses(&mut d);
    assert_eq!(misses.len(), 1);
    assert_eq!(misses[0].first_fire, at(210_000));
}

#[test]
fn a_paused_task_with_a_deadline_writes_no_state_while_paused() {
    // A paused namespace of many such tasks must not cost an etcd write per task at each
    // of their deadline instants.
    let mut d = one_task("a", DEADLINE_TASK);
    run(&mut d, 0, 10_000);
    d.take_state_writes(at(10_000));
    d.pause_namespace("default");
    run(&mut d, 10_010, 100_000);
    d.take_state_writes(at(100_000));
    run(&mut d, 100_010, 300_000);
    assert!(d.take_state_writes(at(300_000)).is_empty());
    assert_eq!(d.armed_len(), 0, "no deadline timer while paused");
    // The resume judges afresh and arms the next deadline.
    d.resume_namespace("default", at(300_000));
    assert_eq!(d.armed_len(), 2);
}

#[test]
fn a_task_without_a_deadline_costs_no_timer() {
    let d = one_task("a", r#"{"handler":"log","schedule":{"every":"10s"}}"#);
    assert_eq!(d.armed_len(), 1);
    let d = one_task("a", DEADLINE_TASK);
    assert_eq!(d.armed_len(), 2);
}

fn exec_of(d: &Dispatch) -> ExecutionId {
    d.run_now.expect("a step carries its execution id")
}

fn ended(d: &mut Dispatcher, id: &str, execution: ExecutionId, ok: bool, t: i64) {
    let outcome = if ok {
        AttemptOutcome::Succeeded
    } else {
        AttemptOutcome::Failed
    };
    let error = (!ok).then(|| "boom".to_owned());
    d.on_execution(
        &key(id),
        execution,
        0,
        &finished(outcome, error, None),
        at(t),
    );
}

const ROOT: &str = r#"{"handler":"log","schedule":{"every":"10s"}}"#;

fn chain() -> Dispatcher {
    // r -> a, r -> b, (a, b) -> c; d runs after c whatever its end.
    let mut d = one_task("r", ROOT);
    for (id, json) in [
        ("a", r#"{"handler":"log","depends_on":[{"task":"r"}]}"#),
        (
            "b",
            r#"{"handler":"log","depends_on":[{"task":"default/r"}]}"#,
        ),
        (
            "c",
            r#"{"handler":"log","depends_on":[{"task":"a"},{"task":"b","on":"any","within":"30s"}]}"#,
        ),
        (
            "d",
            r#"{"handler":"log","depends_on":[{"task":"c","on":"any"}]}"#,
        ),
    ] {
        d.upsert(key(id), spec(id, json), 5, None, at(0));
    }
    d
}

#[test]
fn a_chain_fans_out_and_in_once_per_run_carrying_the_run_id() {
    let mut d = chain();
    let root = d.poll(at(10_000)).pop().unwrap();
    assert!(root.starts_run && root.run_id.is_none());
    let run = ExecutionId::from_u128(7);
    ended(&mut d, "r", ExecutionId::from_u128(7), true, 10_500);
    let steps = d.poll(at(10_500));
    let mut names: Vec<&str> = steps.iter().map(|s| &*s.key.id).collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b"]);
    assert!(steps.iter().all(|s| s.run_id == Some(run)));
    // c waits for both.
    let a = steps.iter().find(|s| &*s.key.id == "a").unwrap();
    let b = steps.iter().find(|s| &*s.key.id == "b").unwrap();
    ended(&mut d, "a", exec_of(a), true, 11_000);
    assert!(d.poll(at(11_000)).is_empty());
    ended(&mut d, "b", exec_of(b), false, 11_500);
    let c = d.poll(at(11_500));
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(&*c[0].key.id, "c");
    assert_eq!(c[0].run_id, Some(run));
    // The same ends read again start nothing.
    ended(&mut d, "r", ExecutionId::from_u128(7), true, 11_600);
    ended(&mut d, "b", exec_of(b), false, 11_600);
    assert!(d.poll(at(11_600)).is_empty());
    ended(&mut d, "c", exec_of(&c[0]), true, 12_000);
    let last = d.poll(at(12_000));
    assert_eq!(last.len(), 1);
    assert_eq!(&*last[0].key.id, "d");
    ended(&mut d, "d", exec_of(&last[0]), true, 12_500);
    for id in ["a", "b", "c", "d"] {
        assert!(
            d.state(&key(id)).unwrap().runs.is_empty(),
            "{id} keeps no run"
        );
    }
}

#[test]
fn an_unmet_edge_skips_the_step_and_everything_after_it() {
    let mut d = chain();
    d.poll(at(10_000));
    ended(&mut d, "r", ExecutionId::from_u128(7), true, 10_500);
    let steps = d.poll(at(10_500));
    for s in &steps {
        // a fails: c waits for a's success.
        ended(&mut d, &s.key.id, exec_of(s), &*s.key.id == "b", 11_000);
    }
    assert!(d.poll(at(11_000)).is_empty(), "neither c nor d runs");
    let skipped: Vec<String> = d
        .take_notices()
        .into_iter()
        .filter_map(|n| match n {
            Notice::StepSkipped { key, reason, .. } => Some(format!("{}: {reason}", key.id)),
            _ => None,
        })
        .collect();
    assert_eq!(
        skipped,
        [
            "c: parent default/a ended in failure, the edge waits for success",
            "d: parent default/c ended skipped, the edge waits for any end"
        ]
    );
}

#[test]
fn a_parent_too_late_skips_the_step() {
    let mut d = chain();
    d.poll(at(10_000));
    ended(&mut d, "r", ExecutionId::from_u128(7), true, 10_500);
    let steps = d.poll(at(10_500));
    let a = steps.iter().find(|s| &*s.key.id == "a").unwrap();
    ended(&mut d, "a", exec_of(a), true, 11_000);
    // b never ends; c's edge to b allows 30 s from the run's start at c (11 s).
    run(&mut d, 11_010, 40_990);
    assert!(d.state(&key("c")).unwrap().runs.len() == 1);
    // Swept once a second: skipped within a second of the window's end.
    d.poll(at(42_000));
    assert!(d.state(&key("c")).unwrap().runs.is_empty());
    assert!(d.take_notices().iter().any(
        |n| matches!(n, Notice::StepSkipped { key, reason, .. } if &*key.id == "c" && reason.contains("within 30s"))
    ));
}

#[test]
fn a_new_leader_finishes_a_chain_without_repeating_or_skipping_a_step() {
    let mut old = chain();
    old.poll(at(10_000));
    ended(&mut old, "r", ExecutionId::from_u128(7), true, 10_500);
    let steps = old.poll(at(10_500));
    let a = steps.iter().find(|s| &*s.key.id == "a").unwrap().clone();
    ended(&mut old, "a", exec_of(&a), true, 11_000);
    // The old leader wrote its states and died; b still runs.
    let written: HashMap<String, TaskState> = old
        .take_state_writes(UtcMillis::MAX)
        .into_iter()
        .filter_map(|(k, s)| Some((k.id.to_string(), s?)))
        .collect();
    let mut new = Dispatcher::new(DispatcherConfig::default(), at(12_000));
    for (id, json) in [
        ("r", ROOT),
        ("a", r#"{"handler":"log","depends_on":[{"task":"r"}]}"#),
        (
            "b",
            r#"{"handler":"log","depends_on":[{"task":"default/r"}]}"#,
        ),
        (
            "c",
            r#"{"handler":"log","depends_on":[{"task":"a"},{"task":"b","on":"any","within":"30s"}]}"#,
        ),
        (
            "d",
            r#"{"handler":"log","depends_on":[{"task":"c","on":"any"}]}"#,
        ),
    ] {
        new.upsert(
            key(id),
            spec(id, json),
            5,
            written.get(id).cloned(),
            at(12_000),
        );
    }
    // The events the old leader had not acknowledged are read again.
    ended(&mut new, "r", ExecutionId::from_u128(7), true, 12_000);
    ended(&mut new, "a", exec_of(&a), true, 12_000);
    // b, fired by the old leader, is sent again under the same id (the queue refuses the
    // duplicate); a is not sent again.
    let again = new.poll(at(12_000));
    let ids: Vec<(&str, ExecutionId)> = again.iter().map(|s| (&*s.key.id, exec_of(s))).collect();
    let b = steps.iter().find(|s| &*s.key.id == "b").unwrap();
    assert_eq!(ids, [("b", exec_of(b))]);
    ended(&mut new, "b", exec_of(b), true, 13_000);
    let c = new.poll(at(13_000));
    assert_eq!(c.len(), 1);
    assert_eq!(&*c[0].key.id, "c");
}

#[test]
fn missing_parents_and_cycles_hold_a_task_invalid_until_mended() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    d.upsert(
        key("b"),
        spec("b", r#"{"handler":"log","depends_on":[{"task":"a"}]}"#),
        5,
        None,
        at(0),
    );
    let st = d.state(&key("b"));
    assert!(st.is_none(), "held, not armed");
    let writes = d.take_state_writes(at(0));
    let invalid = writes[0].1.as_ref().unwrap();
    assert_eq!(invalid.status, TaskStatus::Invalid);
    assert!(invalid.validation_errors[0]
        .reason
        .contains("default/a does not exist"));
    // The parent arrives: b is armed.
    d.upsert(key("a"), spec("a", ROOT), 6, None, at(1));
    assert_eq!(d.state(&key("b")).unwrap().status, TaskStatus::Waiting);
    // a made to depend on b: a cycle, both held.
    d.upsert(
        key("a"),
        spec("a", r#"{"handler":"log","depends_on":[{"task":"b"}]}"#),
        7,
        None,
        at(2),
    );
    assert!(d.state(&key("a")).is_none() && d.state(&key("b")).is_none());
    let writes = d.take_state_writes(at(2));
    assert!(writes.iter().any(|(k, s)| &*k.id == "a"
        && s.as_ref().unwrap().validation_errors[0].reason
            == "is a cycle: default/a -> default/b -> default/a"));
    // Deleting a leaves b with a missing parent.
    d.remove(&key("a"), at(3));
    assert!(d.state(&key("b")).is_none());
}

/// A parent whose own spec is INVALID still exists for its children: they are armed and
/// wait, where a parent never registered or deleted holds them invalid.
#[test]
fn an_invalid_parent_exists_for_its_children_and_a_deleted_one_does_not() {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    d.mark_invalid(key("a"), 4, vec![FieldError::new("handler", "bad")], at(0));
    let child = r#"{"handler":"log","depends_on":[{"task":"a"}]}"#;
    d.upsert(key("b"), spec("b", child), 5, None, at(1));
    assert_eq!(d.state(&key("b")).unwrap().status, TaskStatus::Waiting);
    // Its spec mended and broken again: still there all along.
    d.upsert(key("a"), spec("a", ROOT), 6, None, at(2));
    d.mark_invalid(key("a"), 7, vec![FieldError::new("handler", "bad")], at(3));
    assert_eq!(d.state(&key("b")).unwrap().status, TaskStatus::Waiting);
    d.take_state_writes(UtcMillis::MAX);
    d.remove(&key("a"), at(4));
    assert!(d.state(&key("b")).is_none(), "held invalid");
    let writes = d.take_state_writes(UtcMillis::MAX);
    let b = writes.iter().find(|(k, _)| &*k.id == "b").unwrap();
    assert!(b.1.as_ref().unwrap().validation_errors[0]
        .reason
        .contains("default/a does not exist"));
}

fn piece_exec(d: &Dispatch) -> ExecutionId {
    d.piece.as_ref().unwrap().execution_id()
}

const FANNED_OUT: &str = r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{"shards":3}}"#;

#[test]
fn a_fanned_out_fire_runs_each_piece_and_ends_once_when_all_have() {
    let mut d = one_task("s", FANNED_OUT);
    let pieces = d.poll(at(10_000));
    assert_eq!(pieces.len(), 3);
    let indexes: Vec<u32> = pieces
        .iter()
        .map(|s| s.piece.as_ref().unwrap().index)
        .collect();
    assert_eq!(indexes, [0, 1, 2]);
    let fanout = &pieces[0].piece.as_ref().unwrap().fanout;
    assert!(pieces
        .iter()
        .all(|s| &s.piece.as_ref().unwrap().fanout == fanout));
    assert!(pieces.iter().all(|s| s.overlap == OverlapPolicy::Allow));
    assert_eq!(d.state(&key("s")).unwrap().fire_count, 1, "one fire");
    // Piece 1 retries once, then every piece ends; piece 2 fails for good.
    d.on_execution(
        &key("s"),
        piece_exec(&pieces[1]),
        0,
        &finished(AttemptOutcome::Failed, Some("503".into()), Some(at(12_000))),
        at(11_000),
    );
    assert_eq!(d.state(&key("s")).unwrap().status, TaskStatus::Retrying);
    ended(&mut d, "s", piece_exec(&pieces[0]), true, 11_100);
    ended(&mut d, "s", piece_exec(&pieces[1]), true, 12_100);
    assert_eq!(d.state(&key("s")).unwrap().success_count, 0, "not yet");
    ended(&mut d, "s", piece_exec(&pieces[2]), false, 12_200);
    // The same end again counts nothing.
    ended(&mut d, "s", piece_exec(&pieces[2]), false, 12_300);
    let st = d.state(&key("s")).unwrap();
    assert_eq!((st.success_count, st.failure_count), (0, 1));
    assert_eq!(
        st.last_error.as_deref(),
        Some("1 of 3 shards failed; last error: boom")
    );
    assert!(st.fanouts.is_empty());
}

#[test]
fn a_new_leader_sends_the_pieces_not_ended_under_the_same_ids() {
    let mut old = one_task("s", FANNED_OUT);
    let pieces = old.poll(at(10_000));
    ended(&mut old, "s", piece_exec(&pieces[0]), true, 11_000);
    let written = old
        .take_state_writes(UtcMillis::MAX)
        .into_iter()
        .find_map(|(_, s)| s)
        .unwrap();
    assert_eq!(written.fanouts.len(), 1);
    let mut new = Dispatcher::new(DispatcherConfig::default(), at(12_000));
    new.upsert(
        key("s"),
        spec("s", FANNED_OUT),
        5,
        Some(written),
        at(12_000),
    );
    let again = new.poll(at(12_000));
    let ids: Vec<ExecutionId> = again.iter().map(piece_exec).collect();
    assert_eq!(ids, [piece_exec(&pieces[1]), piece_exec(&pieces[2])]);
    for s in &again {
        ended(&mut new, "s", piece_exec(s), true, 13_000);
    }
    assert_eq!(new.state(&key("s")).unwrap().success_count, 1);
}

#[test]
fn a_chain_waits_for_every_piece_of_its_parent() {
    let mut d = one_task("s", FANNED_OUT);
    d.upsert(
        key("after"),
        spec("after", r#"{"handler":"log","depends_on":[{"task":"s"}]}"#),
        5,
        None,
        at(0),
    );
    let pieces = d.poll(at(10_000));
    assert!(pieces.iter().all(|s| s.starts_run));
    ended(&mut d, "s", piece_exec(&pieces[0]), true, 11_000);
    ended(&mut d, "s", piece_exec(&pieces[1]), true, 11_000);
    assert!(d.poll(at(11_000)).is_empty());
    ended(&mut d, "s", piece_exec(&pieces[2]), true, 11_000);
    let next = d.poll(at(11_000));
    assert_eq!(next.len(), 1);
    assert_eq!(
        next[0].run_id,
        Some(pieces[0].piece.as_ref().unwrap().fanout),
        "the run is the fire's fan-out id"
    );
}

/// The failed attempts noticed since the last call: (execution, attempt, outcome, retried).
fn failures(d: &mut Dispatcher) -> Vec<(ExecutionId, u32, AttemptOutcome, bool)> {
    d.take_notices()
        .into_iter()
        .filter_map(|n| match n {
            Notice::AttemptFailed {
                execution,
                attempt,
                end,
                ..
            } => Some((execution, attempt, end.outcome, end.retry_at.is_some())),
            _ => None,
        })
        .collect()
}

#[test]
fn each_failed_attempt_is_noticed_once_however_its_end_arrives() {
    let pos = |seq| EventPosition { ms: 1_000, seq };
    let json = r#"{"handler":"log","schedule":{"every":"1s"}}"#;
    let mut d = one_task("a", json);
    let fire = d.poll(at(1000)).pop().unwrap();
    d.on_enqueued(&fire, EnqueueOutcome::Enqueued, at(1000));
    d.take_notices();
    let retried = finished(
        AttemptOutcome::TimedOut,
        Some("slow".into()),
        Some(at(2000)),
    );
    d.on_event(
        &key("a"),
        pos(1),
        ExecutionId::from_u128(7),
        0,
        &retried,
        at(1100),
    );
    assert_eq!(
        failures(&mut d),
        [(ExecutionId::from_u128(7), 0, AttemptOutcome::TimedOut, true)]
    );
    // Read twice by this leader: nothing more.
    d.on_event(
        &key("a"),
        pos(1),
        ExecutionId::from_u128(7),
        0,
        &retried,
        at(1150),
    );
    assert_eq!(failures(&mut d), []);
    let last = finished(AttemptOutcome::Failed, Some("boom".into()), None);
    d.on_event(
        &key("a"),
        pos(2),
        ExecutionId::from_u128(7),
        1,
        &last,
        at(2100),
    );
    assert_eq!(
        failures(&mut d),
        [(ExecutionId::from_u128(7), 1, AttemptOutcome::Failed, false)]
    );
    // The same end from the history (a fire refused as a duplicate): nothing more.
    d.reconcile(
        &key("a"),
        ExecutionId::from_u128(7),
        1,
        at(2050),
        &crate::execution::AttemptEnd::new(AttemptOutcome::Failed, Some("boom".into())),
        at(2200),
    );
    assert_eq!(failures(&mut d), []);
    // A successor that loads the written state and reads the events again: nothing more.
    let written = d.state(&key("a")).unwrap().clone();
    let mut next = Dispatcher::new(DispatcherConfig::default(), at(2300));
    next.upsert(key("a"), spec("a", json), 5, Some(written), at(2300));
    next.take_notices();
    next.on_event(
        &key("a"),
        pos(1),
        ExecutionId::from_u128(7),
        0,
        &retried,
        at(2300),
    );
    next.on_event(
        &key("a"),
        pos(2),
        ExecutionId::from_u128(7),
        1,
        &last,
        at(2300),
    );
    assert_eq!(failures(&mut next), []);
    // A successor of a leader that died before writing them applies and notices both.
    let mut fresh = Dispatcher::new(DispatcherConfig::default(), at(2300));
    fresh.upsert(key("a"), spec("a", json), 5, None, at(2300));
    fresh.take_notices();
    fresh.on_event(
        &key("a"),
        pos(1),
        ExecutionId::from_u128(7),
        0,
        &retried,
        at(2300),
    );
    fresh.on_event(
        &key("a"),
        pos(2),
        ExecutionId::from_u128(7),
        1,
        &last,
        at(2300),
    );
    assert_eq!(
        failures(&mut fresh),
        [
            (ExecutionId::from_u128(7), 0, AttemptOutcome::TimedOut, true),
            (ExecutionId::from_u128(7), 1, AttemptOutcome::Failed, false)
        ]
    );
    // Successes, kills and give-backs are no failures; an unknown task's end is nobody's.
    for (n, outcome) in [
        AttemptOutcome::Succeeded,
        AttemptOutcome::Killed,
        AttemptOutcome::Released,
    ]
    .into_iter()
    .enumerate()
    {
        let seq = 3 + n as u64;
        d.on_event(
            &key("a"),
            pos(seq),
            ExecutionId::from_u128(8 + n as u128),
            0,
            &finished(outcome, None, None),
            at(3000),
        );
    }
    d.on_event(
        &key("gone"),
        pos(9),
        ExecutionId::from_u128(9),
        0,
        &last,
        at(3000),
    );
    assert_eq!(failures(&mut d), []);
}

#[test]
fn a_fanned_out_fire_notices_its_pieces_failures_and_not_its_own_end() {
    let mut d = one_task("s", FANNED_OUT);
    let pieces = d.poll(at(10_000));
    d.take_notices();
    d.on_execution(
        &key("s"),
        piece_exec(&pieces[1]),
        0,
        &finished(AttemptOutcome::Failed, Some("503".into()), Some(at(12_000))),
        at(11_000),
    );
    ended(&mut d, "s", piece_exec(&pieces[0]), true, 11_100);
    ended(&mut d, "s", piece_exec(&pieces[1]), true, 12_100);
    ended(&mut d, "s", piece_exec(&pieces[2]), false, 12_200);
    ended(&mut d, "s", piece_exec(&pieces[2]), false, 12_300);
    assert_eq!(
        failures(&mut d),
        [
            (piece_exec(&pieces[1]), 0, AttemptOutcome::Failed, true),
            (piece_exec(&pieces[2]), 0, AttemptOutcome::Failed, false)
        ]
    );
    assert_eq!(d.state(&key("s")).unwrap().failure_count, 1);
}

const BROADCAST: &str =
    r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{"broadcast":true}}"#;

fn workers(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

fn piece_worker(d: &Dispatch) -> &str {
    d.piece.as_ref().unwrap().worker.as_deref().unwrap()
}

#[test]
fn a_broadcast_fire_waits_for_its_workers_then_runs_one_piece_on_each() {
    let mut d = one_task("b", BROADCAST);
    let fire = d.poll(at(10_000));
    assert_eq!(fire.len(), 1);
    assert!(
        fire[0].broadcast && fire[0].piece.is_none(),
        "not addressed yet"
    );
    assert!(d.state(&key("b")).unwrap().fanouts.is_empty());
    let pieces = d.address_broadcast(&fire[0], workers(&["w3", "w1", "w2", "w1"]), at(10_010));
    assert_eq!(pieces.len(), 3, "one per worker, each once");
    let to: Vec<&str> = pieces.iter().map(piece_worker).collect();
    assert_eq!(to, ["w1", "w2", "w3"], "piece i on the i-th worker, sorted");
    assert!(pieces.iter().all(|s| !s.broadcast));
    assert!(pieces.iter().all(|s| s.piece.as_ref().unwrap().total == 3));
    let progress = &d.state(&key("b")).unwrap().fanouts[0];
    assert_eq!(progress.workers, workers(&["w1", "w2", "w3"]));
    // Written at once, not after the RUNNING delay: a new leader needs the addressing.
    assert!(d
        .take_state_writes(at(10_010))
        .iter()
        .any(|(_, s)| s.as_ref().is_some_and(|s| s.fanouts.len() == 1)));
    // Addressing the same fire again (a repeat) changes nothing.
    let again = d.address_broadcast(&fire[0], workers(&["w9"]), at(10_020));
    let to: Vec<&str> = again.iter().map(piece_worker).collect();
    assert_eq!(to, ["w1", "w2", "w3"]);
    ended(&mut d, "b", piece_exec(&pieces[0]), true, 11_000);
    ended(&mut d, "b", piece_exec(&pieces[2]), true, 11_000);
    assert_eq!(d.state(&key("b")).unwrap().success_count, 0, "not yet");
    ended(&mut d, "b", piece_exec(&pieces[1]), false, 11_500);
    let st = d.state(&key("b")).unwrap();
    assert_eq!((st.success_count, st.failure_count), (0, 1));
    assert_eq!(
        st.last_error.as_deref(),
        Some("1 of 3 shards failed; last error: boom")
    );
    assert!(st.fanouts.is_empty());
    // The next fire lists the workers anew.
    let next = d.poll(at(20_000));
    assert!(next.len() == 1 && next[0].broadcast);
    let pieces = d.address_broadcast(&next[0], workers(&["w1"]), at(20_000));
    assert_eq!(pieces.len(), 1);
    ended(&mut d, "b", piece_exec(&pieces[0]), true, 21_000);
    assert_eq!(d.state(&key("b")).unwrap().success_count, 1);
}

#[test]
fn a_broadcast_fire_without_a_live_worker_fails_at_once_and_says_why() {
    let mut d = one_task("b", BROADCAST);
    d.upsert(
        key("after"),
        spec("after", r#"{"handler":"log","depends_on":[{"task":"b"}]}"#),
        5,
        None,
        at(0),
    );
    let fire = d.poll(at(10_000));
    assert!(d
        .address_broadcast(&fire[0], Vec::new(), at(10_000))
        .is_empty());
    let st = d.state(&key("b")).unwrap();
    assert_eq!((st.success_count, st.failure_count), (0, 1));
    assert_eq!(
        st.last_error.as_deref(),
        Some("no live worker serves queue default")
    );
    assert!(st.fanouts.is_empty());
    assert_ne!(st.status, TaskStatus::Running);
    let notices = d.take_notices();
    assert!(
        notices
            .iter()
            .any(|n| matches!(n, Notice::NoLiveWorker { reason, fire_at, .. }
            if reason == "no live worker serves queue default" && *fire_at == at(10_000))),
        "{notices:?}"
    );
    // The chain sees a failed step: its child does not run on success only.
    assert!(d.poll(at(10_100)).is_empty());
}

#[test]
fn a_new_leader_sends_a_broadcast_s_open_pieces_to_the_same_workers() {
    let mut old = one_task("b", BROADCAST);
    let fire = old.poll(at(10_000));
    let pieces = old.address_broadcast(&fire[0], workers(&["w1", "w2", "w3"]), at(10_000));
    ended(&mut old, "b", piece_exec(&pieces[1]), true, 11_000);
    let written = old
        .take_state_writes(UtcMillis::MAX)
        .into_iter()
        .find_map(|(_, s)| s)
        .unwrap();
    let mut new = Dispatcher::new(DispatcherConfig::default(), at(12_000));
    new.upsert(key("b"), spec("b", BROADCAST), 5, Some(written), at(12_000));
    let again = new.poll(at(12_000));
    assert!(again.iter().all(|s| !s.broadcast), "no new listing");
    let ids: Vec<ExecutionId> = again.iter().map(piece_exec).collect();
    assert_eq!(ids, [piece_exec(&pieces[0]), piece_exec(&pieces[2])]);
    let to: Vec<&str> = again.iter().map(piece_worker).collect();
    assert_eq!(to, ["w1", "w3"]);
    for s in &again {
        ended(&mut new, "b", piece_exec(s), true, 13_000);
    }
    let st = new.state(&key("b")).unwrap();
    assert_eq!((st.success_count, st.failure_count), (1, 0));
}

#[test]
fn a_broadcast_fire_replayed_without_its_progress_keeps_its_fanout_id() {
    let mut old = one_task("b", BROADCAST);
    // Written before the fire; the leader dies after sending it, before writing again.
    let before = old
        .take_state_writes(UtcMillis::MAX)
        .into_iter()
        .find_map(|(_, s)| s)
        .unwrap();
    let fire = old.poll(at(10_000));
    let sent = old.address_broadcast(&fire[0], workers(&["w1", "w2"]), at(10_000));
    let mut new = Dispatcher::new(DispatcherConfig::default(), at(12_000));
    new.upsert(key("b"), spec("b", BROADCAST), 5, Some(before), at(12_000));
    let replay = new.poll(at(12_000));
    assert_eq!(replay.len(), 1);
    assert_eq!(
        replay[0].broadcast_fanout_id(),
        fire[0].broadcast_fanout_id(),
        "the same fire"
    );
    // Addressed to the workers the first leader fixed: the same executions, duplicates.
    let again = new.address_broadcast(&replay[0], workers(&["w2", "w1"]), at(12_000));
    let ids: Vec<ExecutionId> = again.iter().map(piece_exec).collect();
    assert_eq!(ids, sent.iter().map(piece_exec).collect::<Vec<_>>());
    let to: Vec<&str> = again.iter().map(piece_worker).collect();
    assert_eq!(to, ["w1", "w2"]);
}

/// etcd puts per one-shot execution when finals go to the ledger: `tasks` `at` one-shots
/// registered while leading, due over 2 s, 10 ms executions, flushes every 500 ms. Returns
/// (first-state puts per task, puts per execution, the finals as the ledger holds them).
fn one_shot_puts(tasks: usize) -> (f64, f64, Vec<(Arc<TaskKey>, TaskState)>) {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    for i in 0..tasks {
        let id = format!("o{i:05}");
        let due = 1_000 + (i as i64 * 2_000) / tasks as i64;
        let json = format!(r#"{{"handler":"log","schedule":{{"at":"{}"}}}}"#, at(due));
        d.upsert(key(&id), spec(&id, &json), 5, None, at(0));
    }
    let puts = |w: &Writes| {
        let states = w.states.iter().filter(|(_, s)| s.is_some()).count();
        let sheets =
            crate::finals::sheets(w.finals.iter(), |(k, _)| crate::finals::bucket(k), |_| 300)
                .len();
        states + sheets
    };
    let first = puts(&d.take_writes(at(0)));
    let mut events: Vec<(i64, TaskKey, u128, ExecutionEvent)> = Vec::new();
    let (mut writes, mut executions, mut next_exec) = (0usize, 0usize, 0u128);
    let mut ledger = Vec::new();
    for t in (10..=10_000).step_by(10) {
        for dispatch in d.poll(at(t)) {
            d.on_enqueued(&dispatch, EnqueueOutcome::Enqueued, at(t));
            next_exec += 1;
            let k = (*dispatch.key).clone();
            events.push((
                t + 5,
                k.clone(),
                next_exec,
                ExecutionEvent::Started { at: at(t + 5) },
            ));
            let end = crate::execution::AttemptEnd::succeeded();
            events.push((
                t + 15,
                k,
                next_exec,
                ExecutionEvent::Finished {
                    at: at(t + 15),
                    end,
                },
            ));
        }
        let (due, later): (Vec<_>, Vec<_>) = events.into_iter().partition(|e| e.0 <= t);
        events = later;
        for (_, k, exec, event) in due {
            executions += usize::from(matches!(event, ExecutionEvent::Finished { .. }));
            d.on_execution(&k, ExecutionId::from_u128(exec), 0, &event, at(t));
        }
        if t % 500 == 0 {
            let w = d.take_writes(at(t));
            writes += puts(&w);
            ledger.extend(w.finals);
        }
    }
    assert_eq!(executions, tasks);
    (
        first as f64 / tasks as f64,
        writes as f64 / executions as f64,
        ledger,
    )
}

#[test]
fn one_shot_finals_cost_a_fifth_of_a_put_and_an_at_one_shot_no_first_state() {
    let (first, per_execution, ledger) = one_shot_puts(4_000);
    println!(
        "first-state puts per task {first:.3}; puts per one-shot execution {per_execution:.3}"
    );
    assert_eq!(
        first, 0.0,
        "an `at` one-shot's first state is implied by its spec"
    );
    assert!(
        per_execution <= 0.2,
        "{per_execution} puts per one-shot execution"
    );
    assert_eq!(ledger.len(), 4_000, "every final reaches the ledger");
    assert!(ledger
        .iter()
        .all(|(_, s)| s.status == TaskStatus::Success && s.fire_count == 1));
    // A new leader with the ledger's finals fires none again and writes nothing.
    let mut next = Dispatcher::new(DispatcherConfig::default(), at(20_000));
    for (k, state) in ledger {
        let id = k.id.to_string();
        let due = state.last_fire_at.unwrap();
        let json = format!(r#"{{"handler":"log","schedule":{{"at":"{due}"}}}}"#);
        next.upsert(k, spec(&id, &json), 5, Some(state), at(20_000));
    }
    assert!(
        run(&mut next, 20_000, 30_000).is_empty(),
        "nothing fires twice"
    );
    assert!(next.take_writes(UtcMillis::MAX).is_empty());
    // A `delay` one-shot's first state holds its anchor: written.
    let mut d = one_task("d", r#"{"handler":"log","schedule":{"delay":"1h"}}"#);
    assert_eq!(d.take_writes(at(0)).states.len(), 1);
}

#[test]
fn a_fixed_spec_writes_its_state_over_the_invalid_one() {
    let json = format!(
        r#"{{"handler":"log","schedule":{{"at":"{}"}}}}"#,
        at(60_000)
    );
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    d.mark_invalid(key("a"), 4, vec![FieldError::new("handler", "bad")], at(0));
    assert_eq!(d.take_writes(at(0)).states.len(), 1, "INVALID is written");
    d.upsert(key("a"), spec("a", &json), 5, None, at(10));
    let w = d.take_writes(at(10));
    assert_eq!(w.states.len(), 1, "SCHEDULED replaces the stored INVALID");
    // Deleted and registered again before the delete was written: the old state is still
    // stored, so the new one is written over it.
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    let mut old = TaskState::new(3, at(0), at(0));
    old.status = TaskStatus::Success;
    old.fire_count = 1;
    d.upsert(key("c"), spec("c", &json), 3, Some(old), at(0));
    d.take_writes(at(0));
    d.remove(&key("c"), at(5));
    d.upsert(key("c"), spec("c", &json), 6, None, at(10));
    let w = d.take_writes(at(10));
    assert_eq!(w.states.len(), 1);
    assert_eq!(
        w.states[0].1.as_ref().unwrap().status,
        TaskStatus::Scheduled
    );
    // One found INVALID by a takeover, fixed later: the same.
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    d.keep_invalid(key("b"));
    d.upsert(key("b"), spec("b", &json), 5, None, at(10));
    assert_eq!(d.take_writes(at(10)).states.len(), 1);
}

/// Fires `id` (every second) for `secs` seconds, each fire ending at once as `outcome`
/// says for its number, flushing every 100 ms; returns the times (ms) its state was written.
fn runs_and_writes(
    d: &mut Dispatcher,
    id: &str,
    secs: i64,
    outcome: impl Fn(i64) -> AttemptOutcome,
) -> Vec<i64> {
    let mut written = Vec::new();
    let mut fires = 0;
    let mut t = 0;
    while t <= secs * 1000 {
        for x in d.poll(at(t)) {
            d.on_enqueued(&x, EnqueueOutcome::Enqueued, at(t));
            fires += 1;
            let seq = u64::try_from(fires).unwrap();
            let end = finished(
                outcome(fires),
                Some("boom".into()).filter(|_| outcome(fires) != AttemptOutcome::Succeeded),
                None,
            );
            let execution = ExecutionId::for_fire(&key(id), x.fire_at);
            d.on_event(
                &key(id),
                EventPosition { ms: 1, seq },
                execution,
                0,
                &end,
                at(t + 5),
            );
            assert!(
                d.write_pending(&key(id)),
                "an applied event waits for its write"
            );
        }
        if t % 100 == 0 && !d.take_state_writes(at(t)).is_empty() {
            written.push(t);
        }
        t += 10;
    }
    written
}

#[test]
fn a_periodic_task_that_keeps_succeeding_is_written_once_per_routine_delay() {
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    let written = runs_and_writes(&mut d, "a", 100, |_| AttemptOutcome::Succeeded);
    // Its first state (SCHEDULED), then one write per 10 s: each waits the routine delay
    // from the first run after the write before, which comes up to a fire (1 s) later.
    assert!(
        written.len() <= 11,
        "{} writes for 100 fires: {written:?}",
        written.len()
    );
    assert!(written.len() >= 9, "still written: {written:?}");
    for w in written.windows(2) {
        assert!(
            w[1] - w[0] <= 11_100,
            "a routine write waited past its delay: {written:?}"
        );
    }
    // What waits is taken by the term's last flush, with every run counted.
    let last = d.take_state_writes(UtcMillis::MAX);
    let state = d.state(&key("a")).unwrap();
    assert_eq!((state.fire_count, state.success_count), (100, 100));
    assert!(last.len() <= 1);
    assert!(!d.write_pending(&key("a")));
}

#[test]
fn a_failure_and_the_success_after_it_are_written_at_once() {
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    // Runs 30 and 31 fail; 32, the first success after them, is news too.
    let failing = |n| {
        if n == 30 || n == 31 {
            AttemptOutcome::Failed
        } else {
            AttemptOutcome::Succeeded
        }
    };
    let written = runs_and_writes(&mut d, "a", 40, failing);
    for run in [30, 31, 32] {
        // Run n fires at n s and ends 5 ms later: written at the next 100 ms flush.
        let at_once = written
            .iter()
            .any(|w| (run * 1000..=run * 1000 + 100).contains(w));
        assert!(at_once, "run {run} written at once: {written:?}");
    }
}

#[test]
fn without_a_routine_delay_every_run_is_written() {
    let config = DispatcherConfig {
        routine_write_delay: std::time::Duration::ZERO,
        ..DispatcherConfig::default()
    };
    let mut d = Dispatcher::new(config, at(0));
    let every = r#"{"handler":"log","schedule":{"every":"1s"}}"#;
    d.upsert(key("a"), spec("a", every), 5, None, at(0));
    let written = runs_and_writes(&mut d, "a", 20, |_| AttemptOutcome::Succeeded);
    assert_eq!(written.len(), 21, "its first state, then every run");
}

#[test]
fn a_task_firing_less_often_than_the_routine_delay_and_a_first_success_are_written_at_once() {
    // Every 20 s: no run follows within the delay to share a write with, so each goes now.
    let mut d = one_task("a", r#"{"handler":"log","schedule":{"every":"20s"}}"#);
    let written = runs_and_writes(&mut d, "a", 100, |_| AttemptOutcome::Succeeded);
    assert_eq!(written, [0, 20_000, 40_000, 60_000, 80_000, 100_000]);
    // Every second: the first success is news (written at once), the next ones wait.
    let mut d = one_task("b", r#"{"handler":"log","schedule":{"every":"1s"}}"#);
    let written = runs_and_writes(&mut d, "b", 3, |_| AttemptOutcome::Succeeded);
    assert_eq!(written, [0, 1_000]);
}
