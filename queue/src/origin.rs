//! How an execution started: the schedule, an upstream task, or a person (a run-now, a
//! backfill, a dead-letter requeue), with who asked and, for a run-now, the payload given.
//!
//! It rides in the message's [`crate::Lineage`], so every attempt's history entry carries it
//! without a field of its own, and the lateness the schedule is judged by is told apart from
//! runs a person started ([`Origin::is_scheduled`]). A message written before origins were
//! recorded has none; [`crate::ExecutionMessage::origin`] derives it from the older flags.

use ax_scheduler_core::ExecutionId;
use serde::{Deserialize, Serialize};

/// Largest payload (its JSON text, bytes) an origin keeps; a larger one is kept as its size.
pub const ORIGIN_PAYLOAD_MAX: usize = 4096;

/// What started an execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OriginKind {
    /// A fire of the task's own schedule (a catch-up of a missed fire included).
    #[default]
    Schedule,
    /// An upstream task's success, in a chain of dependent tasks.
    Parent,
    /// A run-now asked for by hand (`ax task trigger`, the API, the console, the SDK).
    Manual,
    /// A backfill of a past fire.
    Backfill,
    /// A dead letter put back (`ax dlq requeue`).
    Requeue,
    /// Submitted to run once at an instant, with no task (`ax schedule`, the SDK's
    /// `schedule`): kept in Redis until due (`scheduled.rs`).
    Submitted,
}

impl OriginKind {
    /// The word shown in the CLI and the console.
    pub fn as_str(self) -> &'static str {
        match self {
            OriginKind::Schedule => "schedule",
            OriginKind::Parent => "parent",
            OriginKind::Manual => "manual",
            OriginKind::Backfill => "backfill",
            OriginKind::Requeue => "requeue",
            OriginKind::Submitted => "submitted",
        }
    }
}

/// How an execution started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// What started it.
    pub kind: OriginKind,
    /// Who asked, for a run by hand: the API token's name or `cli:<user>@<host>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// For a requeue: the dead-lettered execution it was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_of: Option<ExecutionId>,
    /// For a run-now with a payload of its own: that payload, when its JSON text is at most
    /// [`ORIGIN_PAYLOAD_MAX`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    /// The size of a run-now's own payload (its JSON text, bytes), kept also when the payload
    /// itself is too large to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_bytes: Option<u64>,
}

impl Origin {
    /// An origin of `kind`, nobody named.
    pub fn of(kind: OriginKind) -> Self {
        Origin {
            kind,
            ..Origin::default()
        }
    }

    /// Whether it was due at an instant set ahead (the schedule, an upstream task, a
    /// submission for later): the runs whose lateness says how well ax keeps time. A
    /// person's runs are due when asked for and kept apart.
    pub fn is_scheduled(&self) -> bool {
        matches!(
            self.kind,
            OriginKind::Schedule | OriginKind::Parent | OriginKind::Submitted
        )
    }

    /// Keeps `payload` (a run-now's own), or only its size when it is larger than
    /// [`ORIGIN_PAYLOAD_MAX`].
    pub fn with_payload(mut self, payload: &serde_json::Value) -> Self {
        let bytes = serde_json::to_vec(payload).map_or(0, |v| v.len());
        self.payload_bytes = Some(u64::try_from(bytes).unwrap_or(u64::MAX));
        self.payload = (bytes <= ORIGIN_PAYLOAD_MAX).then(|| payload.clone());
        self
    }

    /// One line for people: `manual by cli:ana@host`, `requeue of 0190…`.
    pub fn describe(&self) -> String {
        let mut text = self.kind.as_str().to_owned();
        if let Some(of) = self.requeue_of {
            text.push_str(&format!(" of {of}"));
        }
        if let Some(actor) = &self.actor {
            text.push_str(&format!(" by {actor}"));
        }
        if let Some(bytes) = self.payload_bytes {
            text.push_str(&format!(", own payload ({bytes} bytes)"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_large_payload_is_kept_as_its_size() {
        let small = Origin::of(OriginKind::Manual).with_payload(&json!({"order": 7}));
        assert_eq!(small.payload, Some(json!({"order": 7})));
        assert_eq!(small.payload_bytes, Some(11));
        let big = json!({"blob": "x".repeat(ORIGIN_PAYLOAD_MAX)});
        let large = Origin::of(OriginKind::Manual).with_payload(&big);
        assert_eq!(large.payload, None);
        assert!(large.payload_bytes.unwrap() > ORIGIN_PAYLOAD_MAX as u64);
    }

    #[test]
    fn only_runs_due_at_an_instant_set_ahead_count_as_scheduled() {
        let scheduled: Vec<bool> = [
            OriginKind::Schedule,
            OriginKind::Parent,
            OriginKind::Manual,
            OriginKind::Backfill,
            OriginKind::Requeue,
            OriginKind::Submitted,
        ]
        .into_iter()
        .map(|k| Origin::of(k).is_scheduled())
        .collect();
        assert_eq!(scheduled, [true, true, false, false, false, true]);
    }

    #[test]
    fn described_for_people() {
        let id: ExecutionId = "0190a0b0-0000-7000-8000-000000000000".parse().unwrap();
        let o = Origin {
            kind: OriginKind::Requeue,
            actor: Some("ops".into()),
            requeue_of: Some(id),
            payload: None,
            payload_bytes: None,
        };
        assert_eq!(
            o.describe(),
            "requeue of 0190a0b0-0000-7000-8000-000000000000 by ops"
        );
    }

    #[test]
    fn each_attempt_is_late_against_its_own_due_instant() {
        use crate::ExecutionMessage;
        use ax_scheduler_core::{TaskSpec, UtcMillis};
        let spec = TaskSpec::from_json(
            br#"{"handler": "log", "schedule": {"every": "1m"}}"#,
            "ns",
            "t",
        )
        .unwrap();
        let fire = UtcMillis(1_000_000);
        let first = ExecutionMessage::for_fire(&spec, fire, UtcMillis(1_000_050), 1);
        assert_eq!(first.origin().kind, OriginKind::Schedule);
        assert_eq!(
            first.attempt_due(),
            fire,
            "a scheduled first attempt: its fire"
        );
        // A retry is due when its wait ended, not at the fire an hour before.
        let retry = first.next_attempt("boom", UtcMillis(4_600_000));
        assert_eq!(retry.attempt_due(), UtcMillis(4_600_000));
        // A run by hand is due when asked for; a backfill too, though it stands for an
        // older fire.
        let mut backfill = ExecutionMessage::run_now(&spec, UtcMillis(9_000_000), 1);
        backfill.with_run_now_request(None, None, Some(fire));
        backfill.requested_by(Some("ops".into()));
        assert_eq!(backfill.origin().kind, OriginKind::Backfill);
        assert_eq!(backfill.origin().actor.as_deref(), Some("ops"));
        assert_eq!(backfill.attempt_due(), UtcMillis(9_000_000));
        // A requeue names its dead letter.
        let requeued = retry.fresh_copy(UtcMillis(9_500_000));
        assert_eq!(requeued.origin().requeue_of, Some(first.execution_id));
        assert_eq!(requeued.attempt_due(), UtcMillis(9_500_000));
        // A message written before origins were kept reads from its flags.
        let mut legacy = backfill.clone();
        legacy.lineage.origin = None;
        assert_eq!(legacy.origin().kind, OriginKind::Backfill);
    }
}
