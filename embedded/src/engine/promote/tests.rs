//! The engine alone, on a hand-turned clock: a burst of staged jobs due faster than the
//! fire path runs them is promoted no further ahead of its starts than the bound, and fires
//! exactly as a reference model says (each job once, never early, in the order of its
//! instant), cancels in the middle of it included.

use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::attempt::Verdict;
use ax_scheduler_core::{DispatcherConfig, Schedule, UtcMillis};

use super::PROMOTED_AHEAD;
use crate::engine::{Engine, Launch};
use crate::job::{Body, Job, JobFn};
use crate::job_id::JobId;
use crate::kernel::spec_of;
use crate::staging::STAGING_WINDOW;

const WORKERS: usize = 5;
const T0: UtcMillis = UtcMillis(1_700_000_000_000);

fn body() -> Arc<JobFn> {
    match Job::new(|_| async { Ok(()) }).body {
        Body::Closure(run) => run,
        Body::Named(_) => unreachable!("a closure job"),
    }
}

/// Submits a no-op one-shot due at `due`, at `T0`.
fn submit(engine: &mut Engine, run: &Arc<JobFn>, due: UtcMillis) -> JobId {
    let job = Job::new(|_| async { Ok(()) });
    let spec = spec_of(Schedule::At(due), serde_json::Value::Null, &job, T0);
    engine.submit(spec, (Arc::clone(run), false), T0).0
}

/// Fails with the first place the fires leave the model's order, not with both lists.
fn assert_same_order(fired: &[(JobId, UtcMillis)], expected: &[(JobId, UtcMillis)], what: &str) {
    let at = fired.iter().zip(expected).position(|(a, b)| a != b);
    if let Some(i) = at {
        let around =
            |v: &[(JobId, UtcMillis)]| v[i.saturating_sub(2)..(i + 3).min(v.len())].to_vec();
        panic!(
            "{what}: fire {i} left the order: fired {:?}, the model {:?}",
            around(fired),
            around(expected)
        );
    }
    assert_eq!(fired.len(), expected.len(), "{what}: none lost");
}

/// A small deterministic generator (xorshift), for the cases below.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What the burst did: each start's job, instant and time, the most jobs held as tasks at
/// once, and the cancels' answers.
struct Run {
    started: Vec<(JobId, UtcMillis, UtcMillis)>,
    most_tasks: usize,
    cancels: Vec<(JobId, bool)>,
}

/// Turns the engine as the driver and the attempts do, `per_ms` starts a millisecond (each
/// attempt ends at once and takes the next step), from `from` until nothing is left or
/// `until`; every `cancel_every` starts the next of `to_cancel` is cancelled.
fn turn(
    engine: &mut Engine,
    (from, until): (UtcMillis, UtcMillis),
    per_ms: usize,
    mut to_cancel: Vec<JobId>,
    cancel_every: usize,
) -> Run {
    let mut run = Run {
        started: Vec::new(),
        most_tasks: 0,
        cancels: Vec::new(),
    };
    let mut now = from;
    let mut launches: Vec<Launch> = Vec::new();
    let mut ready = std::collections::VecDeque::new();
    engine.step(now, &mut launches);
    while engine.len() > 0 && now < until {
        for _ in 0..per_ms {
            ready.extend(launches.drain(..));
            let Some(launch) = ready.pop_front() else {
                break;
            };
            let attempt = launch.attempt;
            run.started.push((attempt.job, attempt.fire_at, now));
            if run.started.len().is_multiple_of(cancel_every) {
                if let Some(id) = to_cancel.pop() {
                    run.cancels.push((id, engine.cancel(id, now).is_ok()));
                }
            }
            engine.finish(attempt, Verdict::succeeded(), now);
            engine.step(now, &mut launches);
            run.most_tasks = run.most_tasks.max(engine.jobs.len());
        }
        now = now.add(Duration::from_millis(1));
        ready.extend(launches.drain(..));
        engine.step(now, &mut launches);
        run.most_tasks = run.most_tasks.max(engine.jobs.len());
    }
    run
}

#[test]
fn a_burst_is_promoted_one_job_per_start_not_all_at_once() {
    let mut engine = Engine::new(DispatcherConfig::default(), WORKERS, T0);
    let run = body();
    let n = 4 * PROMOTED_AHEAD as u64;
    let first = T0.add(STAGING_WINDOW + Duration::from_secs(1));
    // Due over 0.5 s: 8 a millisecond beside 4 started a millisecond.
    let ids: Vec<(UtcMillis, JobId)> = (0..n)
        .map(|i| {
            let due = first.add(Duration::from_millis(i * 500 / n));
            (due, submit(&mut engine, &run, due))
        })
        .collect();
    assert_eq!(engine.staged(), n as usize);
    let window = (T0, first.add(Duration::from_secs(60)));
    let out = turn(&mut engine, window, 4, Vec::new(), usize::MAX);
    // Before the bound, every ripe job was made a task in the second before its instant:
    // all of them, against the few the workers start.
    assert!(
        out.most_tasks <= PROMOTED_AHEAD + WORKERS,
        "{} jobs held as tasks at once",
        out.most_tasks
    );
    let expected: Vec<(JobId, UtcMillis)> = ids.iter().map(|&(due, id)| (id, due)).collect();
    let fired: Vec<(JobId, UtcMillis)> = out.started.iter().map(|s| (s.0, s.1)).collect();
    assert_same_order(
        &fired,
        &expected,
        "each job once, in the order of its instant",
    );
    assert!(out.started.iter().all(|s| s.2 >= s.1), "none early");
    assert_eq!((engine.len(), engine.staged()), (0, 0));
}

#[test]
fn bursts_in_any_order_fire_as_the_model_says_cancels_included() {
    for seed in 1..=4u64 {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed);
        let mut engine = Engine::new(DispatcherConfig::default(), WORKERS, T0);
        let run = body();
        let n = 3 * PROMOTED_AHEAD as u64 + rng.below(1000);
        let first = T0.add(STAGING_WINDOW + Duration::from_millis(10 + rng.below(500)));
        let spread = 1 + rng.below(2000);
        let mut model: Vec<(UtcMillis, u64, JobId)> = (0..n)
            .map(|seq| {
                let due = first.add(Duration::from_millis(rng.below(spread)));
                (due, seq, submit(&mut engine, &run, due))
            })
            .collect();
        let to_cancel: Vec<JobId> = (0..200).map(|_| model[rng.below(n) as usize].2).collect();
        let per_ms = 1 + rng.below(8) as usize;
        let window = (T0, first.add(Duration::from_secs(120)));
        let out = turn(&mut engine, window, per_ms, to_cancel, 7);
        assert!(out.most_tasks <= PROMOTED_AHEAD + WORKERS, "seed {seed}");
        // A cancel takes a job that has not started, once; the model drops it.
        let started: std::collections::HashSet<JobId> = out.started.iter().map(|s| s.0).collect();
        let mut dropped = std::collections::HashSet::new();
        for (id, cancelled) in &out.cancels {
            if *cancelled {
                assert!(dropped.insert(*id), "seed {seed}: {id:?} cancelled twice");
                assert!(
                    !started.contains(id),
                    "seed {seed}: {id:?} ran after its cancel"
                );
            }
        }
        model.retain(|m| !dropped.contains(&m.2));
        model.sort_unstable();
        let expected: Vec<(JobId, UtcMillis)> = model.iter().map(|m| (m.2, m.0)).collect();
        let fired: Vec<(JobId, UtcMillis)> = out.started.iter().map(|s| (s.0, s.1)).collect();
        assert_same_order(&fired, &expected, &format!("seed {seed}"));
        assert!(
            out.started.iter().all(|s| s.2 >= s.1),
            "seed {seed}: none early"
        );
        assert_eq!(engine.len(), 0, "seed {seed}");
    }
}
