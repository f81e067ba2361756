//! The pure parts of scheduled executions: a submission's checks, its message, and the
//! reference handed back (the scripts run against Redis in `tests/scheduled.rs`).

use std::time::Duration;

use ax_scheduler_core::{MisfirePolicy, TaskOptions, UtcMillis};
use proptest::prelude::*;
use serde_json::json;

use ax_scheduler_core::task::MAX_PAYLOAD_BYTES;

use super::*;

fn submission() -> Submission {
    Submission {
        namespace: "shop".into(),
        name: "close-unpaid-order".into(),
        handler: "orders.close".into(),
        payload: json!({"order": 42}),
        queue: "orders".into(),
        due: UtcMillis(1_000_000),
        options: TaskOptions::new()
            .priority(7)
            .timeout(Duration::from_secs(5)),
        requested_by: Some("shop-api".into()),
    }
}

#[test]
fn a_good_submission_has_no_problem_and_its_message_runs_the_handler_at_the_due_instant() {
    let s = submission();
    assert!(s.check().is_empty(), "{}", s.check());
    let id = ExecutionId::from_u128(9);
    let m = s.message(id, UtcMillis(500));
    assert_eq!(m.execution_id, id);
    assert_eq!(&*m.task_id, "@close-unpaid-order");
    assert_eq!(&*m.handler, "orders.close");
    assert_eq!(m.fire_at, UtcMillis(1_000_000));
    assert_eq!(
        m.attempt_due(),
        UtcMillis(1_000_000),
        "late against its due instant"
    );
    assert_eq!(m.priority, 7);
    assert_eq!(m.timeout_ms, 5_000);
    assert_eq!(m.origin().kind, OriginKind::Submitted);
    assert_eq!(m.origin().actor.as_deref(), Some("shop-api"));
    // Round trip through the stored form.
    assert_eq!(
        ExecutionMessage::from_json(&m.to_json().unwrap()).unwrap(),
        m
    );
}

#[test]
fn every_problem_of_a_submission_is_told_at_once() {
    let s = Submission {
        namespace: "bad ns".into(),
        name: String::new(),
        handler: String::new(),
        payload: json!("x".repeat(MAX_PAYLOAD_BYTES)),
        queue: "a{b}".into(),
        options: TaskOptions::new()
            .priority(12)
            .misfire(MisfirePolicy::Skip)
            .idempotency_key(""),
        ..submission()
    };
    let errors = s.check();
    for path in [
        "namespace",
        "name",
        "handler",
        "queue",
        "payload",
        "priority",
        "options",
    ] {
        assert!(errors.has(path), "{path} not reported in {errors}");
    }
}

#[test]
fn a_task_id_never_holds_the_scheduled_mark() {
    assert!(ax_scheduler_core::validate::check_name("@x").is_err());
}

proptest! {
    #[test]
    fn a_reference_reads_back_as_written(queue in "[a-z0-9._-]{1,20}(#p[0-9]{1,3})?", n: u128) {
        let r = ScheduledRef { queue, execution_id: ExecutionId::from_u128(n) };
        prop_assert_eq!(r.to_string().parse::<ScheduledRef>().unwrap(), r);
    }

    #[test]
    fn any_text_parses_or_is_refused_without_panicking(text in ".{0,80}") {
        let _ = text.parse::<ScheduledRef>();
    }
}

proptest! {
    /// What is left out of a stored form comes back as it was, for any options.
    #[test]
    fn a_stored_form_reads_back_as_the_message(
        priority in 0u8..=9,
        timeout_s in 1u64..=3600,
        retries in 0u32..=5,
        order in any::<i64>(),
    ) {
        let mut s = submission();
        s.payload = json!({"order": order});
        let retry = ax_scheduler_core::RetryPolicy {
            max_retries: retries,
            ..Default::default()
        };
        s.options = TaskOptions::new()
            .priority(priority)
            .timeout(Duration::from_secs(timeout_s))
            .retry(retry);
        let m = s.message(ExecutionId::from_u128(3), UtcMillis(77));
        let back = from_stored(&stored_form(&m).unwrap(), m.execution_id, m.fire_at, UtcMillis(77)).unwrap();
        prop_assert_eq!(back, m);
    }
}

#[test]
fn a_stored_form_leaves_out_what_the_promotion_writes_back() {
    let s = Submission {
        options: TaskOptions::new(),
        ..submission()
    };
    let m = s.message(ExecutionId::from_u128(3), UtcMillis(77));
    let stored = stored_form(&m).unwrap();
    for field in FILLED_AT_PROMOTION.iter().chain(&DEFAULTED) {
        assert!(
            !stored.contains(&format!("\"{field}\"")),
            "{field} in {stored}"
        );
    }
    assert!(stored.len() < 200, "{} bytes: {stored}", stored.len());
}
