//! Execution messages as something other than ax may leave them in Redis: any bytes, and a
//! valid message with fields replaced by anything. Decoding never panics, and a message it
//! accepts gives its timeout, retry wait and deadline arithmetic without overflow.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ax_queue::ExecutionMessage;
use ax_scheduler_core::retry::{decide, RetryDecision};
use ax_scheduler_core::UtcMillis;
use proptest::prelude::*;
use serde_json::{json, Value};

fn any_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
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
            Just("1ns".to_owned()),
            Just("".to_owned()),
            "\\PC{0,16}",
        ]
        .prop_map(Value::String),
        prop::collection::btree_map("[a-z_]{1,12}", any::<u64>().prop_map(|n| json!(n)), 0..3)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
    ]
}

fn message() -> Value {
    let spec = ax_testkit::spec("t", "default", "http");
    let m = ExecutionMessage::for_fire(&spec, UtcMillis(1_000), UtcMillis(1_001), 3);
    serde_json::from_str(&m.to_json().unwrap()).unwrap()
}

/// Every field of the message, and each of its retry policy's.
fn paths(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Value::Object(map) = doc {
        for (k, v) in map {
            out.push(k.clone());
            if let Value::Object(inner) = v {
                out.extend(inner.keys().map(|i| format!("{k}.{i}")));
            }
        }
    }
    out
}

fn replace(doc: &mut Value, path: &str, with: Value) {
    match path.split_once('.') {
        Some((outer, inner)) => {
            if let Value::Object(map) = &mut doc[outer] {
                map.insert(inner.to_owned(), with);
            }
        }
        None => {
            if let Value::Object(map) = doc {
                map.insert(path.to_owned(), with);
            }
        }
    }
}

/// The arithmetic a worker does on a message it took.
fn worker_arithmetic(m: &ExecutionMessage) {
    let now = UtcMillis(1_767_225_600_000);
    let _ = now.add(Duration::from_millis(m.timeout_ms));
    let mut rng = rand::rng();
    for attempt in [0, m.attempt, m.retry.max_retries] {
        if let RetryDecision::RetryAt { due, .. } =
            decide(&m.retry, attempt, m.first_attempt_at, now, &mut rng)
        {
            assert!(due >= now);
        }
    }
    let _ = m.to_json().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_text_is_refused_or_decoded_without_a_panic(text in "\\PC{0,256}") {
        if let Ok(m) = ExecutionMessage::from_json(&text) {
            worker_arithmetic(&m);
        }
    }

    #[test]
    fn a_message_with_fields_replaced_by_anything_is_safe_to_work_on(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any_leaf()), 1..4)
    ) {
        let mut doc = message();
        let all = paths(&doc);
        for (i, with) in edits {
            replace(&mut doc, &all[i.index(all.len())], with);
        }
        if let Ok(m) = ExecutionMessage::from_json(&doc.to_string()) {
            worker_arithmetic(&m);
        }
    }

    #[test]
    fn huge_retry_intervals_never_reach_a_worker(secs in any::<u64>(), multiplier in 1.0f64..100.0) {
        let mut doc = message();
        doc["retry"]["initial_interval"] = json!(format!("{secs}s"));
        doc["retry"]["max_interval"] = json!(format!("{secs}s"));
        doc["retry"]["multiplier"] = json!(multiplier);
        match ExecutionMessage::from_json(&doc.to_string()) {
            Ok(m) => {
                prop_assert!(m.retry.max_interval <= ax_scheduler_core::options::MAX_RETRY_INTERVAL);
                worker_arithmetic(&m);
            }
            Err(e) => prop_assert!(!e.is_retryable()),
        }
    }
}
