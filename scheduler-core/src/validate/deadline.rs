//! The `expect_success_within` field: the deadline each fire of the schedule must meet.
//!
//! It stands apart from the other durations because it is about the schedule: a deadline
//! counts from a due fire (see `crate::deadline`), so a task with `depends_on`, which has no
//! fires of its own, cannot carry one.

use std::time::Duration;

use serde_json::{Map, Value};

use super::checker::{field, Checker};
use crate::options::check_expect_success_within;

/// The top-level `expect_success_within`: `Some(None)` when absent; refused when
/// `dependent` (the task lists parents).
pub(super) fn read_expect_success_within(
    c: &mut Checker,
    obj: &Map<String, Value>,
    dependent: bool,
) -> Option<Option<Duration>> {
    match field(obj, "expect_success_within") {
        None => Some(None),
        Some(_) if dependent => {
            c.err(
                "expect_success_within",
                "judges the fires of a schedule, and a task with depends_on has none; put it on the chain's first task",
            );
            None
        }
        Some(v) => {
            let within = c.duration(v, "expect_success_within")?;
            c.problem("expect_success_within", check_expect_success_within(within))
                .then_some(Some(within))
        }
    }
}
