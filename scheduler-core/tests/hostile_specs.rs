//! Task specs as an attacker writes them: any bytes, any JSON, and valid specs with one field
//! replaced by anything. Parsing never panics, and a spec it accepts holds every bound the
//! typed options state, compiles, and gives retry waits and deadlines without overflow.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ax_scheduler_core::options::TaskOptions;
use ax_scheduler_core::retry::{decide, RetryDecision};
use ax_scheduler_core::{TaskSpec, UtcMillis};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Any JSON value, nested a few levels, with the numbers and strings that break code:
/// extremes, negative zero, huge durations, unit suffixes, empty text.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop_oneof![
            Just("18446744073709551615s".to_owned()),
            Just("0s".to_owned()),
            Just("-1s".to_owned()),
            Just("1ns".to_owned()),
            Just("9999999999999y".to_owned()),
            Just("".to_owned()),
            Just("* * * * *".to_owned()),
            Just("2026-01-01T00:00:00Z".to_owned()),
            Just("${secret:X}".to_owned()),
            "\\PC{0,24}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid spec touching every section.
fn base() -> Value {
    json!({
        "handler": "http",
        "schedule": {"every": "1m"},
        "http": {"url": "https://example.com/hook", "headers": {"Authorization": "Bearer x"}},
        "queue": "q",
        "priority": 5,
        "timeout": "30s",
        "retry": {"max_retries": 3, "initial_interval": "1s", "max_interval": "1m",
                  "multiplier": 2, "jitter": 0.2, "max_elapsed": "1h"},
        "misfire": "fire_once",
        "overlap": "forbid",
        "expect_success_within": "10m",
        "labels": {"team": "a"},
        "concurrency": {"key": "k-{payload.x}", "max": 2},
        "payload": {"x": 1}
    })
}

/// Paths of `base` a mutation may replace (top-level fields and section fields).
const PATHS: &[&str] = &[
    "handler",
    "schedule",
    "schedule.every",
    "http",
    "http.url",
    "http.headers",
    "queue",
    "priority",
    "timeout",
    "retry",
    "retry.max_retries",
    "retry.initial_interval",
    "retry.max_interval",
    "retry.multiplier",
    "retry.jitter",
    "retry.max_elapsed",
    "misfire",
    "overlap",
    "expect_success_within",
    "labels",
    "concurrency",
    "concurrency.max",
    "concurrency.key",
    "payload",
    "fanout",
    "depends_on",
    "idempotency_key",
    "version",
    "created_at",
    "paused",
];

fn replace(doc: &mut Value, path: &str, with: Value) {
    let mut at = doc;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            if let Value::Object(map) = at {
                map.insert(part.to_owned(), with);
            }
            return;
        }
        at = &mut at[part];
    }
}

/// What every accepted spec must hold.
fn holds_its_bounds(spec: &TaskSpec) {
    spec.options()
        .check()
        .expect("an accepted spec within the options' bounds");
    let compiled = spec
        .schedule
        .compile()
        .expect("an accepted schedule compiles");
    let now = UtcMillis(1_767_225_600_000);
    let _ = compiled.next_after(now, now);
    let _ = now.add(spec.timeout);
    if let Some(d) = spec.expect_success_within {
        let _ = now.add(d);
    }
    let mut rng = rand::rng();
    for attempt in [0, 1, spec.retry.max_retries.saturating_sub(1)] {
        if let RetryDecision::RetryAt { due, .. } = decide(&spec.retry, attempt, now, now, &mut rng)
        {
            assert!(due >= now);
        }
    }
    let mut again = TaskSpec::from_json(&spec.to_json(), &spec.namespace, &spec.id).unwrap();
    // The payload is the user's JSON, passed through: serde_json reads a float back to the
    // nearest double, which may differ in its last bit from the one written.
    again.payload = spec.payload.clone();
    assert_eq!(&again, spec, "to_json then from_json is the identity");
    let _ = TaskOptions::default();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_are_refused_or_accepted_without_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(spec) = TaskSpec::from_json(&bytes, "ns", "t") {
            holds_its_bounds(&spec);
        }
    }

    #[test]
    fn any_json_document_is_refused_or_accepted_without_a_panic(doc in any_json()) {
        let bytes = serde_json::to_vec(&doc).unwrap();
        if let Ok(spec) = TaskSpec::from_json(&bytes, "ns", "t") {
            holds_its_bounds(&spec);
        }
    }

    #[test]
    fn a_valid_spec_with_fields_replaced_by_anything_holds_its_bounds(
        edits in prop::collection::vec((0..PATHS.len(), any_json()), 1..4)
    ) {
        let mut doc = base();
        for (i, with) in edits {
            replace(&mut doc, PATHS[i], with);
        }
        let bytes = serde_json::to_vec(&doc).unwrap();
        match TaskSpec::from_json(&bytes, "ns", "t") {
            Ok(spec) => holds_its_bounds(&spec),
            Err(errors) => prop_assert!(!errors.is_empty()),
        }
    }
}
