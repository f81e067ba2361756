//! The `fanout` section: one fire run as several executions.
//!
//! `shards` and `broadcast` exclude each other, and `broadcast` has only the value `true`
//! (leaving fanout out already means one execution), so the object is matched as a whole
//! rather than field by field.

use serde_json::{Map, Value};

use super::checker::{field, kind, Checker};
use crate::task::{Fanout, MAX_PIECES};

const FANOUT_FIELDS: &[&str] = &["shards", "broadcast"];

/// The top-level `fanout`: `Some(None)` when absent, `None` when it holds a problem.
pub(super) fn read_fanout(c: &mut Checker, obj: &Map<String, Value>) -> Option<Option<Fanout>> {
    match field(obj, "fanout") {
        None => Some(None),
        Some(v) => parse_fanout(c, v).map(Some),
    }
}

/// `fanout`: `{"shards": N}`, 2 to [`MAX_PIECES`], or `{"broadcast": true}`.
fn parse_fanout(c: &mut Checker, v: &Value) -> Option<Fanout> {
    let Value::Object(obj) = v else {
        c.err(
            "fanout",
            format!(
                "must be an object such as {{\"shards\": 4}} or {{\"broadcast\": true}}, found {}",
                kind(v)
            ),
        );
        return None;
    };
    c.unknown_fields(obj, "fanout", FANOUT_FIELDS);
    let n = match (field(obj, "shards"), field(obj, "broadcast")) {
        (Some(n), None) => n,
        (Some(_), Some(_)) => {
            c.err(
                "fanout",
                "give either shards (N executions per fire) or broadcast (one per live worker), not both",
            );
            return None;
        }
        (None, Some(Value::Bool(true))) => return Some(Fanout::Broadcast),
        (None, Some(b)) => {
            let found = match b {
                Value::Bool(false) => "false",
                other => kind(other),
            };
            c.err(
                "fanout.broadcast",
                format!(
                    "must be true (leave fanout out for one execution per fire), found {found}"
                ),
            );
            return None;
        }
        (None, None) => {
            c.err(
                "fanout",
                "give shards (the number of executions per fire) or broadcast: true (one per live worker)",
            );
            return None;
        }
    };
    let n = c.integer(n, "fanout.shards", 2, u64::from(MAX_PIECES), "shards")?;
    // In range: at most MAX_PIECES.
    Some(Fanout::Pieces(u32::try_from(n).unwrap_or(MAX_PIECES)))
}
