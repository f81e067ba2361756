//! Dependent jobs (`Kernel::when_done`) on paused time: the dispatcher's runs, fan-in and
//! skipped steps, as for cluster tasks, and the kernel forgetting a chain once it is over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_embedded::{EmbeddedError, HandlerError, Job, Kernel, Parent, RetryPolicy, UtcMillis};

type Log = Arc<Mutex<Vec<(String, UtcMillis)>>>;

/// A job that records its label and start, then ends as `ok` says.
fn job(kernel: &Kernel, log: &Log, label: &str, ok: bool) -> Job {
    let (kernel, log, label) = (kernel.clone(), log.clone(), label.to_owned());
    Job::new(move |_| {
        let (kernel, log, label) = (kernel.clone(), log.clone(), label.clone());
        async move {
            log.lock().unwrap().push((label, kernel.now()));
            if ok {
                Ok(())
            } else {
                Err(HandlerError::Permanent("no".into()))
            }
        }
    })
    .retry(RetryPolicy {
        max_retries: 0,
        ..RetryPolicy::default()
    })
}

fn labels(log: &Log) -> Vec<String> {
    log.lock().unwrap().iter().map(|e| e.0.clone()).collect()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test(start_paused = true)]
async fn a_chain_runs_in_order_once_and_is_forgotten_when_over() {
    let kernel = Kernel::builder().build().unwrap();
    let log: Log = Arc::default();
    // An hour ahead: the parent waits staged until the child names it.
    let extract = kernel
        .after(secs(3600), job(&kernel, &log, "extract", true))
        .unwrap();
    let transform = kernel
        .when_done([extract], job(&kernel, &log, "transform", true))
        .unwrap();
    let load = kernel
        .when_done([transform], job(&kernel, &log, "load", true))
        .unwrap();
    assert_eq!(kernel.len(), 3);
    tokio::time::sleep(secs(3700)).await;
    assert_eq!(labels(&log), ["extract", "transform", "load"]);
    let starts: Vec<UtcMillis> = log.lock().unwrap().iter().map(|e| e.1).collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(kernel.len(), 0, "the chain is over: nothing of it is kept");
    assert_eq!(kernel.status(load), None);
    kernel.shutdown(secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_parent_skips_success_children_and_runs_failure_ones() {
    let kernel = Kernel::builder().build().unwrap();
    let log: Log = Arc::default();
    let parent = kernel
        .after(secs(1), job(&kernel, &log, "parent", false))
        .unwrap();
    kernel
        .when_done([parent], job(&kernel, &log, "on-success", true))
        .unwrap();
    kernel
        .when_done(
            [Parent::failed(parent)],
            job(&kernel, &log, "on-failure", true),
        )
        .unwrap();
    kernel
        .when_done([Parent::ended(parent)], job(&kernel, &log, "on-any", true))
        .unwrap();
    tokio::time::sleep(secs(10)).await;
    let mut seen = labels(&log);
    seen.sort();
    assert_eq!(seen, ["on-any", "on-failure", "parent"]);
    // The dead-lettered parent is kept (a requeue starts a new run), and so are the jobs
    // that wait on it; purging its dead letter lets the whole chain go.
    assert_eq!(kernel.dead_letters().len(), 1);
    assert_eq!(kernel.len(), 4);
    assert_eq!(kernel.purge_dead_letters(), 1);
    assert_eq!(kernel.len(), 0);
    kernel.shutdown(secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn fan_in_waits_for_every_parent_and_a_periodic_parent_runs_its_child_each_time() {
    let kernel = Kernel::builder().build().unwrap();
    let log: Log = Arc::default();
    let root = kernel
        .after(secs(1), job(&kernel, &log, "root", true))
        .unwrap();
    let quick = kernel
        .when_done([root], job(&kernel, &log, "quick", true))
        .unwrap();
    let slow = Job::new({
        let (kernel, log) = (kernel.clone(), log.clone());
        move |_| {
            let (kernel, log) = (kernel.clone(), log.clone());
            async move {
                tokio::time::sleep(secs(5)).await;
                log.lock().unwrap().push(("slow".to_owned(), kernel.now()));
                Ok(())
            }
        }
    });
    let slow = kernel.when_done([root], slow).unwrap();
    kernel
        .when_done([quick, slow], job(&kernel, &log, "both", true))
        .unwrap();
    let tick = kernel
        .every(secs(10), job(&kernel, &log, "tick", true))
        .unwrap();
    kernel
        .when_done([tick], job(&kernel, &log, "after-tick", true))
        .unwrap();
    tokio::time::sleep(secs(3)).await;
    assert_eq!(labels(&log), ["root", "quick"], "`both` waits for `slow`");
    tokio::time::sleep(secs(32)).await;
    let seen = labels(&log);
    let count = |l: &str| seen.iter().filter(|s| *s == l).count();
    assert_eq!(count("both"), 1);
    assert_eq!((count("tick"), count("after-tick")), (3, 3));
    let both = seen.iter().position(|s| s == "both").unwrap();
    assert!(both > seen.iter().position(|s| s == "slow").unwrap());
    // The periodic chain stays; the fan-in one is over.
    assert_eq!(kernel.len(), 2);
    kernel.shutdown(secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn parents_no_one_run_reaches_together_are_refused() {
    let kernel = Kernel::builder().build().unwrap();
    let log: Log = Arc::default();
    let a = kernel
        .after(secs(1), job(&kernel, &log, "a", true))
        .unwrap();
    let b = kernel
        .after(secs(1), job(&kernel, &log, "b", true))
        .unwrap();
    let err = kernel
        .when_done([a, b], job(&kernel, &log, "both", true))
        .unwrap_err();
    assert!(err.to_string().contains("different first jobs"), "{err}");
    kernel.shutdown(secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_parent_cancels_what_waits_on_it() {
    let kernel = Kernel::builder().build().unwrap();
    let log: Log = Arc::default();
    let parent = kernel
        .after(secs(60), job(&kernel, &log, "parent", true))
        .unwrap();
    let child = kernel
        .when_done([parent], job(&kernel, &log, "child", true))
        .unwrap();
    let grandchild = kernel
        .when_done([child], job(&kernel, &log, "grandchild", true))
        .unwrap();
    kernel.cancel(parent).expect("cancel");
    assert_eq!(kernel.len(), 0);
    assert_eq!(kernel.status(grandchild), None);
    tokio::time::sleep(secs(120)).await;
    assert!(labels(&log).is_empty());
    kernel.shutdown(secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn bad_parents_are_refused_at_the_call() {
    let kernel = Kernel::builder().build().unwrap();
    let log: Log = Arc::default();
    let parent = kernel
        .after(secs(60), job(&kernel, &log, "p", true))
        .unwrap();
    let field = |r: Result<ax_embedded::JobId, EmbeddedError>| match r {
        Err(EmbeddedError::Invalid { field, reason }) => format!("{field}: {reason}"),
        other => panic!("{other:?}"),
    };
    let none: [Parent; 0] = [];
    assert!(field(kernel.when_done(none, job(&kernel, &log, "c", true))).starts_with("parents"));
    let twice = kernel.when_done([parent, parent], job(&kernel, &log, "c", true));
    assert!(field(twice).contains("twice"));
    let far = Parent::succeeded(parent).within(secs(8 * 24 * 3600));
    assert!(field(kernel.when_done([far], job(&kernel, &log, "c", true))).contains("7 days"));
    let deadline = job(&kernel, &log, "c", true).deadline(secs(60));
    assert!(field(kernel.when_done([parent], deadline)).starts_with("deadline"));
    // A job that ran and is forgotten is no parent any more.
    let gone = kernel
        .after(Duration::ZERO, job(&kernel, &log, "gone", true))
        .unwrap();
    tokio::time::sleep(secs(1)).await;
    let late = kernel.when_done([gone], job(&kernel, &log, "c", true));
    assert!(field(late).contains("not a job of this kernel"));
    assert_eq!(kernel.len(), 1, "nothing refused was kept");
    kernel.shutdown(secs(1)).await;
}
