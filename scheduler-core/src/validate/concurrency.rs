//! The `concurrency` section: a limit on executions that share a key.
//!
//! The key is a template over the payload (`customer-{payload.customer}`); its syntax
//! belongs to [`Concurrency::check_key`], beside the code that resolves it, so this module
//! only reports what that says at the right path.

use serde_json::{Map, Value};

use super::checker::{field, kind, Checker};
use crate::concurrency::{Concurrency, MAX_CONCURRENCY};

/// The top-level `concurrency`: `Some(None)` when absent, `None` when it holds a problem.
pub(super) fn read_concurrency(
    c: &mut Checker,
    obj: &Map<String, Value>,
) -> Option<Option<Concurrency>> {
    match field(obj, "concurrency") {
        None => Some(None),
        Some(v) => parse_concurrency(c, v).map(Some),
    }
}

/// `concurrency: {"key": "...", "max": N}`.
fn parse_concurrency(c: &mut Checker, v: &Value) -> Option<Concurrency> {
    let Value::Object(obj) = v else {
        c.err(
            "concurrency",
            format!(
                "must be an object like {{\"key\": \"customer-{{payload.customer}}\", \"max\": 2}}, found {}",
                kind(v)
            ),
        );
        return None;
    };
    c.unknown_fields(obj, "concurrency", &["key", "max"]);
    let key = match field(obj, "key") {
        None => {
            c.err("concurrency.key", "missing");
            None
        }
        Some(Value::String(k)) => match Concurrency::check_key(k) {
            Ok(()) => Some(k.clone()),
            Err(e) => {
                c.err("concurrency.key", e);
                None
            }
        },
        Some(other) => {
            c.err(
                "concurrency.key",
                format!("must be a string, found {}", kind(other)),
            );
            None
        }
    };
    let max = match field(obj, "max") {
        None => {
            c.err("concurrency.max", "missing");
            None
        }
        Some(m) => c.integer(
            m,
            "concurrency.max",
            1,
            u64::from(MAX_CONCURRENCY),
            "concurrency max",
        ),
    };
    Some(Concurrency {
        key: key?,
        max: u32::try_from(max?).ok()?,
    })
}
