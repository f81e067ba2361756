//! The user-facing JSON form of a task: lenient parsing that reports every problem at once.
//!
//! serde's derive stops at the first error and words it for programmers ("invalid type:
//! integer, expected a string at line 1 column 40"). A person registering a task wants the
//! whole list, each with the field path and what to write instead. So the bytes are read into
//! a `serde_json::Value` and every field is checked by hand, collecting [`FieldError`]s;
//! defaults come from the constants in `task.rs`.
//! [`TaskSpec::to_json`](crate::TaskSpec::to_json) writes the same form back with every
//! default spelled out, and `from_json(to_json(spec))` gives `spec` again.
//!
//! One module per concept: `checker` reads single values and collects the problems, `spec`
//! reads the document top-down and calls one reader per section (`schedule`, `http`,
//! `command`, `retry`, `policy` for misfire and overlap, `fanout`, `depends_on`, `deadline`,
//! `concurrency`, and `fields` for the plain top-level values), and `serialize` writes the
//! form back. The order in which `spec` calls the readers is the order of the problems.

use std::fmt;

use serde::{Deserialize, Serialize};

mod checker;
mod command;
mod concurrency;
mod deadline;
mod depends_on;
mod fanout;
mod fields;
mod http;
mod policy;
mod retry;
mod schedule;
mod serialize;
mod spec;

pub use checker::check_name;
pub use command::check_env_name;

#[cfg(test)]
mod tests;

/// One problem with a spec: where, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// Dotted path of the field (`schedule.cron`, `retry.jitter`, `labels.team`); empty for
    /// the document as a whole.
    pub path: String,
    /// What is wrong, worded for the person who wrote the spec.
    pub reason: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

/// Every problem found in a spec; displayed one per line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ValidationErrors {
    /// The problems, in field order.
    pub errors: Vec<FieldError>,
}

impl ValidationErrors {
    /// Whether there are no problems.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Number of problems.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// The problems.
    pub fn iter(&self) -> std::slice::Iter<'_, FieldError> {
        self.errors.iter()
    }

    /// Whether any problem is at `path`.
    pub fn has(&self, path: &str) -> bool {
        self.errors.iter().any(|e| e.path == path)
    }
}

impl From<Vec<FieldError>> for ValidationErrors {
    fn from(errors: Vec<FieldError>) -> Self {
        ValidationErrors { errors }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}
