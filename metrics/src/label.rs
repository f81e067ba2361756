//! Bounded label values: a user-chosen `queue` or `handler` becomes a label only among the
//! first [`MAX_LABEL_VALUES`] seen; the rest count under [`OTHER_LABEL`], so a loop
//! registering tasks with generated names cannot create series without end.

use std::collections::HashSet;
use std::sync::{PoisonError, RwLock};

use ax_scheduler_core::AttemptOutcome;

use crate::names::{
    MAX_LABEL_VALUES, OTHER_LABEL, OUTCOME_FAILURE, OUTCOME_SUCCESS, OUTCOME_TIMEOUT,
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

/// The `outcome` label of the execution metrics for an attempt's outcome.
pub fn metric_outcome(outcome: AttemptOutcome) -> &'static str {
    match outcome {
        AttemptOutcome::Succeeded => OUTCOME_SUCCESS,
        AttemptOutcome::TimedOut => OUTCOME_TIMEOUT,
        AttemptOutcome::Failed | AttemptOutcome::Panicked | AttemptOutcome::DeadLettered => {
            OUTCOME_FAILURE
        }
        AttemptOutcome::Killed | AttemptOutcome::Released => outcome.as_str(),
    }
}
