//! What a handler's result makes of its attempt: the outcome, the error recorded, and
//! whether a retry may follow.
//!
//! A handler (the cluster worker's, or a job of the embedded kernel) returns `Ok(())` or a
//! [`HandlerError`] that says whether trying again can help, or it panics. Both shells run it
//! under a timeout in a task of their own and map what came back through [`verdict`] and
//! [`panic_verdict`], so a panic, a permanent error and a retryable one mean the same thing
//! wherever a handler runs. The runtime's join error is the shell's business; only the panic
//! payload reaches here.

use std::any::Any;

use crate::execution::AttemptOutcome;

/// Why a handler failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Trying again later may succeed (network trouble, a 5xx, a busy dependency).
    #[error("{0}")]
    Retryable(String),
    /// Trying again will not help (bad input, a 4xx); goes to the dead-letter queue.
    #[error("{0}")]
    Permanent(String),
}

impl HandlerError {
    /// Whether the attempt may be retried.
    pub fn is_retryable(&self) -> bool {
        matches!(self, HandlerError::Retryable(_))
    }
}

/// An I/O failure (a connection refused or reset, a timeout, a file busy) is worth another
/// attempt.
impl From<std::io::Error> for HandlerError {
    fn from(e: std::io::Error) -> Self {
        HandlerError::Retryable(e.to_string())
    }
}

/// A payload or answer that does not parse will not parse better on the next attempt.
impl From<serde_json::Error> for HandlerError {
    fn from(e: serde_json::Error) -> Self {
        if e.is_io() {
            HandlerError::Retryable(e.to_string())
        } else {
            HandlerError::Permanent(e.to_string())
        }
    }
}

/// An error of unknown kind, with its causes, is retried: the task's retry policy bounds it,
/// and a handler that knows better returns [`HandlerError::Permanent`] itself.
#[cfg(feature = "anyhow")]
impl From<anyhow::Error> for HandlerError {
    fn from(e: anyhow::Error) -> Self {
        HandlerError::Retryable(format!("{e:#}"))
    }
}

/// What a handler's run makes of its attempt, before the task's retry policy is asked: how
/// it ended, the error to record, and whether trying again may help. The shell turns it into
/// the recorded [`AttemptEnd`](crate::execution::AttemptEnd) once it knows whether a retry
/// follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// How the attempt ended.
    pub outcome: AttemptOutcome,
    /// What went wrong, for failures and kills.
    pub error: Option<String>,
    /// Whether the failure may be retried (the retry policy still decides whether it is).
    pub retryable: bool,
}

impl Verdict {
    /// An attempt that ended as `outcome` with `error`.
    pub fn new(outcome: AttemptOutcome, error: Option<String>, retryable: bool) -> Self {
        Verdict {
            outcome,
            error,
            retryable,
        }
    }

    /// A success.
    pub fn succeeded() -> Self {
        Verdict::new(AttemptOutcome::Succeeded, None, false)
    }
}

/// The verdict of a handler that returned by itself.
pub fn verdict(result: Result<(), HandlerError>) -> Verdict {
    match result {
        Ok(()) => Verdict::succeeded(),
        Err(HandlerError::Retryable(e)) => Verdict::new(AttemptOutcome::Failed, Some(e), true),
        Err(HandlerError::Permanent(e)) => Verdict::new(AttemptOutcome::Failed, Some(e), false),
    }
}

/// The verdict of a handler that panicked with `payload`: a failed attempt that may be
/// retried (a panic is a bug or a bad state, not a verdict on the input).
pub fn panic_verdict(payload: &(dyn Any + Send)) -> Verdict {
    let message = panic_message(payload);
    Verdict::new(
        AttemptOutcome::Panicked,
        Some(format!("handler panicked: {message}")),
        true,
    )
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<u32, HandlerError> {
        Ok(serde_json::from_str(text)?)
    }

    fn read(path: &str) -> Result<String, HandlerError> {
        Ok(std::fs::read_to_string(path)?)
    }

    #[test]
    fn common_errors_convert_with_question_mark() {
        assert!(!parse("not json").unwrap_err().is_retryable());
        assert_eq!(parse("7"), Ok(7));
        let e = read("/nonexistent/ax-handler-input").unwrap_err();
        assert!(e.is_retryable(), "{e}");
    }

    #[test]
    fn results_and_panics_map_to_outcomes() {
        assert_eq!(verdict(Ok(())), Verdict::succeeded());
        let retry = verdict(Err(HandlerError::Retryable("busy".into())));
        assert_eq!(
            retry,
            Verdict::new(AttemptOutcome::Failed, Some("busy".into()), true)
        );
        let perm = verdict(Err(HandlerError::Permanent("bad".into())));
        assert_eq!(
            perm,
            Verdict::new(AttemptOutcome::Failed, Some("bad".into()), false)
        );
        let boxed: Box<dyn Any + Send> = Box::new(String::from("boom"));
        let Verdict {
            outcome,
            error,
            retryable,
        } = panic_verdict(boxed.as_ref());
        assert_eq!(outcome, AttemptOutcome::Panicked);
        assert_eq!(error.as_deref(), Some("handler panicked: boom"));
        assert!(retryable);
        assert_eq!(panic_message(&7u8), "panic with a non-string payload");
    }
}
