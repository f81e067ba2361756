//! The pure parts of awaiting executions: completion tokens and their claims (the scripts
//! run against Redis in the integration tests).

use super::*;

#[test]
fn tokens_name_their_attempt_and_queue_and_hide_their_secret() {
    let t = CompletionToken::issue("jobs.long", 3);
    let claim = TokenClaim::parse(t.expose()).unwrap();
    assert_eq!(
        claim,
        TokenClaim {
            attempt: 3,
            queue: "jobs.long".into()
        }
    );
    assert_ne!(t, CompletionToken::issue("jobs.long", 3));
    assert!(!format!("{t:?}").contains(&t.expose()[8..20]));
    assert_eq!(t.hash().len(), 64);
    assert_ne!(t.hash(), t.expose());
}

#[test]
fn malformed_tokens_claim_nothing() {
    let secret = "a".repeat(64);
    for bad in [
        String::new(),
        "axc".into(),
        format!("axc.x.{secret}.default"),
        format!("axd.0.{secret}.default"),
        format!("axc.0.{}.default", "a".repeat(63)),
        format!("axc.0.{}.default", "g".repeat(64)),
        format!("axc.0.{secret}.de{{f}}"),
        format!("axc.0.{secret}."),
    ] {
        assert_eq!(TokenClaim::parse(&bad), None, "{bad}");
    }
}

fn record(fields: &[(&str, &str)]) -> AwaitingRecord {
    AwaitingRecord::from_fields(
        "default",
        ExecutionId::from_u128(0),
        fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
    .unwrap()
}

#[test]
fn a_token_matches_only_its_own_attempt() {
    let t0 = CompletionToken::issue("default", 0);
    let t1 = CompletionToken::issue("default", 1);
    let r = record(&[
        ("attempt", "1"),
        ("state", "waiting"),
        ("t:0", &t0.hash()),
        ("t:1", &t1.hash()),
        ("end:0", "timed_out"),
    ]);
    assert!(r.token_matches(0, t0.expose()));
    assert!(r.token_matches(1, t1.expose()));
    assert!(!r.token_matches(1, t0.expose()));
    assert!(!r.token_matches(2, t1.expose()));
    assert!(!r.token_matches(1, ""));
    assert_eq!(r.state, AwaitingState::Waiting);
    assert_eq!(r.end_of(0), Some("timed_out"));
    assert_eq!(r.end_of(1), None);
}

#[test]
fn a_reported_end_is_retryable_unless_it_says_otherwise() {
    let end: ReportedEnd = serde_json::from_str(r#"{"status":"failed","at":1}"#).unwrap();
    assert!(end.retryable);
    assert_eq!(end.status.label(), "failed");
}
