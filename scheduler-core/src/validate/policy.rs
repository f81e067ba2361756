//! The `misfire` and `overlap` policies: what to do with fires missed while ax was down,
//! and with a fire that comes while the previous one still runs.
//!
//! Both are plain names. Overlap is read with the task's fanout known, because a fanned-out
//! task runs its pieces side by side and only `allow` fits it; the default follows suit.

use serde_json::{Map, Value};

use super::checker::{enum_value, field, Checker};
use crate::task::{MisfirePolicy, OverlapPolicy};

/// The top-level `misfire`.
pub(super) fn read_misfire(c: &mut Checker, obj: &Map<String, Value>) -> Option<MisfirePolicy> {
    field(obj, "misfire").map_or(Some(MisfirePolicy::default()), |v| {
        enum_value(
            c,
            v,
            "misfire",
            &[
                ("fire_once", MisfirePolicy::FireOnce),
                ("fire_all", MisfirePolicy::FireAll),
                ("skip", MisfirePolicy::Skip),
            ],
        )
    })
}

/// The top-level `overlap`; `fanned` says the task has a fanout.
pub(super) fn read_overlap(
    c: &mut Checker,
    obj: &Map<String, Value>,
    fanned: bool,
) -> Option<OverlapPolicy> {
    // The pieces of one fire run side by side: `forbid` would hold the second behind
    // the first. Overlap between fires is therefore `allow` for a fanned-out task.
    let default_overlap = if fanned {
        OverlapPolicy::Allow
    } else {
        OverlapPolicy::default()
    };
    if let (true, Some(v)) = (fanned, field(obj, "overlap")) {
        if v.as_str() != Some("allow") {
            c.err(
                "overlap",
                "a task with fanout runs its shards side by side, so its overlap is `allow`; remove overlap",
            );
        }
    }
    field(obj, "overlap").map_or(Some(default_overlap), |v| {
        enum_value(
            c,
            v,
            "overlap",
            &[
                ("allow", OverlapPolicy::Allow),
                ("forbid", OverlapPolicy::Forbid),
                ("replace", OverlapPolicy::Replace),
            ],
        )
    })
}
