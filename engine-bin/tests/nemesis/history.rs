//! The history checker: what the receiver recorded, against what the load wrote and what
//! the faults did.
//!
//! A fire is a task's slot (task id and due instant); an execution is one run of a fire,
//! named by its execution id, and carries the fencing token of the leader that fired it.
//! Delivery is at least once, so an execution may arrive more than once when a worker
//! stopped, died or lost Redis while it held it; a fire must never be made twice. The
//! checker therefore counts, from the recorded requests alone:
//!
//! - one-shots written that never ran (lost);
//! - fires made under two fencing tokens (two leaders fired the same slot);
//! - fires made as two executions (a slot doubled, whatever the tokens);
//! - executions delivered more than once, which must stay within what the faults on
//!   workers explain (each such fault: at most what one worker holds);
//! - lateness (start against due) of the one-shots, and how many started early.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::harness::Execution;
use super::load::OneShot;

/// How early a start may be beyond the clock steps' explanation: the receiver stamps
/// arrivals by the same host clock, so only the time a request takes to be stamped.
const EARLY_SLACK_MS: i64 = 50;

/// One fire as the requests show it: the fencing tokens and the execution ids it ran under.
type Fire<'a> = (BTreeSet<u64>, BTreeSet<&'a str>);

/// What the history shows.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// Requests recorded.
    pub(crate) requests: usize,
    /// One-shots that never ran.
    pub(crate) lost: Vec<String>,
    /// Fires (task, due) made under more than one fencing token.
    pub(crate) two_tokens: Vec<(String, i64)>,
    /// Fires made as more than one execution.
    pub(crate) doubled: Vec<(String, i64)>,
    /// Executions delivered more than once.
    pub(crate) redelivered: usize,
    /// Runs of the periodic tasks.
    pub(crate) periodic_runs: usize,
    /// One-shot lateness at its first start, ms: p50, p99, max.
    pub(crate) late_ms: (i64, i64, i64),
    /// One-shots first started before their due instant.
    pub(crate) early: usize,
    /// How early the earliest of them started, ms.
    pub(crate) earliest_ms: i64,
}

/// Checks `runs` against the one-shots written; `periodic` names the periodic tasks.
pub(crate) fn check(one_shots: &[OneShot], periodic: &[&str], runs: &[Execution]) -> Verdict {
    let mut fires: BTreeMap<(&str, i64), Fire> = BTreeMap::new();
    let mut deliveries: HashMap<&str, usize> = HashMap::new();
    let mut first_start: HashMap<&str, i64> = HashMap::new();
    for r in runs {
        let fire = fires.entry((r.task_id.as_str(), r.fire_at)).or_default();
        fire.0.insert(r.fencing_token);
        fire.1.insert(r.execution_id.as_str());
        *deliveries.entry(r.execution_id.as_str()).or_default() += 1;
        let first = first_start.entry(r.task_id.as_str()).or_insert(i64::MAX);
        *first = (*first).min(r.arrived_at);
    }
    let mut late = Vec::new();
    let mut early = 0;
    let mut lost = Vec::new();
    for o in one_shots {
        match first_start.get(o.id.as_str()) {
            Some(start) => {
                late.push(start - o.due);
                early += usize::from(*start < o.due);
            }
            None => lost.push(o.id.clone()),
        }
    }
    late.sort_unstable();
    let at = |q: f64| {
        // Truncation picks the rank at or below the quantile.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let i = ((late.len().saturating_sub(1)) as f64 * q) as usize;
        late.get(i).copied().unwrap_or(0)
    };
    let pick = |many: fn(&Fire) -> bool| {
        fires
            .iter()
            .filter(|(_, f)| many(f))
            .map(|((t, due), _)| ((*t).to_owned(), *due))
            .collect::<Vec<_>>()
    };
    Verdict {
        requests: runs.len(),
        lost,
        two_tokens: pick(|f| f.0.len() > 1),
        doubled: pick(|f| f.1.len() > 1),
        redelivered: deliveries.values().filter(|n| **n > 1).count(),
        periodic_runs: runs
            .iter()
            .filter(|r| periodic.contains(&r.task_id.as_str()))
            .count(),
        late_ms: (at(0.5), at(0.99), late.last().copied().unwrap_or(0)),
        early,
        earliest_ms: late.first().map_or(0, |l| (-l).max(0)),
    }
}

impl Verdict {
    /// What breaks the guarantees, given how many executions the faults on workers may have
    /// had delivered twice and how far ahead a replica's clock was stepped (a leader fires by
    /// its own clock); empty when the history is clean.
    pub(crate) fn violations(&self, redelivery_bound: usize, clock_ahead_ms: i64) -> Vec<String> {
        let mut wrong = Vec::new();
        // Beyond the step, a few ms of the receiver's and the replica's clocks reading apart.
        if self.earliest_ms > clock_ahead_ms + EARLY_SLACK_MS {
            wrong.push(format!(
                "a one-shot started {} ms early, with clocks stepped at most {clock_ahead_ms} ms ahead",
                self.earliest_ms
            ));
        }
        if !self.lost.is_empty() {
            wrong.push(format!(
                "{} one-shots lost: {:?}",
                self.lost.len(),
                first(&self.lost)
            ));
        }
        if !self.two_tokens.is_empty() {
            wrong.push(format!(
                "{} fires under two fencing tokens: {:?}",
                self.two_tokens.len(),
                first(&self.two_tokens)
            ));
        }
        if !self.doubled.is_empty() {
            wrong.push(format!(
                "{} fires run as two executions: {:?}",
                self.doubled.len(),
                first(&self.doubled)
            ));
        }
        if self.redelivered > redelivery_bound {
            wrong.push(format!(
                "{} executions delivered twice, more than the faults on workers explain ({redelivery_bound})",
                self.redelivered
            ));
        }
        if self.periodic_runs == 0 {
            wrong.push("the periodic tasks never ran".to_owned());
        }
        wrong
    }
}

fn first<T>(items: &[T]) -> &[T] {
    &items[..items.len().min(5)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(task: &str, fire_at: i64, id: &str, token: u64, arrived_at: i64) -> Execution {
        Execution {
            namespace: "nemesis".into(),
            task_id: task.into(),
            execution_id: id.into(),
            fire_at,
            attempt: 1,
            fencing_token: token,
            run_now: false,
            payload: serde_json::Value::Null,
            backfill_of: None,
            run_id: None,
            piece: None,
            target_worker: None,
            completion: None,
            arrived_at,
        }
    }

    fn shot(id: &str, due: i64) -> OneShot {
        OneShot { id: id.into(), due }
    }

    #[test]
    fn a_clean_history_has_no_violation() {
        let runs = [
            run("o1", 100, "e1", 3, 110),
            run("p1", 1000, "e2", 3, 1005),
            run("p1", 2000, "e3", 4, 2005),
        ];
        let v = check(&[shot("o1", 100)], &["p1"], &runs);
        assert!(v.violations(0, 0).is_empty(), "{v:?}");
        assert_eq!(v.late_ms, (10, 10, 10));
        assert_eq!(v.periodic_runs, 2);
    }

    #[test]
    fn a_lost_one_shot_is_found() {
        let runs = [run("p1", 1000, "e2", 3, 1005)];
        let v = check(&[shot("o1", 100), shot("o2", 100)], &["p1"], &runs);
        assert_eq!(v.lost, ["o1", "o2"]);
        assert_eq!(v.violations(0, 0).len(), 1);
    }

    #[test]
    fn a_slot_fired_by_two_leaders_is_found_twice_over() {
        let runs = [
            run("o1", 100, "e1", 3, 110),
            run("o1", 100, "e9", 4, 120),
            run("p1", 1000, "e2", 3, 1005),
        ];
        let v = check(&[shot("o1", 100)], &["p1"], &runs);
        assert_eq!(v.two_tokens, [("o1".to_owned(), 100)]);
        assert_eq!(v.doubled, [("o1".to_owned(), 100)]);
        assert_eq!(v.violations(10, 0).len(), 2);
    }

    #[test]
    fn a_slot_doubled_under_one_token_is_found() {
        let runs = [
            run("p1", 1000, "e1", 3, 1005),
            run("p1", 1000, "e2", 3, 1006),
        ];
        let v = check(&[], &["p1"], &runs);
        assert!(v.two_tokens.is_empty());
        assert_eq!(v.doubled.len(), 1);
    }

    #[test]
    fn redeliveries_count_against_what_the_faults_explain() {
        let runs = [
            run("o1", 100, "e1", 3, 110),
            run("o1", 100, "e1", 3, 5000),
            run("p1", 1000, "e2", 3, 1005),
        ];
        let v = check(&[shot("o1", 100)], &["p1"], &runs);
        assert_eq!(v.redelivered, 1);
        assert!(v.doubled.is_empty());
        assert!(v.violations(1, 0).is_empty());
        assert_eq!(v.violations(0, 0).len(), 1);
        // Lateness counts the first start only.
        assert_eq!(v.late_ms.2, 10);
    }

    #[test]
    fn an_early_start_is_counted() {
        let runs = [run("o1", 100, "e1", 3, 90), run("p1", 1000, "e2", 3, 1005)];
        let v = check(&[shot("o1", 100)], &["p1"], &runs);
        assert_eq!(v.early, 1);
        assert_eq!(v.late_ms.0, -10);
        assert_eq!(v.earliest_ms, 10);
        assert!(v.violations(0, 0).is_empty(), "within the slack");
        let runs = [
            run("o1", 1000, "e1", 3, 100),
            run("p1", 1000, "e2", 3, 1005),
        ];
        let v = check(&[shot("o1", 1000)], &["p1"], &runs);
        assert_eq!(v.violations(0, 0).len(), 1);
        assert!(
            v.violations(0, 900).is_empty(),
            "a clock stepped 900 ms ahead explains it"
        );
    }
}
