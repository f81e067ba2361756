//! The synchronous steps of the fire path on hand-built dispatchers: what enqueue outcomes
//! do to the dispatcher, and which alerts its notices raise.

use std::sync::Arc;

use ax_alerting::AlertKind;
use ax_scheduler_core::{AttemptOutcome, DispatcherConfig, TaskSpec};

use super::*;

const T0: i64 = 1_800_000_000_000;

fn at(ms: i64) -> UtcMillis {
    UtcMillis(T0 + ms)
}

fn dispatcher(tasks: &[(&str, &str)]) -> Dispatcher {
    let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
    for (id, json) in tasks {
        let spec = TaskSpec::from_json(json.as_bytes(), "ns", id).unwrap();
        d.upsert(TaskKey::new("ns", *id), spec, 1, None, at(0));
    }
    d
}

fn messages(dispatches: &[Dispatch], now: UtcMillis) -> Vec<ExecutionMessage> {
    dispatches
        .iter()
        .map(|d| ExecutionMessage::for_dispatch(d, now, 7))
        .collect()
}

fn trigger(id: &str, execution_id: ExecutionId) -> PendingTrigger {
    PendingTrigger {
        namespace: "ns".into(),
        id: id.into(),
        execution_id,
        requested_at: None,
        payload: None,
        idempotency_key: None,
        backfill_of: None,
        requested_by: None,
        mod_revision: 1,
    }
}

#[test]
fn enqueued_fires_are_counted_and_late_ones_alert() {
    let mut d = dispatcher(&[
        (
            "a",
            r#"{"handler":"log","schedule":{"every":"1s"},"queue":"qa"}"#,
        ),
        ("b", r#"{"handler":"log","schedule":{"every":"1s"}}"#),
    ]);
    // Polled 3.5 s late (below the stall threshold): the 1 s fire of each, beyond the 3 s
    // alert threshold.
    let now = at(4500);
    let dispatches = d.poll(now);
    assert_eq!(dispatches.len(), 2);
    let msgs = messages(&dispatches, now);
    let effects = apply_outcomes(
        &mut d,
        &dispatches,
        &msgs,
        &[EnqueueOutcome::Enqueued, EnqueueOutcome::Duplicate],
        &mut HashMap::new(),
        Duration::from_secs(3),
        now,
    );
    assert_eq!(
        effects.duplicates.len(),
        1,
        "a duplicate's outcome is looked up"
    );
    assert_eq!(
        effects.scheduled.len(),
        1,
        "a duplicate is not scheduled again"
    );
    assert_eq!(effects.alerts.len(), 1);
    assert_eq!(effects.alerts[0].kind, AlertKind::ScheduleDelay);
    assert!(effects.fenced.is_none());
}

#[test]
fn a_fenced_outcome_ends_the_round_and_the_term() {
    let mut d = dispatcher(&[
        ("a", r#"{"handler":"log","schedule":{"every":"1s"}}"#),
        ("b", r#"{"handler":"log","schedule":{"every":"1s"}}"#),
    ]);
    let dispatches = d.poll(at(1000));
    let msgs = messages(&dispatches, at(1000));
    let effects = apply_outcomes(
        &mut d,
        &dispatches,
        &msgs,
        &[
            EnqueueOutcome::Fenced { newest: 9 },
            EnqueueOutcome::Enqueued,
        ],
        &mut HashMap::new(),
        Duration::from_secs(5),
        at(1000),
    );
    assert_eq!(effects.fenced, Some(9));
    assert!(
        effects.scheduled.is_empty(),
        "nothing after the fence counts"
    );
}

#[test]
fn a_run_now_trigger_is_consumed_once_its_execution_is_queued_not_while_held() {
    let mut d = dispatcher(&[(
        "a",
        r#"{"handler":"log","schedule":{"every":"1h"},"overlap":"forbid"}"#,
    )]);
    let id = ax_queue::new_execution_id();
    assert!(d.trigger(&TaskKey::new("ns", "a"), id, at(10)));
    let mut pending = HashMap::from([(id, trigger("a", id))]);
    let dispatches = d.poll(at(10));
    assert_eq!(dispatches.len(), 1);
    let msgs = messages(&dispatches, at(10));
    assert_eq!(msgs[0].execution_id, id, "the trigger names the execution");
    let effects = apply_outcomes(
        &mut d,
        &dispatches,
        &msgs,
        &[EnqueueOutcome::Enqueued],
        &mut pending,
        Duration::from_secs(5),
        at(10),
    );
    assert_eq!(effects.done_triggers.len(), 1);
    assert!(pending.is_empty());
    assert!(effects.alerts.is_empty());
}

#[test]
fn notices_raise_the_alerts_a_person_needs() {
    let key = Arc::new(TaskKey::new("ns", "a"));
    let alerts = notice_alerts(
        vec![
            Notice::Misfired {
                key: Arc::clone(&key),
                missed: 10,
                skipped: 9,
                beyond_window: 2,
                oldest: Some(at(0)),
            },
            Notice::CircuitOpened {
                key: Arc::clone(&key),
                failures: 4,
                executions: 4,
            },
            Notice::CircuitClosed { key },
        ],
        Duration::from_secs(300),
        at(600_000),
    );
    let kinds: Vec<AlertKind> = alerts.now.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        [
            AlertKind::MisfireSkipped,
            AlertKind::ScheduleDelay,
            AlertKind::CircuitOpen
        ]
    );
    assert!(alerts.after_write.is_empty());
}

#[test]
fn a_failed_attempt_alerts_after_its_state_is_written_counting_from_one() {
    let key = TaskKey::new("ns", "t");
    let execution = ExecutionId::from_u128(0x0192_0000_0000_7000_8000_0000_0000_002a);
    let mut retried = AttemptEnd::new(AttemptOutcome::Failed, Some("HTTP 500".into()));
    retried.retry_at = Some(at(9_000));
    let alerts = notice_alerts(
        vec![Notice::AttemptFailed {
            key: Arc::new(key.clone()),
            execution,
            attempt: 0,
            at: at(3_000),
            end: retried,
        }],
        Duration::from_secs(300),
        at(3_100),
    );
    assert!(alerts.now.is_empty(), "{:?}", alerts.now);
    let [failed] = &alerts.after_write[..] else {
        panic!("{:?}", alerts.after_write)
    };
    assert_eq!(failed.kind, AlertKind::TaskFailed);
    assert_eq!(failed.level, ax_alerting::Level::Warn);
    assert_eq!(failed.message, "Attempt 1 failed: HTTP 500");
    assert_eq!(failed.fields["attempt"], "1");
    assert_eq!(
        failed.fields["execution_id"],
        "01920000-0000-7000-8000-00000000002a"
    );
    assert_eq!(failed.at, at(3_000), "observed when the attempt ended");

    // The last attempt, timed out: a failure and a dead letter.
    let exhausted = AttemptEnd::new(AttemptOutcome::TimedOut, Some("no completion".into()));
    let alerts = failure_alerts(&key, execution, 2, &exhausted, at(5_000));
    let kinds: Vec<_> = alerts.iter().map(|a| (a.kind, a.level)).collect();
    assert_eq!(
        kinds,
        [
            (AlertKind::TaskFailed, ax_alerting::Level::Warn),
            (AlertKind::TaskDeadLettered, ax_alerting::Level::Critical)
        ]
    );
    assert_eq!(alerts[0].fields["attempt"], "3");
    assert_eq!(alerts[1].fields["attempts"], "3");
    assert_eq!(
        alerts[1].message,
        "Gave up after 3 attempts; last error: no completion"
    );
    assert_eq!(alerts[1].title, "Task dead-lettered: ns/t");

    // Ends that are no failure raise nothing.
    for end in [
        AttemptEnd::succeeded(),
        AttemptEnd::new(AttemptOutcome::Killed, Some("replaced".into())),
        AttemptEnd::new(AttemptOutcome::Released, None),
    ] {
        assert!(
            failure_alerts(&key, execution, 0, &end, at(5_000)).is_empty(),
            "{end:?}"
        );
    }
}
