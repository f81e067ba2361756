//! Staged jobs through the kernel on paused time: promoted a window ahead, fired on time,
//! and every operation on one doing what it does on a task; and a restart finding them.

use std::time::Duration;

use ax_scheduler_core::{TaskStatus, UtcMillis};

use super::STAGING_WINDOW;
use crate::tests::{entries, log, ok, recording, sleep, Log};
use crate::{EmbeddedError, Job, Kernel, When};

const HOUR: Duration = Duration::from_secs(3600);

/// Sleeps until the kernel's time is `t`.
async fn until(kernel: &Kernel, t: UtcMillis) {
    let ms = t.0 - kernel.now().0;
    assert!(ms >= 0, "{t:?} passed");
    sleep(ms as u64).await;
}

fn job(kernel: &Kernel, log: &Log, label: &str) -> Job {
    recording(kernel, log, label, Duration::ZERO, ok)
}

fn labels(log: &Log) -> Vec<String> {
    entries(log).into_iter().map(|e| e.0).collect()
}

#[tokio::test(start_paused = true)]
async fn a_staged_job_becomes_a_task_a_window_ahead_and_fires_on_time() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let start = kernel.now();
    let due = start.add(HOUR);
    let far = kernel.at(due, job(&kernel, &log, "far")).expect("far");
    let edge_due = start.add(STAGING_WINDOW + Duration::from_millis(1));
    kernel
        .at(edge_due, job(&kernel, &log, "edge"))
        .expect("edge");
    // Due within the window: a task at once, as before staging existed.
    kernel
        .after(STAGING_WINDOW, job(&kernel, &log, "near"))
        .expect("near");
    assert_eq!((kernel.staged(), kernel.len()), (2, 3));
    assert_eq!(kernel.status(far), Some(TaskStatus::Scheduled));

    until(&kernel, edge_due.add(Duration::from_millis(50))).await;
    assert_eq!(labels(&log), ["near", "edge"]);
    let promote_at = due.sub(STAGING_WINDOW);
    until(&kernel, promote_at.sub(Duration::from_millis(20))).await;
    assert_eq!(
        (kernel.staged(), kernel.len()),
        (1, 1),
        "not promoted early"
    );
    until(&kernel, promote_at.add(Duration::from_millis(20))).await;
    assert_eq!((kernel.staged(), kernel.len()), (0, 1), "promoted on time");
    assert_eq!(kernel.status(far), Some(TaskStatus::Scheduled));
    until(&kernel, due.sub(Duration::from_millis(5))).await;
    assert_eq!(labels(&log).len(), 2, "not fired early");
    until(&kernel, due.add(Duration::from_millis(100))).await;
    let seen = entries(&log);
    assert_eq!(seen.len(), 3);
    for (label, _, fire_at, started) in &seen {
        assert!(started >= fire_at, "{label} ran early");
        let late = started.since(*fire_at);
        assert!(late <= Duration::from_millis(20), "{label} {late:?} late");
    }
    assert_eq!((seen[2].0.as_str(), seen[2].2), ("far", due));
    assert!(kernel.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_staged_job_never_runs_and_its_neighbours_do() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    // Same options: they share one spec.
    let a = kernel.after(HOUR, job(&kernel, &log, "a")).expect("a");
    let b = kernel.after(HOUR, job(&kernel, &log, "b")).expect("b");
    assert_ne!(a, b);
    kernel.cancel(a).expect("cancel");
    assert!(
        matches!(kernel.cancel(a), Err(EmbeddedError::NotFound(i)) if i == a),
        "cancelled once"
    );
    assert_eq!(kernel.status(a), None);
    assert_eq!(kernel.len(), 1);
    // Cancelled once promoted too.
    let c = kernel
        .after(HOUR + Duration::from_secs(10), job(&kernel, &log, "c"))
        .expect("c");
    sleep(HOUR.as_millis() as u64 + 9_500).await;
    assert_eq!(kernel.staged(), 0);
    kernel.cancel(c).expect("cancel");
    sleep(60_000).await;
    assert_eq!(labels(&log), ["b"]);
    assert!(kernel.is_empty());
}

#[tokio::test(start_paused = true)]
async fn trigger_pause_and_kill_act_on_a_staged_job() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let start = kernel.now();
    let t = kernel.after(HOUR, job(&kernel, &log, "t")).expect("t");
    let p = kernel.after(HOUR, job(&kernel, &log, "p")).expect("p");
    let k = kernel.after(HOUR, job(&kernel, &log, "k")).expect("k");
    kernel.trigger(t).expect("trigger");
    sleep(100).await;
    assert_eq!(labels(&log), ["t"], "triggered at once");
    assert_eq!(kernel.pause(p).expect("pause"), TaskStatus::Paused);
    assert_eq!(kernel.status(p), Some(TaskStatus::Paused));
    assert_eq!(kernel.kill(k).expect("kill"), 0, "nothing of it runs");
    assert_eq!(kernel.len(), 3);
    until(&kernel, start.add(HOUR + Duration::from_secs(60))).await;
    // The trigger left the schedule alone; the paused one waits.
    let mut ran = labels(&log);
    ran.sort();
    assert_eq!(ran, ["k", "t", "t"]);
    kernel.resume(p).expect("resume");
    sleep(100).await;
    assert_eq!(
        labels(&log),
        ["t", "t", "k", "p"],
        "its missed fire runs once"
    );
    assert!(kernel.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_idempotency_key_finds_a_staged_job() {
    let kernel = Kernel::builder().build().expect("kernel");
    let log = log();
    let keyed = |label: &str| job(&kernel, &log, label).idempotency_key("order-42");
    let first = kernel.after(HOUR, keyed("first")).expect("first");
    let again = kernel.after(HOUR, keyed("again")).expect("again");
    assert_eq!(first, again);
    assert_eq!((kernel.staged(), kernel.len()), (1, 1));
    // Still the same job once it is a task.
    sleep(HOUR.as_millis() as u64 - 500).await;
    assert_eq!(kernel.staged(), 0);
    assert_eq!(kernel.after(HOUR, keyed("late")).expect("late"), first);
    sleep(1_000).await;
    assert_eq!(labels(&log), ["first"]);
    // A cancel frees the key.
    let next = kernel.after(HOUR, keyed("next")).expect("next");
    assert_ne!(next, first);
    kernel.cancel(next).expect("cancel");
    let other = kernel.after(HOUR, keyed("other")).expect("other");
    assert_ne!(other, next);
    assert_eq!(kernel.len(), 1);
}

/// Real time: the store's writer is a thread and its fsyncs take real time.
#[tokio::test]
async fn a_restart_stages_what_the_store_holds_far_ahead() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("jobs.redb");
    let ran = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let build = || {
        let ran = ran.clone();
        Kernel::builder()
            .store(&path)
            .handler(
                "record",
                crate::typed(move |ctx: crate::handler::Typed<u64>| {
                    let ran = ran.clone();
                    async move {
                        ran.lock().expect("ran").push((ctx.payload, ctx.fire_at()));
                        Ok(())
                    }
                }),
            )
            .build()
            .expect("kernel")
    };
    let k = build();
    let submit = |k: &Kernel, n: u64, delay: Duration| {
        let job = Job::named("record")
            .payload(&n)
            .idempotency_key(n.to_string());
        let k = k.clone();
        async move { k.submit(When::After(delay), job).await.expect("submit") }
    };
    // Far enough that the restart comes before its promotion, on a busy machine too.
    let soon_in = STAGING_WINDOW * 3;
    let due = k.now().add(soon_in);
    let soon = submit(&k, 1, soon_in).await;
    let far = submit(&k, 2, HOUR).await;
    let gone = submit(&k, 3, HOUR).await;
    assert_eq!(k.staged(), 3);
    k.cancel(gone).expect("cancel");
    k.shutdown(Duration::from_secs(1)).await;

    let k = build();
    assert_eq!((k.staged(), k.len()), (2, 2));
    assert_eq!(k.status(far), Some(TaskStatus::Scheduled));
    assert_eq!(submit(&k, 2, HOUR).await, far, "its key is known");
    assert!(ran.lock().expect("ran").is_empty());
    for _ in 0..600 {
        if !ran.lock().expect("ran").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seen = ran.lock().expect("ran").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, 1);
    assert!(
        seen[0].1 >= due,
        "fired at its instant: {:?} {due:?}",
        seen[0].1
    );
    assert_eq!(k.status(soon), None, "done and forgotten");
    k.cancel(far).expect("cancel");
    k.shutdown(Duration::from_secs(1)).await;
    assert!(build().is_empty(), "the cancel reached the file");
}

/// A burst's promotions come a bounded number per step, in order, and a ripe job waiting
/// for its turn is still staged: found, counted and cancelled like any other.
#[test]
fn ripe_jobs_are_promoted_in_bounded_steps_and_stay_cancellable() {
    use ax_scheduler_core::timer::TimerConfig;
    use ax_scheduler_core::Schedule;

    use super::Staging;
    use crate::job::Body;

    let now = UtcMillis(1_000_000);
    let mut staging = Staging::new(TimerConfig::default(), now);
    let job = Job::new(|_| async { Ok(()) });
    let Body::Closure(run) = &job.body else {
        unreachable!("Job::new makes a closure job")
    };
    let due = now.add(HOUR);
    let promote_at = due.sub(STAGING_WINDOW);
    let spec = crate::kernel::spec_of(Schedule::At(due), serde_json::Value::Null, &job, now);
    let ids: Vec<_> = (0..10)
        .map(|_| {
            let id = staging.stage(spec.clone(), run.clone(), promote_at, |_| false);
            id.unwrap_or_else(|_| panic!("staged"))
        })
        .collect();
    assert_eq!(
        staging
            .due(promote_at.sub(Duration::from_millis(1)), 4)
            .len(),
        0
    );

    let first = staging.due(promote_at, 4);
    assert_eq!(first.iter().map(|p| p.id).collect::<Vec<_>>(), ids[..4]);
    assert_eq!(staging.len(), 6);
    assert!(
        staging.next_due().is_some_and(|at| at <= promote_at),
        "the rest are due now"
    );
    // Cancelled before its turn: taken out, never promoted.
    assert!(staging.contains(ids[6]));
    assert!(staging.take(ids[6]).is_some());
    assert!(!staging.contains(ids[6]));
    assert!(
        staging.contains(ids[7]),
        "found through the index the cancel made"
    );
    assert!(staging.take(ids[6]).is_none());
    assert_eq!(staging.len(), 5);

    let later = promote_at.add(Duration::from_millis(3));
    let second = staging.due(later, 4);
    let expect = [ids[4], ids[5], ids[7], ids[8]];
    assert_eq!(second.iter().map(|p| p.id).collect::<Vec<_>>(), expect);
    assert!(second.iter().all(|p| p.spec.schedule == Schedule::At(due)));
    let third = staging.due(later, 4);
    assert_eq!(third.iter().map(|p| p.id).collect::<Vec<_>>(), ids[9..]);
    assert_eq!((staging.len(), staging.next_due()), (0, None));
    assert!(staging.due(later, 4).is_empty());
}
