//! What to do when a periodic task fires while its previous execution still runs.
//!
//! The dispatcher decides; Redis only enforces what it was asked. Whether the previous
//! execution is still active is known only in Redis (the task's active marker, set by the
//! enqueue of a `forbid`/`replace` fire and cleared by that execution's final settle), and it
//! must hold across leaders, so the decision comes in two halves:
//!
//! 1. Before the enqueue, [`dispatch_mode`] says what the enqueue script is to do about a
//!    still-active previous execution: nothing for one-shots and run-now executions
//!    (`allow`), the task's policy for its scheduled fires.
//! 2. After it, the dispatcher acts on the answer. `forbid` came back `Held`: the dispatcher
//!    keeps that fire, one per task, with one retry timer; later fires merge into it
//!    ([`merge_held`]: the newest stands for them all, so a slow job never builds a backlog
//!    that would run back to back). The held fire is dispatched again when the running
//!    execution's final event arrives, or when the retry timer finds the marker gone; a
//!    dispatch again is the same fire, not a new one.
//!
//! | policy    | the enqueue script, previous execution active | running execution           |
//! |-----------|-----------------------------------------------|-----------------------------|
//! | `allow`   | pushes                                        | runs on                     |
//! | `forbid`  | answers `Held`, pushes nothing                | runs on                     |
//! | `replace` | pushes and moves the marker to the new fire   | sees the marker move, stops |

use crate::task::{OverlapPolicy, TaskSpec};
use crate::time::UtcMillis;

/// The overlap mode the enqueue of one fire of `spec` carries: the task's policy for its
/// scheduled fires, `allow` for one-shots (there is no previous execution to overlap) and for
/// run-now executions (an operator's explicit request).
pub fn dispatch_mode(spec: &TaskSpec, run_now: bool) -> OverlapPolicy {
    if run_now || !spec.schedule.is_periodic() {
        OverlapPolicy::Allow
    } else {
        spec.overlap
    }
}

/// The fire a task holds after `fire_at` was also held: the newest of the two.
pub fn merge_held(held: Option<UtcMillis>, fire_at: UtcMillis) -> UtcMillis {
    held.map_or(fire_at, |h| h.max(fire_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> TaskSpec {
        TaskSpec::from_json(json.as_bytes(), "ns", "a").unwrap()
    }

    #[test]
    fn mode_by_schedule_and_run_now() {
        use OverlapPolicy::*;
        let every = spec(r#"{"handler":"log","schedule":{"every":"1s"},"overlap":"forbid"}"#);
        assert_eq!(dispatch_mode(&every, false), Forbid);
        assert_eq!(dispatch_mode(&every, true), Allow);
        let replace =
            spec(r#"{"handler":"log","schedule":{"cron":"* * * * * *"},"overlap":"replace"}"#);
        assert_eq!(dispatch_mode(&replace, false), Replace);
        let once = spec(r#"{"handler":"log","schedule":{"delay":"1s"},"overlap":"forbid"}"#);
        assert_eq!(dispatch_mode(&once, false), Allow);
    }

    #[test]
    fn the_newest_held_fire_stands_for_the_others() {
        let mut held = None;
        for t in [300, 100, 200] {
            held = Some(merge_held(held, UtcMillis(t)));
        }
        assert_eq!(held, Some(UtcMillis(300)));
    }
}
