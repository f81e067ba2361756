//! The vocabulary of executions, shared by every layer: how an enqueue went, how an attempt
//! ended, and the events a worker reports.
//!
//! Each concept exists once. The queue serializes these types as they are (in Redis messages,
//! worker events and history entries), the worker emits them, and the leader's dispatcher
//! consumes them, so nothing converts an outcome from one shape to another on its way.

use serde::{Deserialize, Serialize};

use crate::time::UtcMillis;

/// Longest error text ax stores or sends (task states, messages, history, dead letters,
/// alerts), in bytes. An error can echo user input of any size (a URL, a response): one
/// uncapped error written twice into a state once made a transaction larger than etcd
/// accepts, and every later state write of the term failed with it.
pub const MAX_ERROR_LEN: usize = 2048;

/// `error` fit to store and send: the URLs in it masked (user info and query values, see
/// [`crate::redact::mask_urls_in`]; a handler's error may quote the URL it failed on, with
/// its credentials), then cut to at most [`MAX_ERROR_LEN`] bytes (on a character boundary),
/// saying how much was cut. The one gate every attempt's error passes before it reaches a
/// state, a message, the history, a dead letter, a log line or an alert.
pub fn shown_error(error: String) -> String {
    let mut error = if error.contains("://") {
        crate::redact::mask_urls_in(&error)
    } else {
        error
    };
    if error.len() <= MAX_ERROR_LEN {
        return error;
    }
    let cut = error.len();
    // Room for the note; `is_char_boundary(0)` holds, so the search ends.
    let mut end = MAX_ERROR_LEN - 40;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    error.truncate(end);
    error.push_str(&format!("... ({} bytes cut)", cut - end));
    error
}

/// What the enqueue of one fire came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// Pushed to the queue.
    Enqueued,
    /// Already enqueued before (by this or an earlier leader): nothing pushed.
    Duplicate,
    /// The fire asked for `forbid` and the task's previous execution is still active:
    /// nothing pushed (and nothing recorded, so the fire can be enqueued later).
    Held,
    /// The fencing token is older than the newest the queue has seen: the sender was deposed.
    /// Nothing pushed.
    Fenced {
        /// The newest token the queue has seen.
        newest: u64,
    },
}

/// How one attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The handler succeeded.
    Succeeded,
    /// The handler returned an error.
    Failed,
    /// The attempt ran past its timeout and was stopped.
    TimedOut,
    /// The handler panicked.
    Panicked,
    /// The execution went to the dead-letter queue without running (unknown handler).
    DeadLettered,
    /// Stopped because a newer execution of the task replaced it (overlap `replace`): not a
    /// failure.
    Killed,
    /// The worker stopped before the attempt finished and gave the message back: not an
    /// outcome of the execution, which runs again elsewhere.
    Released,
}

impl AttemptOutcome {
    /// Whether the attempt counts as a failure (failure counters, breaker, alerts).
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            AttemptOutcome::Failed
                | AttemptOutcome::TimedOut
                | AttemptOutcome::Panicked
                | AttemptOutcome::DeadLettered
        )
    }

    /// The snake-case name used in history, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::TimedOut => "timed_out",
            AttemptOutcome::Panicked => "panicked",
            AttemptOutcome::DeadLettered => "dead_lettered",
            AttemptOutcome::Killed => "killed",
            AttemptOutcome::Released => "released",
        }
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The end of one attempt: its outcome, its error, and the retry that follows, if any.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptEnd {
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// What went wrong, for failures and kills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the next attempt is due; `None` when no retry follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<UtcMillis>,
}

impl AttemptEnd {
    /// A success.
    pub fn succeeded() -> Self {
        AttemptEnd {
            outcome: AttemptOutcome::Succeeded,
            error: None,
            retry_at: None,
        }
    }

    /// An ending with `outcome` and `error`, no retry.
    pub fn new(outcome: AttemptOutcome, error: Option<String>) -> Self {
        AttemptEnd {
            outcome,
            error,
            retry_at: None,
        }
    }

    /// Whether the attempt succeeded.
    pub fn is_success(&self) -> bool {
        self.outcome == AttemptOutcome::Succeeded
    }

    /// Whether this was the execution's last attempt: no retry follows and the message did
    /// not go back to the queue.
    pub fn is_last(&self) -> bool {
        self.retry_at.is_none() && self.outcome != AttemptOutcome::Released
    }

    /// The name people see for this ending (history, the API, logs): `retrying` when a retry
    /// follows, else the outcome's name.
    pub fn label(&self) -> &'static str {
        if self.retry_at.is_some() {
            "retrying"
        } else {
            self.outcome.as_str()
        }
    }

    /// Whether the execution ended in the dead-letter queue.
    pub fn is_dead_lettered(&self) -> bool {
        self.outcome.is_failure() && self.retry_at.is_none()
    }
}

/// Most bytes of a handler's answer an attempt keeps ([`AttemptOutput::body`]).
pub const MAX_OUTPUT_BYTES: usize = 1024;

/// Most bytes of each of a command's streams an attempt keeps ([`AttemptOutput::body`] for
/// stdout, [`AttemptOutput::stderr`]): the bound on a replica's `max_output_bytes`, so one
/// history entry stays small whatever a configuration asks.
pub const MAX_COMMAND_OUTPUT_BYTES: usize = 64 * 1024;

/// What a handler answered, cut short: for the `http` handler the response's status and the
/// start of its body; for the `command` handler the exit code and excerpts of stdout and
/// stderr. Kept in the execution history beside the attempt's end, not in the
/// end itself: the end also travels to the leader with every event, which has no use for
/// a body. The body is the receiver's answer, not the task's secrets, so it is stored as it
/// came, only capped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptOutput {
    /// HTTP status, for handlers that answer with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The first [`MAX_OUTPUT_BYTES`] of the answer at most, as text (bytes that are not
    /// UTF-8 replaced).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body: String,
    /// Whether the answer went on beyond `body` (or, for a command, beyond either excerpt).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// A command's exit code; absent when a signal ended it (or for other handlers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// An excerpt of a command's stderr (its `body` is stdout's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
}

impl AttemptOutput {
    /// The output for `status` and the start of an answer: `bytes` cut to
    /// [`MAX_OUTPUT_BYTES`] on a character boundary; `more` says the answer went on beyond
    /// `bytes`.
    pub fn new(status: Option<u16>, bytes: &[u8], more: bool) -> Self {
        let (body, cut) = capped_text(bytes, MAX_OUTPUT_BYTES);
        AttemptOutput {
            status,
            body,
            truncated: more || cut,
            ..AttemptOutput::default()
        }
    }

    /// The output with each of `secrets` replaced by `***` in its excerpts (see
    /// [`crate::redact::redact_values`]): what a history may keep of an answer that echoed
    /// the task's credentials.
    pub fn redacted(mut self, secrets: &[String]) -> Self {
        self.body = crate::redact::redact_values(&self.body, secrets);
        self.stderr = crate::redact::redact_values(&self.stderr, secrets);
        self
    }

    /// A command's output: its exit code and excerpts of its streams, already cut by the
    /// handler (which marks a cut inside the text) and held here to
    /// [`MAX_COMMAND_OUTPUT_BYTES`] each in case they were not.
    pub fn command(exit_code: Option<i32>, stdout: &[u8], stderr: &[u8], truncated: bool) -> Self {
        let (body, out_cut) = capped_text(stdout, MAX_COMMAND_OUTPUT_BYTES);
        let (stderr, err_cut) = capped_text(stderr, MAX_COMMAND_OUTPUT_BYTES);
        AttemptOutput {
            status: None,
            body,
            truncated: truncated || out_cut || err_cut,
            exit_code,
            stderr,
        }
    }
}

/// `bytes` as text (bytes that are not UTF-8 replaced) of at most `max` bytes, cut on a
/// character boundary; and whether anything was cut.
fn capped_text(bytes: &[u8], max: usize) -> (String, bool) {
    // Replacement characters can make the text longer than the bytes it came from.
    let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned();
    let mut cut = bytes.len() > max;
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        cut = true;
    }
    (text, cut)
}

/// What a worker reports about one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecutionEvent {
    /// The handler started.
    Started {
        /// When.
        at: UtcMillis,
    },
    /// The attempt ended.
    Finished {
        /// When.
        at: UtcMillis,
        /// How. Nested rather than flattened: the leader decodes thousands of these a
        /// second, and a flattened struct decodes through an intermediate map.
        end: AttemptEnd,
    },
}

/// Where a worker event sits in the event log the leader reads (a Redis stream id,
/// `{ms}-{seq}`): totally ordered, and increasing in the order events were written.
///
/// The leader acknowledges events only after the task states they changed are written, so a
/// leader that dies in between leaves them for its successor, which reads them again. Each
/// task state records the position of the last event applied to it
/// ([`TaskState::last_event`](crate::TaskState::last_event)); an event at or before that
/// position is already in the state and is not applied twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventPosition {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence within the millisecond.
    pub seq: u64,
}

impl std::fmt::Display for EventPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl std::str::FromStr for EventPosition {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("not an event position (`<ms>-<seq>`): {s:?}");
        let (ms, seq) = s.split_once('-').ok_or_else(bad)?;
        Ok(EventPosition {
            ms: ms.parse().map_err(|_| bad())?,
            seq: seq.parse().map_err(|_| bad())?,
        })
    }
}

impl Serialize for EventPosition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for EventPosition {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_and_dead_lettered() {
        let ok = AttemptEnd::succeeded();
        assert!(ok.is_last() && ok.is_success() && !ok.is_dead_lettered());
        let mut failed = AttemptEnd::new(AttemptOutcome::Failed, Some("HTTP 500".into()));
        assert!(failed.is_last() && failed.is_dead_lettered());
        assert_eq!(failed.label(), "failed");
        failed.retry_at = Some(UtcMillis(5));
        assert!(!failed.is_last() && !failed.is_dead_lettered());
        assert_eq!(failed.label(), "retrying");
        let released = AttemptEnd::new(AttemptOutcome::Released, None);
        assert!(!released.is_last() && !released.is_dead_lettered());
        let killed = AttemptEnd::new(AttemptOutcome::Killed, Some("replaced".into()));
        assert!(killed.is_last() && !killed.outcome.is_failure());
    }

    #[test]
    fn errors_are_masked_and_capped_on_a_character_boundary() {
        assert_eq!(shown_error("short".into()), "short");
        assert_eq!(
            shown_error("GET https://u:pw@h/x?k=v: 503".into()),
            "GET https://***@h/x?k=***: 503"
        );
        let huge = "é".repeat(1_000_000);
        let capped = shown_error(huge);
        assert!(capped.len() <= MAX_ERROR_LEN, "{}", capped.len());
        assert!(capped.ends_with("bytes cut)"), "{capped}");
    }

    #[test]
    fn outputs_are_capped_on_a_character_boundary() {
        let small = AttemptOutput::new(Some(200), b"ok", false);
        assert_eq!((small.body.as_str(), small.truncated), ("ok", false));
        let big = AttemptOutput::new(Some(500), "é".repeat(5_000).as_bytes(), false);
        assert!(big.body.len() <= MAX_OUTPUT_BYTES && big.body.len() > MAX_OUTPUT_BYTES - 2);
        assert!(big.truncated);
        let cut = AttemptOutput::new(None, b"abc", true);
        assert!(cut.truncated);
    }

    #[test]
    fn command_outputs_keep_both_streams_capped() {
        let ok = AttemptOutput::command(Some(3), b"out", b"err", false);
        assert_eq!(
            serde_json::to_string(&ok).unwrap(),
            r#"{"body":"out","exit_code":3,"stderr":"err"}"#
        );
        let big = "é".repeat(MAX_COMMAND_OUTPUT_BYTES);
        let cut = AttemptOutput::command(None, big.as_bytes(), big.as_bytes(), false);
        assert!(
            cut.body.len() <= MAX_COMMAND_OUTPUT_BYTES
                && cut.stderr.len() <= MAX_COMMAND_OUTPUT_BYTES
        );
        assert!(cut.truncated && cut.exit_code.is_none());
        // An http answer is read as before: the new fields stay out of its JSON.
        let http = AttemptOutput::new(Some(200), b"ok", false);
        assert_eq!(
            serde_json::to_string(&http).unwrap(),
            r#"{"status":200,"body":"ok"}"#
        );
    }

    #[test]
    fn events_round_trip_as_tagged_json() {
        let e = ExecutionEvent::Finished {
            at: UtcMillis(9),
            end: AttemptEnd {
                outcome: AttemptOutcome::TimedOut,
                error: Some("timed out after 3s".into()),
                retry_at: Some(UtcMillis(20)),
            },
        };
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(
            json,
            r#"{"type":"finished","at":9,"end":{"outcome":"timed_out","error":"timed out after 3s","retry_at":20}}"#
        );
        assert_eq!(serde_json::from_str::<ExecutionEvent>(&json).unwrap(), e);
        let s = ExecutionEvent::Started { at: UtcMillis(1) };
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"type":"started","at":1}"#
        );
    }

    #[test]
    fn positions_order_by_millisecond_then_sequence_and_round_trip() {
        let a: EventPosition = "1700000000000-5".parse().unwrap();
        let b: EventPosition = "1700000000000-12".parse().unwrap();
        let c: EventPosition = "1700000000001-0".parse().unwrap();
        // Numeric, not textual, order: "-12" sorts before "-5" as text.
        assert!(a < b && b < c);
        assert_eq!(a.to_string(), "1700000000000-5");
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(json, "\"1700000000000-12\"");
        assert_eq!(serde_json::from_str::<EventPosition>(&json).unwrap(), b);
        for bad in ["", "12", "a-1", "1-", "-1", "1-2-3"] {
            assert!(bad.parse::<EventPosition>().is_err(), "{bad}");
        }
    }
}
