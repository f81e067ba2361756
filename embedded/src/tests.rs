//! The kernel end to end on paused tokio time: every wait is virtual, so a test of minutes
//! of schedule runs in milliseconds and its instants are exact.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_scheduler_core::{
    AttemptOutcome, HandlerError, OverlapPolicy, RetryPolicy, TaskStatus, UtcMillis,
};

use crate::{Context, EmbeddedError, Job, Kernel};

/// What the jobs of a test saw: (label, attempt, fire_at, started at).
pub(crate) type Log = Arc<Mutex<Vec<(String, u32, UtcMillis, UtcMillis)>>>;

pub(crate) fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

pub(crate) fn entries(log: &Log) -> Vec<(String, u32, UtcMillis, UtcMillis)> {
    log.lock().expect("log").clone()
}

/// A job that records its start, then runs for `runs` and ends with `end`.
pub(crate) fn recording(
    kernel: &Kernel,
    log: &Log,
    label: &str,
    runs: Duration,
    end: fn(&Context) -> Result<(), HandlerError>,
) -> Job {
    let (kernel, log, label) = (kernel.clone(), log.clone(), label.to_owned());
    Job::new(move |ctx: Context| {
        let (kernel, log, label) = (kernel.clone(), log.clone(), label.clone());
        async move {
            let entry = (label, ctx.attempt(), ctx.fire_at(), kernel.now());
            log.lock().expect("log").push(entry);
            tokio::time::sleep(runs).await;
            end(&ctx)
        }
    })
}

pub(crate) fn ok(_: &Context) -> Result<(), HandlerError> {
    Ok(())
}

pub(crate) fn no_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 0,
        ..RetryPolicy::default()
    }
}

pub(crate) async fn sleep(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test(start_paused = true)]
async fn after_and_at_fire_on_time_never_early() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let start = kernel.now();
    kernel
        .after(
            Duration::from_secs(1800),
            recording(&kernel, &log, "late", Duration::ZERO, ok),
        )
        .expect("after");
    let at = start.add(Duration::from_millis(1234));
    kernel
        .at(at, recording(&kernel, &log, "at", Duration::ZERO, ok))
        .expect("at");
    let past = start.sub(Duration::from_secs(60));
    kernel
        .at(past, recording(&kernel, &log, "past", Duration::ZERO, ok))
        .expect("at past");
    sleep(1_900_000).await;
    let seen = entries(&log);
    let labels: Vec<&str> = seen.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(labels, ["past", "at", "late"]);
    for (label, _, fire_at, started) in &seen[1..] {
        assert!(started >= fire_at, "{label} ran early");
        assert!(
            started.since(*fire_at) <= Duration::from_millis(20),
            "{label} late"
        );
    }
    assert_eq!(seen[1].2, at);
    assert_eq!(seen[2].2, start.add(Duration::from_secs(1800)));
    // One-shots that ran are forgotten.
    assert!(kernel.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_job_due_before_the_drivers_planned_wakeup_fires_on_time() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let far = recording(&kernel, &log, "far", Duration::ZERO, ok);
    kernel.after(Duration::from_secs(3600), far).expect("far");
    // The driver plans its wakeup for the far job, then sleeps.
    sleep(100).await;
    let later = recording(&kernel, &log, "later", Duration::ZERO, ok);
    kernel.after(Duration::from_secs(60), later).expect("later");
    let soon = recording(&kernel, &log, "soon", Duration::ZERO, ok);
    let due = kernel.now().add(Duration::from_millis(500));
    kernel.at(due, soon).expect("soon");
    sleep(600).await;
    let seen = entries(&log);
    assert_eq!(seen.len(), 1, "only the soon job is due");
    let (label, _, fire_at, started) = &seen[0];
    assert_eq!((label.as_str(), *fire_at), ("soon", due));
    assert!(started.since(*fire_at) <= Duration::from_millis(20), "late");
}

#[tokio::test(start_paused = true)]
async fn every_repeats_until_cancelled() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let id = kernel
        .every(
            Duration::from_secs(1),
            recording(&kernel, &log, "tick", Duration::ZERO, ok),
        )
        .expect("every");
    sleep(3_500).await;
    assert_eq!(entries(&log).len(), 3);
    kernel.cancel(id).expect("cancel");
    assert!(
        matches!(kernel.cancel(id), Err(EmbeddedError::NotFound(i)) if i == id),
        "a cancelled job is gone"
    );
    sleep(5_000).await;
    assert_eq!(entries(&log).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn cron_in_a_zone_fires_on_its_minutes() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    kernel
        .cron(
            "*/15 * * * *",
            "Europe/Paris",
            recording(&kernel, &log, "c", Duration::ZERO, ok),
        )
        .expect("cron");
    sleep(3_600_000).await;
    let seen = entries(&log);
    assert!((4..=5).contains(&seen.len()), "{}", seen.len());
    for (_, _, fire_at, _) in seen {
        assert_eq!(fire_at.0 % (15 * 60_000), 0, "on a quarter hour");
    }
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_an_error_of_the_call() {
    let kernel = Kernel::builder().build().expect("kernel");
    let job = || Job::new(|_| async { Ok(()) });
    let bad_cron = kernel.cron("61 * * * *", "UTC", job());
    assert!(
        matches!(bad_cron, Err(EmbeddedError::InvalidSchedule(_))),
        "{bad_cron:?}"
    );
    let bad_zone = kernel.cron("* * * * *", "Mars/Olympus", job());
    assert!(
        matches!(bad_zone, Err(EmbeddedError::InvalidSchedule(_))),
        "{bad_zone:?}"
    );
    let fast = kernel.every(Duration::from_millis(100), job());
    assert!(
        matches!(fast, Err(EmbeddedError::InvalidSchedule(_))),
        "{fast:?}"
    );
    let far = kernel.after(Duration::MAX, job());
    assert!(matches!(
        far,
        Err(EmbeddedError::Invalid { field: "delay", .. })
    ));
    let zero = kernel.after(Duration::ZERO, job().timeout(Duration::ZERO));
    assert!(matches!(
        zero,
        Err(EmbeddedError::Invalid {
            field: "timeout",
            ..
        })
    ));
    let prio = kernel.after(Duration::ZERO, job().priority(10));
    assert!(matches!(
        prio,
        Err(EmbeddedError::Invalid {
            field: "priority",
            ..
        })
    ));
    let big = kernel.after(Duration::ZERO, job().payload(&"x".repeat(40_000)));
    assert!(
        matches!(big, Err(EmbeddedError::PayloadTooLarge { .. })),
        "{big:?}"
    );
    assert!(kernel.is_empty(), "nothing refused was kept");
    assert!(matches!(
        Kernel::builder().workers(0).build(),
        Err(EmbeddedError::Invalid {
            field: "workers",
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn cancel_before_start_and_kill_while_running() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let later = kernel
        .after(
            Duration::from_secs(10),
            recording(&kernel, &log, "later", Duration::ZERO, ok),
        )
        .expect("after");
    kernel.cancel(later).expect("cancel");
    assert!(matches!(kernel.cancel(later), Err(EmbeddedError::NotFound(i)) if i == later));
    let token = Arc::new(Mutex::new(None));
    let seen = token.clone();
    let long = kernel
        .after(
            Duration::ZERO,
            Job::new(move |ctx| {
                let seen = seen.clone();
                async move {
                    // Hands its token to the test, then hangs until the kernel drops it.
                    *seen.lock().expect("token") = Some(ctx.cancel().clone());
                    std::future::pending().await
                }
            })
            .retry(RetryPolicy::default()),
        )
        .expect("after");
    sleep(100).await;
    assert!(
        matches!(kernel.cancel(long), Err(EmbeddedError::NotFound(i)) if i == long),
        "a running attempt is not cancelled, it is killed"
    );
    assert_eq!(kernel.kill(long).expect("kill"), 1, "one attempt stopped");
    sleep(100).await;
    let token = token.lock().expect("token").clone().expect("it ran");
    assert!(token.is_cancelled(), "its token fired");
    assert!(kernel.is_empty(), "killed: no retry, no dead letter");
    assert!(kernel.dead_letters().is_empty());
    sleep(20_000).await;
    assert!(entries(&log).is_empty());
}

/// The kill switch is the attempt's own token: a job that cancels it stops at once as
/// killed (no retry), rather than running on to its timeout.
#[tokio::test(start_paused = true)]
async fn a_job_that_cancels_its_own_token_is_stopped_as_killed() {
    let kernel = Kernel::builder().build().expect("kernel");
    let attempts = Arc::new(AtomicU32::new(0));
    let counted = attempts.clone();
    kernel
        .after(
            Duration::ZERO,
            Job::new(move |ctx| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    ctx.cancel().cancel();
                    std::future::pending().await
                }
            })
            .timeout(Duration::from_secs(3600))
            .retry(RetryPolicy::default()),
        )
        .expect("after");
    sleep(100).await;
    assert_eq!(attempts.load(Ordering::SeqCst), 1, "not retried");
    assert!(
        kernel.is_empty(),
        "stopped, not left to its hour's timeout, and killed: no retry"
    );
    assert!(kernel.dead_letters().is_empty());
}

#[tokio::test(start_paused = true)]
async fn trigger_pause_and_resume() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let id = kernel
        .every(
            Duration::from_secs(10),
            recording(&kernel, &log, "p", Duration::ZERO, ok),
        )
        .expect("every");
    kernel.trigger(id).expect("trigger");
    sleep(100).await;
    assert_eq!(entries(&log).len(), 1, "triggered at once");
    assert_eq!(kernel.pause(id).expect("pause"), TaskStatus::Paused);
    sleep(35_000).await;
    assert_eq!(entries(&log).len(), 1, "nothing while paused");
    assert_eq!(kernel.resume(id).expect("resume"), TaskStatus::Scheduled);
    sleep(100).await;
    // As a task's pause in the cluster: the schedule goes on from the resume.
    assert_eq!(entries(&log).len(), 1);
    sleep(5_000).await;
    assert_eq!(entries(&log).len(), 2);
    assert!(
        matches!(kernel.pause(crate::JobId(999)), Err(EmbeddedError::NotFound(i)) if i == crate::JobId(999))
    );

    // A pause of everything keeps each job's missed fires for its misfire policy.
    kernel.pause_all();
    sleep(30_000).await;
    assert_eq!(entries(&log).len(), 2);
    kernel.resume_all();
    sleep(100).await;
    assert_eq!(
        entries(&log).len(),
        3,
        "fire_once: the missed fires run as one"
    );
}

#[tokio::test(start_paused = true)]
async fn workers_bound_concurrency_and_priority_orders_the_wait() {
    let kernel = Kernel::builder().workers(1).build().expect("kernel");
    let log = log();
    let run = Duration::from_millis(100);
    kernel
        .after(Duration::ZERO, recording(&kernel, &log, "first", run, ok))
        .expect("first");
    sleep(10).await;
    for (label, priority) in [("low", 1), ("high", 9), ("mid", 5)] {
        let job = recording(&kernel, &log, label, run, ok).priority(priority);
        kernel.after(Duration::ZERO, job).expect("submit");
    }
    sleep(1_000).await;
    let seen = entries(&log);
    let labels: Vec<&str> = seen.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(labels, ["first", "high", "mid", "low"]);
    for pair in seen.windows(2) {
        assert!(pair[1].3.since(pair[0].3) >= run, "one at a time");
    }
}

#[tokio::test(start_paused = true)]
async fn failures_retry_by_policy_then_dead_letter() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let policy = RetryPolicy {
        max_retries: 2,
        initial_interval: Duration::from_secs(1),
        max_interval: Duration::from_secs(10),
        multiplier: 2.0,
        jitter: 0.0,
        max_elapsed: None,
    };
    fn fail(_: &Context) -> Result<(), HandlerError> {
        Err(HandlerError::Retryable("busy".into()))
    }
    let id = kernel
        .after(
            Duration::ZERO,
            recording(&kernel, &log, "f", Duration::ZERO, fail).retry(policy),
        )
        .expect("after");
    sleep(10_000).await;
    let seen = entries(&log);
    let attempts: Vec<u32> = seen.iter().map(|e| e.1).collect();
    assert_eq!(attempts, [1, 2, 3], "counted from 1");
    let gaps: Vec<u128> = seen
        .windows(2)
        .map(|w| w[1].3.since(w[0].3).as_millis())
        .collect();
    assert!(gaps[0] >= 1000 && gaps[0] < 1030, "{gaps:?}");
    assert!(gaps[1] >= 2000 && gaps[1] < 2030, "{gaps:?}");
    let dead = kernel.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].job, dead[0].attempts), (id, 3));
    assert_eq!(dead[0].error, "busy");
    assert!(dead[0].reason.contains("exhausted"), "{}", dead[0].reason);

    kernel.requeue(id).expect("requeue");
    assert!(
        matches!(kernel.requeue(id), Err(EmbeddedError::NotFound(i)) if i == id),
        "its letter is gone"
    );
    sleep(10_000).await;
    assert_eq!(entries(&log).len(), 6, "run again from its first attempt");
    assert_eq!(kernel.purge_dead_letters(), 1);
    assert!(kernel.dead_letters().is_empty());
    assert!(
        kernel.is_empty(),
        "the one-shot kept for its letter is forgotten"
    );
}

#[tokio::test(start_paused = true)]
async fn panics_and_timeouts_are_failed_attempts() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    fn boom(_: &Context) -> Result<(), HandlerError> {
        panic!("boom")
    }
    let panicky = kernel
        .after(
            Duration::ZERO,
            recording(&kernel, &log, "panic", Duration::ZERO, boom).retry(no_retry()),
        )
        .expect("after");
    let slow = recording(&kernel, &log, "slow", Duration::from_secs(60), ok)
        .timeout(Duration::from_secs(1))
        .retry(no_retry());
    let hung = kernel.after(Duration::ZERO, slow).expect("after");
    let permanent = kernel
        .after(
            Duration::ZERO,
            Job::new(|_| async { Err(HandlerError::Permanent("bad order".into())) }),
        )
        .expect("after");
    // Panics in the closure's own call, before it has a future to return.
    let before_its_future = kernel
        .after(
            Duration::ZERO,
            Job::new(|_| -> std::future::Ready<Result<(), HandlerError>> { panic!("no future") })
                .retry(no_retry()),
        )
        .expect("after");
    sleep(2_000).await;
    let mut dead = kernel.dead_letters();
    dead.sort_by_key(|d| d.job);
    let ends: Vec<_> = dead
        .iter()
        .map(|d| (d.job, d.outcome, d.attempts))
        .collect();
    assert_eq!(
        ends,
        [
            (panicky, AttemptOutcome::Panicked, 1),
            (hung, AttemptOutcome::TimedOut, 1),
            (permanent, AttemptOutcome::Failed, 1),
            (before_its_future, AttemptOutcome::Panicked, 1),
        ]
    );
    assert!(dead[0].error.contains("boom"));
    assert!(dead[3].error.contains("no future"), "{}", dead[3].error);
    // The kernel lives on.
    let after = kernel
        .after(
            Duration::ZERO,
            recording(&kernel, &log, "after", Duration::ZERO, ok),
        )
        .expect("after");
    sleep(100).await;
    assert_eq!(
        entries(&log).last().map(|e| e.0.clone()).as_deref(),
        Some("after")
    );
    assert!(kernel.status(after).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_idempotency_key_makes_one_job() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let job = || recording(&kernel, &log, "o", Duration::ZERO, ok).idempotency_key("order-7");
    let a = kernel.after(Duration::from_secs(5), job()).expect("first");
    let b = kernel.after(Duration::from_secs(9), job()).expect("again");
    assert_eq!(a, b);
    assert_eq!(kernel.len(), 1);
    sleep(20_000).await;
    assert_eq!(entries(&log).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn forbid_holds_a_periodic_fire_while_the_last_runs() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let running = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let (r, m, l, k) = (running.clone(), most.clone(), log.clone(), kernel.clone());
    let job = Job::new(move |ctx| {
        let (r, m, l, k) = (r.clone(), m.clone(), l.clone(), k.clone());
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            l.lock()
                .expect("log")
                .push(("o".into(), ctx.attempt(), ctx.fire_at(), k.now()));
            sleep(2_500).await;
            r.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    })
    .overlap(OverlapPolicy::Forbid);
    kernel.every(Duration::from_secs(1), job).expect("every");
    sleep(10_000).await;
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two at once");
    let n = entries(&log).len();
    assert!((3..=5).contains(&n), "held fires merged: {n}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_then_stops() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    kernel
        .after(
            Duration::ZERO,
            recording(&kernel, &log, "short", Duration::from_secs(1), ok),
        )
        .expect("short");
    sleep(10).await;
    let report = kernel.shutdown(Duration::from_secs(5)).await;
    assert!(report.drained);
    let refused = kernel.after(Duration::ZERO, Job::new(|_| async { Ok(()) }));
    assert!(matches!(refused, Err(EmbeddedError::ShuttingDown)));

    let kernel = Kernel::builder().build().expect("kernel");
    kernel
        .after(
            Duration::ZERO,
            recording(&kernel, &log, "long", Duration::from_secs(600), ok),
        )
        .expect("long");
    kernel
        .after(
            Duration::from_millis(500),
            recording(&kernel, &log, "never", Duration::ZERO, ok),
        )
        .expect("never");
    sleep(10).await;
    let report = kernel.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.drained, report.stopped), (false, 1));
    let labels: Vec<String> = entries(&log).into_iter().map(|e| e.0).collect();
    assert_eq!(
        labels,
        ["short", "long"],
        "nothing starts once shutdown began"
    );
}

#[tokio::test(start_paused = true)]
async fn payload_reaches_the_job() {
    let kernel = Kernel::builder().build().expect("kernel");
    let got = Arc::new(Mutex::new(None));
    let g = got.clone();
    let job = Job::new(move |ctx| {
        let g = g.clone();
        async move {
            let order: u64 = ctx.payload_as()?;
            *g.lock().expect("got") = Some(order);
            Ok(())
        }
    })
    .payload(&42u64);
    kernel.after(Duration::from_secs(1), job).expect("after");
    sleep(2_000).await;
    assert_eq!(*got.lock().expect("got"), Some(42));
}

/// A fire that came due is still to come until it is dispatched: in a burst larger than a
/// step's dispatches it waits in the dispatcher's ready queue, and while every job is paused
/// it is parked. Either way a cancel stops it, and says so.
#[tokio::test(start_paused = true)]
async fn a_due_fire_not_dispatched_yet_is_cancelled() {
    let kernel = Kernel::builder().workers(1).build().expect("kernel");
    let ran = Arc::new(Mutex::new(Vec::new()));
    let job = |name: &'static str| {
        let ran = ran.clone();
        Job::new(move |_| {
            ran.lock().expect("ran").push(name);
            // Long enough that the burst is dispatched in several steps.
            async {
                sleep(1).await;
                Ok(())
            }
        })
    };
    let due = kernel.now().add(Duration::from_millis(500));
    for _ in 0..2_000 {
        kernel.at(due, job("burst")).expect("at");
    }
    let last = kernel.at(due, job("last")).expect("at");
    sleep(500).await;
    tokio::task::yield_now().await;
    assert_eq!(
        kernel.status(last),
        Some(TaskStatus::Scheduled),
        "due, not dispatched"
    );
    kernel
        .cancel(last)
        .expect("a fire not started is cancelled");
    assert!(kernel.status(last).is_none());

    kernel.pause_all();
    let parked = kernel
        .after(Duration::from_secs(5), job("parked"))
        .expect("after");
    sleep(10_000).await;
    kernel.cancel(parked).expect("a parked fire is cancelled");
    kernel.resume_all();
    sleep(10_000).await;
    let ran = ran.lock().expect("ran");
    assert_eq!(ran.len(), 2_000, "the burst ran");
    assert!(
        !ran.contains(&"last") && !ran.contains(&"parked"),
        "the cancelled did not"
    );
}
