//! Finding an execution from part of its id (`GET /executions/find?id=`, `ax execution get`).
//!
//! Execution ids are UUID v7: the first 12 hex digits are the time they were made, so ids of
//! one minute share their first 8 characters and people quote the end of an id instead. A
//! fragment is therefore matched at both ends of the id, never in its middle, and must be
//! long enough ([`MIN_ID_FRAGMENT`]) that a match means something. The search reads the
//! history across tasks newest first with a bound ([`FIND_SCAN_MAX`]), so it says whether it
//! saw the whole history: "no match" and "no match among the newest attempts" differ.

use ax_scheduler_core::{ExecutionId, UtcMillis};
use serde::{Deserialize, Serialize};

use super::ApiError;

/// Fewest hex digits a fragment of an id must have.
pub const MIN_ID_FRAGMENT: usize = 6;

/// Most attempts of the history across tasks one search reads.
pub const FIND_SCAN_MAX: usize = 50_000;

/// Most executions one search names: past this many, more are only reported as "more".
pub const FIND_MATCHES_MAX: usize = 10;

/// The query string of `GET /executions/find`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindParams {
    /// The start or the end of an execution id.
    #[serde(default)]
    pub id: String,
}

/// The executions whose id starts or ends with a fragment, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionMatches {
    /// The fragment as searched (lowercase).
    pub fragment: String,
    /// The executions found, at most [`FIND_MATCHES_MAX`].
    pub matches: Vec<ExecutionMatch>,
    /// True when more executions matched than are listed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
    /// False when the search stopped at its bound before the start of the history.
    pub complete: bool,
}

/// One execution a fragment matched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionMatch {
    /// Its id.
    pub execution_id: ExecutionId,
    /// Its task.
    pub namespace: String,
    /// Its task.
    pub task_id: String,
    /// The fire it stands for.
    pub due: UtcMillis,
}

/// `text` as a fragment to search for: trimmed, lowercase, only hex digits and dashes, with
/// at least [`MIN_ID_FRAGMENT`] hex digits.
pub fn id_fragment(text: &str) -> Result<String, ApiError> {
    let fragment = text.trim().to_ascii_lowercase();
    let digits = fragment.chars().filter(char::is_ascii_hexdigit).count();
    if fragment.is_empty()
        || fragment.len() > 36
        || !fragment.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
    {
        return Err(ApiError::invalid(format!(
            "`{text}` is not an execution id nor a part of one (hex digits and dashes)"
        )));
    }
    if digits < MIN_ID_FRAGMENT {
        return Err(ApiError::invalid(format!(
            "`{text}` is too short to find an execution by: give at least \
             {MIN_ID_FRAGMENT} characters of the start or the end of its id"
        )));
    }
    Ok(fragment)
}

/// Whether `id` starts or ends with `fragment` (as [`id_fragment`] made it).
pub fn id_matches(id: ExecutionId, fragment: &str) -> bool {
    let text = id.to_string();
    text.starts_with(fragment) || text.ends_with(fragment)
}

impl ExecutionMatches {
    /// The one execution the search found, or why it does not name one: not found (saying
    /// how far it looked), or invalid input listing the candidates.
    pub fn unique(&self) -> Result<ExecutionId, ApiError> {
        match self.matches.as_slice() {
            [one] if !self.more => Ok(one.execution_id),
            [] => Err(ApiError::NotFound(if self.complete {
                format!(
                    "no execution id starts or ends with `{}` in the execution history",
                    self.fragment
                )
            } else {
                format!(
                    "no execution id starts or ends with `{}` among the newest {FIND_SCAN_MAX} \
                     attempts of the execution history; give the whole id",
                    self.fragment
                )
            })),
            many => Err(ApiError::Invalid {
                message: format!(
                    "`{}` matches {}{} executions; give more of the id",
                    self.fragment,
                    if self.more { "more than " } else { "" },
                    many.len()
                ),
                errors: many
                    .iter()
                    .map(|m| {
                        format!(
                            "{} ({}/{}, due {})",
                            m.execution_id, m.namespace, m.task_id, m.due
                        )
                    })
                    .collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fragment_is_hex_and_long_enough() {
        assert_eq!(id_fragment(" 5C48C0AB ").unwrap(), "5c48c0ab");
        assert_eq!(id_fragment("01a22e3e-bc").unwrap(), "01a22e3e-bc");
        for bad in ["", "12345", "--12-34-5", "not-hex!", &"a".repeat(37)] {
            assert!(id_fragment(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_fragment_matches_either_end_of_an_id_only() {
        let id: ExecutionId = "01a22e3e-bcff-73cd-9d09-569d2cb5c48c".parse().unwrap();
        assert!(id_matches(id, "01a22e3e-bc"));
        assert!(id_matches(id, "2cb5c48c"));
        assert!(!id_matches(id, "73cd-9d09"), "the middle is no match");
    }

    #[test]
    fn several_matches_are_listed_and_none_says_how_far_it_looked() {
        let m = |id: &str| ExecutionMatch {
            execution_id: id.parse().unwrap(),
            namespace: "ops".into(),
            task_id: "beat".into(),
            due: UtcMillis(0),
        };
        let mut found = ExecutionMatches {
            fragment: "01a22e3e".into(),
            matches: vec![
                m("01a22e3e-bcff-73cd-9d09-569d2cb5c48c"),
                m("01a22e3e-0000-73cd-9d09-569d2cb5c48d"),
            ],
            more: false,
            complete: true,
        };
        let Err(ApiError::Invalid { errors, .. }) = found.unique() else {
            panic!("two matches are no answer")
        };
        assert!(errors[1].starts_with("01a22e3e-0000-73cd-9d09-569d2cb5c48d (ops/beat"));
        found.matches.truncate(1);
        assert_eq!(found.unique().unwrap(), found.matches[0].execution_id);
        found.matches.clear();
        found.complete = false;
        let Err(ApiError::NotFound(msg)) = found.unique() else {
            panic!("no match is not found")
        };
        assert!(msg.contains("among the newest"), "{msg}");
    }
}
