//! What to do when a periodic task fires while its previous execution still runs.
//!
//! A pure decision so that the engine's bookkeeping (which execution runs, which fire is held)
//! stays in one place and the policy table is tested on its own.
//!
//! | policy    | previous running | a fire already held | decision         |
//! |-----------|------------------|---------------------|------------------|
//! | any       | no               | -                   | `Start`          |
//! | `allow`   | yes              | -                   | `Start`          |
//! | `forbid`  | yes              | no                  | `Hold`           |
//! | `forbid`  | yes              | yes                 | `Coalesce`       |
//! | `replace` | yes              | -                   | `ReplaceRunning` |
//!
//! `forbid` holds at most one fire: when the running execution finishes, the held fire runs
//! once, however many fires came meanwhile (the later ones coalesce into it and are counted as
//! skipped). This keeps a slow job from building a backlog that would run back to back.

use crate::task::OverlapPolicy;

/// The engine's action for a fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverlapDecision {
    /// Dispatch the fire now.
    Start,
    /// Keep the fire; dispatch it once the running execution finishes.
    Hold,
    /// A fire is already held; this one merges into it (count it as skipped).
    Coalesce,
    /// Stop the running execution (it ends KILLED) and dispatch this fire.
    ReplaceRunning,
}

/// Decides what a fire does under `policy`, given whether the previous execution still runs
/// and whether a fire is already held for it.
pub fn decide_overlap(
    policy: OverlapPolicy,
    previous_running: bool,
    fire_held: bool,
) -> OverlapDecision {
    if !previous_running {
        return OverlapDecision::Start;
    }
    match policy {
        OverlapPolicy::Allow => OverlapDecision::Start,
        OverlapPolicy::Forbid if fire_held => OverlapDecision::Coalesce,
        OverlapPolicy::Forbid => OverlapDecision::Hold,
        OverlapPolicy::Replace => OverlapDecision::ReplaceRunning,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OverlapDecision::*;
    use OverlapPolicy::*;

    #[test]
    fn policy_table() {
        for p in [Allow, Forbid, Replace] {
            assert_eq!(decide_overlap(p, false, false), Start);
            assert_eq!(decide_overlap(p, false, true), Start);
        }
        assert_eq!(decide_overlap(Allow, true, false), Start);
        assert_eq!(decide_overlap(Forbid, true, false), Hold);
        assert_eq!(decide_overlap(Forbid, true, true), Coalesce);
        assert_eq!(decide_overlap(Replace, true, false), ReplaceRunning);
        assert_eq!(decide_overlap(Replace, true, true), ReplaceRunning);
    }

    #[test]
    fn forbid_runs_at_most_one_held_fire_per_busy_period() {
        // Simulate: an execution runs for 5 fires' worth of time.
        let mut held = false;
        let mut started = 0;
        let mut skipped = 0;
        for _ in 0..5 {
            match decide_overlap(Forbid, true, held) {
                Hold => held = true,
                Coalesce => skipped += 1,
                Start | ReplaceRunning => started += 1,
            }
        }
        // Previous finished: the held fire starts once.
        if held {
            started += 1;
        }
        assert_eq!((started, skipped), (1, 4));
    }
}
