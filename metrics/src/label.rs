//! Bounded label values: a user-chosen `queue` or `handler` becomes a label only among the
//! first [`MAX_LABEL_VALUES`] seen; the rest count under [`OTHER_LABEL`], so a loop
//! registering tasks with generated names cannot create series without end.

use std::collections::HashSet;
use std::sync::{PoisonError, RwLock};

use ax_scheduler_core::AttemptOutcome;

use crate::names::{
    DEPRECATED_OUTCOMES, MAX_LABEL_VALUES, OTHER_LABEL, OUTCOME_FAILED, OUTCOME_KILLED,
    OUTCOME_SUCCEEDED, OUTCOME_TIMED_OUT,
};

/// The values of one user-chosen label seen so far, at most [`MAX_LABEL_VALUES`].
#[derive(Debug, Default)]
pub struct BoundedLabel {
    seen: RwLock<HashSet<String>>,
}

impl BoundedLabel {
    /// `value` if it is one of the first [`MAX_LABEL_VALUES`] seen, else [`OTHER_LABEL`].
    pub fn get<'a>(&self, value: &'a str) -> &'a str {
        // Every execution asks, and all but the first hundred values only read: a shared
        // lock. A panic elsewhere while holding it leaves the set consistent (an insert is
        // the only change), so a poisoned lock is used as it is.
        if self
            .seen
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(value)
        {
            return value;
        }
        let mut seen = self.seen.write().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            value
        } else if seen.len() < MAX_LABEL_VALUES {
            seen.insert(value.to_owned());
            value
        } else {
            OTHER_LABEL
        }
    }
}

/// The `outcome` label of the attempt metrics for an attempt's outcome: the word the CLI
/// prints for it, the failures under one word (`failed`) so that the label stays a small set.
pub fn metric_outcome(outcome: AttemptOutcome) -> &'static str {
    match outcome {
        AttemptOutcome::Succeeded => OUTCOME_SUCCEEDED,
        AttemptOutcome::TimedOut => OUTCOME_TIMED_OUT,
        AttemptOutcome::Failed | AttemptOutcome::Panicked | AttemptOutcome::DeadLettered => {
            OUTCOME_FAILED
        }
        AttemptOutcome::Killed => OUTCOME_KILLED,
        AttemptOutcome::Released => outcome.as_str(),
    }
}

/// The `outcome` a deprecated alias shows for `outcome`: the words of the release before
/// (`success`, `failure`, `timeout`), any other value as it is.
pub fn deprecated_outcome(outcome: &str) -> &str {
    DEPRECATED_OUTCOMES
        .iter()
        .find(|(current, _)| *current == outcome)
        .map_or(outcome, |(_, old)| old)
}
