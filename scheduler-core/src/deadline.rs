//! Deadlines: a task with `expect_success_within: W` must succeed within W of each due fire.
//!
//! The rule, judged by [`judge`] from the task's recorded state alone (so a new leader judges
//! exactly as the old one did): a fire F is met when some execution of the task succeeded
//! after F; it is missed when F + W has passed and none has. The deadline of a fire due
//! before the task was recorded counts from the recording (the anchor), so registering a
//! one-shot whose instant passed does not miss at once.
//!
//! Each missed fire is alerted once: the state's `deadline_mark` is the instant through which
//! fires are accounted for (alerted, or not judged), written with the state, so a new leader
//! neither alerts a fire again nor forgets one. Several fires missed at once (a leader came
//! back after an outage) make one miss that counts them. Fires due while the task or its
//! namespace is paused are not judged: an operator stopped them on purpose; a spec change
//! (pause and resume included) starts the deadlines afresh from the change.
//!
//! The reason a miss gives is read from the state when the deadline passes: the fire never
//! went out (no leader then, or skipped), it is held behind a previous execution (overlap
//! `forbid`), it is still in flight, or its executions fail. Only the earliest missed fire's
//! reason is given; later ones in the same miss share it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::schedule::CompiledSchedule;
use crate::state::TaskState;
use crate::status::TaskStatus;
use crate::time::UtcMillis;

/// Missed fires counted in one [`Miss`] at most: a schedule firing every second that missed
/// a day of deadlines is not walked fire by fire; the rest is judged on the next check.
pub const MAX_COUNTED_MISSES: u64 = 10_000;

/// What [`judge`] reads besides the state.
#[derive(Clone, Copy, Debug)]
pub struct Expectation<'a> {
    /// The task's schedule.
    pub schedule: &'a CompiledSchedule,
    /// The instant the task's fires count from (its recorded anchor).
    pub anchor: UtcMillis,
    /// `expect_success_within`.
    pub within: Duration,
    /// The task or its namespace is paused.
    pub paused: bool,
    /// When the judging leader's term began.
    pub leader_since: UtcMillis,
}

/// Why the earliest missed fire was not met.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum MissReason {
    /// The fire came due before the judging leader took over and was not sent: nobody led
    /// the cluster then (or the last leader died without recording it).
    NoLeader {
        /// When the judging leader took over.
        leader_since: UtcMillis,
    },
    /// The fire came due under this leader and was not sent: its misfire policy skipped it
    /// after a stall, or its circuit breaker did.
    NeverFired,
    /// The fire waits behind the previous execution (overlap `forbid`).
    Held {
        /// The due instant of the execution it waits for.
        behind: Option<UtcMillis>,
    },
    /// An execution is in flight and has not ended: queued with no worker to take it, or
    /// running longer than the deadline allows.
    Running {
        /// The due instant of the fire in flight.
        since: Option<UtcMillis>,
    },
    /// Executions end in failure (or are waiting to retry one).
    Failing {
        /// Failures since the last success.
        consecutive_failures: u32,
        /// The last failure's message.
        last_error: Option<String>,
    },
    /// The last execution was killed by an operator.
    Killed,
}

impl MissReason {
    /// The label value for metrics and alert fields.
    pub fn as_str(&self) -> &'static str {
        match self {
            MissReason::NoLeader { .. } => "no_leader",
            MissReason::NeverFired => "never_fired",
            MissReason::Held { .. } => "held",
            MissReason::Running { .. } => "running",
            MissReason::Failing { .. } => "failing",
            MissReason::Killed => "killed",
        }
    }

    /// Every label value, for metrics that start at zero.
    pub const ALL: [&'static str; 6] = [
        "no_leader",
        "never_fired",
        "held",
        "running",
        "failing",
        "killed",
    ];
}

impl std::fmt::Display for MissReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |t: &Option<UtcMillis>| {
            t.map_or_else(|| "an earlier fire".to_owned(), UtcMillis::to_rfc3339)
        };
        match self {
            MissReason::NoLeader { leader_since } => write!(
                f,
                "no leader sent the fire: the current leader took over at {}",
                leader_since.to_rfc3339()
            ),
            MissReason::NeverFired => f.write_str(
                "the fire was not sent: skipped by its misfire policy after a stall, or by its \
                 open circuit breaker",
            ),
            MissReason::Held { behind } => write!(
                f,
                "the fire is held (overlap forbid) behind the execution of {}, still not over",
                at(behind)
            ),
            MissReason::Running { since } => write!(
                f,
                "the execution of {} has not ended: queued with no worker taking it, or still \
                 running",
                at(since)
            ),
            MissReason::Failing {
                consecutive_failures,
                last_error,
            } => {
                write!(
                    f,
                    "executions fail ({consecutive_failures} since the last success)"
                )?;
                match last_error {
                    Some(e) => write!(f, "; last error: {e}"),
                    None => Ok(()),
                }
            }
            MissReason::Killed => f.write_str("the last execution was killed by an operator"),
        }
    }
}

/// Missed deadlines found by one judgement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Miss {
    /// The earliest missed fire.
    pub first_fire: UtcMillis,
    /// The latest missed fire (the same as `first_fire` for one miss).
    pub last_fire: UtcMillis,
    /// Fires missed (at most [`MAX_COUNTED_MISSES`]).
    pub missed: u64,
    /// When the earliest one's deadline passed.
    pub deadline: UtcMillis,
    /// Why the earliest one was missed.
    pub reason: MissReason,
}

/// What one judgement found, and what to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// Deadlines missed, to alert once.
    pub miss: Option<Miss>,
    /// The state's new `deadline_mark` (`None`: unchanged).
    pub mark: Option<UtcMillis>,
    /// When to judge again; `None` when the schedule has no fire left to judge.
    pub check_at: Option<UtcMillis>,
}

/// Judges the task's deadlines at `now` from its `state`; see the [module notes](self).
pub fn judge(exp: &Expectation<'_>, state: &TaskState, now: UtcMillis) -> Judgement {
    if exp.paused {
        // Fires due so far are not judged, and nothing is judged until the task runs again:
        // a resume of the task is a spec change, one of its namespace is a call of its own,
        // and both start the deadlines afresh. No judgement meanwhile, so a paused task
        // costs no timer and no state write at each of its deadline instants. (A namespace
        // resumed while no replica leads has its paused fires judged by the next leader,
        // as fires its outage missed.)
        return Judgement {
            miss: None,
            mark: Some(state.deadline_mark.map_or(now, |m| m.max(now))),
            check_at: None,
        };
    }
    let Some(first) = first_judged(exp, state) else {
        return Judgement {
            miss: None,
            mark: None,
            check_at: None,
        };
    };
    let deadline = deadline_of(exp, first);
    if deadline > now {
        return Judgement {
            miss: None,
            mark: None,
            check_at: Some(deadline),
        };
    }
    let mut last = first;
    let mut missed = 1u64;
    while missed < MAX_COUNTED_MISSES {
        match exp.schedule.next_after(last, exp.anchor) {
            Some(next) if deadline_of(exp, next) <= now => {
                last = next;
                missed += 1;
            }
            _ => break,
        }
    }
    Judgement {
        miss: Some(Miss {
            first_fire: first,
            last_fire: last,
            missed,
            deadline,
            reason: reason(exp, state, first),
        }),
        mark: Some(last),
        check_at: next_deadline(exp, last),
    }
}

/// The first fire not yet accounted for: after the mark and after the last success.
fn first_judged(exp: &Expectation<'_>, state: &TaskState) -> Option<UtcMillis> {
    match state.deadline_mark.max(state.last_success_at) {
        Some(after) => exp.schedule.next_after(after, exp.anchor),
        None => exp.schedule.first_fire(exp.anchor),
    }
}

fn deadline_of(exp: &Expectation<'_>, fire: UtcMillis) -> UtcMillis {
    fire.max(exp.anchor).add(exp.within)
}

fn next_deadline(exp: &Expectation<'_>, after: UtcMillis) -> Option<UtcMillis> {
    exp.schedule
        .next_after(after, exp.anchor)
        .map(|f| deadline_of(exp, f))
}

fn reason(exp: &Expectation<'_>, state: &TaskState, fire: UtcMillis) -> MissReason {
    let sent = state.last_fire_at.is_some_and(|last| last >= fire);
    let failing = MissReason::Failing {
        consecutive_failures: state.consecutive_failures,
        last_error: state.last_error.clone(),
    };
    if state.held_fire_at.is_some_and(|h| h >= fire) {
        return MissReason::Held {
            behind: state.last_fire_at.filter(|l| *l < fire),
        };
    }
    if !sent {
        if state.status.is_executing() {
            // An older execution still runs (or retries) and this fire has not gone out.
            return if state.status == TaskStatus::Retrying {
                failing
            } else {
                MissReason::Running {
                    since: state.last_fire_at,
                }
            };
        }
        if exp.leader_since > fire {
            return MissReason::NoLeader {
                leader_since: exp.leader_since,
            };
        }
        if state.consecutive_failures > 0 {
            // Skipped by the breaker a failing task opened: the failures are the cause.
            return failing;
        }
        return MissReason::NeverFired;
    }
    match state.status {
        TaskStatus::Running => MissReason::Running {
            since: state.last_fire_at,
        },
        TaskStatus::Killed => MissReason::Killed,
        _ => failing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Schedule;

    const S: i64 = 1_000;

    fn every(secs: u64) -> CompiledSchedule {
        Schedule::Every(Duration::from_secs(secs))
            .compile()
            .unwrap()
    }

    fn exp(schedule: &CompiledSchedule, within_s: u64) -> Expectation<'_> {
        Expectation {
            schedule,
            anchor: UtcMillis(0),
            within: Duration::from_secs(within_s),
            paused: false,
            leader_since: UtcMillis(0),
        }
    }

    fn state() -> TaskState {
        TaskState::new(1, UtcMillis(0), UtcMillis(0))
    }

    #[test]
    fn a_fire_is_pending_until_its_deadline_then_missed_once() {
        let sched = every(60);
        let e = exp(&sched, 30);
        let st = state();
        // First fire at 60 s, deadline 90 s.
        assert_eq!(
            judge(&e, &st, UtcMillis(10 * S)),
            Judgement {
                miss: None,
                mark: None,
                check_at: Some(UtcMillis(90 * S))
            }
        );
        let j = judge(&e, &st, UtcMillis(90 * S));
        let miss = j.miss.unwrap();
        assert_eq!((miss.first_fire, miss.missed), (UtcMillis(60 * S), 1));
        // The leader was up before the fire came due.
        assert_eq!(miss.reason, MissReason::NeverFired);
        assert_eq!(j.mark, Some(UtcMillis(60 * S)));
        assert_eq!(j.check_at, Some(UtcMillis(150 * S)));
        // Judged again with the mark written: nothing new until the next deadline.
        let mut st = st;
        st.deadline_mark = j.mark;
        let again = judge(&e, &st, UtcMillis(100 * S));
        assert_eq!(again.miss, None);
        assert_eq!(again.check_at, Some(UtcMillis(150 * S)));
    }

    #[test]
    fn a_success_after_the_fire_meets_it() {
        let sched = every(60);
        let e = exp(&sched, 30);
        let mut st = state();
        st.record_fire(UtcMillis(60 * S), UtcMillis(60 * S));
        st.record_outcome(Ok(()), UtcMillis(70 * S));
        let j = judge(&e, &st, UtcMillis(95 * S));
        assert_eq!(j.miss, None);
        assert_eq!(j.check_at, Some(UtcMillis(150 * S)));
    }

    #[test]
    fn reasons_follow_the_state() {
        let sched = every(60);
        let e = exp(&sched, 30);
        let at = UtcMillis(95 * S);

        // In flight since the fire.
        let mut st = state();
        st.record_fire(UtcMillis(60 * S), UtcMillis(60 * S));
        st.status = TaskStatus::Running;
        assert_eq!(
            judge(&e, &st, at).miss.unwrap().reason,
            MissReason::Running {
                since: Some(UtcMillis(60 * S))
            }
        );

        // Retrying after failures.
        st.status = TaskStatus::Retrying;
        st.consecutive_failures = 2;
        st.last_error = Some("HTTP 500".into());
        let r = judge(&e, &st, at).miss.unwrap().reason;
        assert_eq!(
            r,
            MissReason::Failing {
                consecutive_failures: 2,
                last_error: Some("HTTP 500".into())
            }
        );
        assert!(r.to_string().contains("last error: HTTP 500"), "{r}");

        // Held behind the previous execution.
        let mut st = state();
        st.record_fire(UtcMillis(0), UtcMillis(0));
        st.status = TaskStatus::Running;
        st.record_fire(UtcMillis(60 * S), UtcMillis(60 * S));
        st.last_fire_at = Some(UtcMillis(0));
        st.held_fire_at = Some(UtcMillis(60 * S));
        assert_eq!(
            judge(&e, &st, at).miss.unwrap().reason,
            MissReason::Held {
                behind: Some(UtcMillis(0))
            }
        );

        // Never sent, the leader up before it came due.
        let st = state();
        assert_eq!(
            judge(&e, &st, at).miss.unwrap().reason,
            MissReason::NeverFired
        );

        // Never sent, and the leader took over after it came due.
        let late = Expectation {
            leader_since: UtcMillis(91 * S),
            ..e
        };
        assert_eq!(
            judge(&late, &st, at).miss.unwrap().reason,
            MissReason::NoLeader {
                leader_since: UtcMillis(91 * S)
            }
        );

        // Killed.
        let mut st = state();
        st.record_fire(UtcMillis(60 * S), UtcMillis(60 * S));
        st.status = TaskStatus::Killed;
        assert_eq!(judge(&e, &st, at).miss.unwrap().reason, MissReason::Killed);
    }

    #[test]
    fn every_reason_has_its_label_in_all() {
        let reasons = [
            MissReason::NoLeader {
                leader_since: UtcMillis(0),
            },
            MissReason::NeverFired,
            MissReason::Held { behind: None },
            MissReason::Running { since: None },
            MissReason::Failing {
                consecutive_failures: 1,
                last_error: None,
            },
            MissReason::Killed,
        ];
        let labels: Vec<&str> = reasons.iter().map(MissReason::as_str).collect();
        assert_eq!(labels, MissReason::ALL);
    }

    #[test]
    fn fires_missed_together_are_one_miss() {
        let sched = every(60);
        let e = exp(&sched, 30);
        // Fires at 60..=600 s; deadlines up to 630 s passed by 640 s: ten fires.
        let j = judge(&e, &state(), UtcMillis(640 * S));
        let miss = j.miss.unwrap();
        assert_eq!(
            (miss.first_fire, miss.last_fire, miss.missed),
            (UtcMillis(60 * S), UtcMillis(600 * S), 10)
        );
        assert_eq!(j.mark, Some(UtcMillis(600 * S)));
        assert_eq!(j.check_at, Some(UtcMillis(690 * S)));
    }

    #[test]
    fn the_count_is_bounded() {
        let sched = every(1);
        let e = exp(&sched, 1);
        let j = judge(&e, &state(), UtcMillis(1_000_000 * S));
        let miss = j.miss.unwrap();
        assert_eq!(miss.missed, MAX_COUNTED_MISSES);
        // The rest is judged at once on the next check.
        assert!(j.check_at.unwrap() <= UtcMillis(1_000_000 * S));
    }

    #[test]
    fn paused_fires_are_not_judged() {
        let sched = every(60);
        let e = Expectation {
            paused: true,
            ..exp(&sched, 30)
        };
        let j = judge(&e, &state(), UtcMillis(640 * S));
        assert_eq!(j.miss, None);
        assert_eq!(j.mark, Some(UtcMillis(640 * S)));
        assert_eq!(j.check_at, None);
    }

    #[test]
    fn a_late_registered_one_shot_counts_from_its_recording() {
        let sched = Schedule::At(UtcMillis(0)).compile().unwrap();
        let e = Expectation {
            anchor: UtcMillis(100 * S),
            ..exp(&sched, 30)
        };
        let j = judge(&e, &state(), UtcMillis(120 * S));
        assert_eq!(j.miss, None);
        assert_eq!(j.check_at, Some(UtcMillis(130 * S)));
        // Succeeded: a one-shot has nothing left to judge.
        let mut st = state();
        st.record_outcome(Ok(()), UtcMillis(110 * S));
        assert_eq!(
            judge(&e, &st, UtcMillis(140 * S)),
            Judgement {
                miss: None,
                mark: None,
                check_at: None
            }
        );
    }
}
