//! Problems with a value a user wrote, each at its field's path: what the JSON validator
//! collects and what the typed checks (`options`) return, below both of them.

use std::fmt;

use serde::{Deserialize, Serialize};

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
