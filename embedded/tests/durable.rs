//! The durable store through the public API, on real time (the store's writer is a thread
//! and its fsyncs take real time): what a restart finds, and the files it refuses.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_embedded::handler::{typed, Typed as Attempt};
use ax_embedded::{EmbeddedError, ExecutionId, HandlerError, Job, Kernel, When};

/// What the handler saw: (payload, execution, attempt, recovered).
type Seen = Arc<Mutex<Vec<(u64, ExecutionId, u32, bool)>>>;

fn kernel(path: &std::path::Path, seen: &Seen, block_first: bool) -> Kernel {
    let seen = seen.clone();
    Kernel::builder()
        .workers(4)
        .store(path)
        .handler(
            "record",
            typed(move |ctx: Attempt<u64>| {
                let seen = seen.clone();
                async move {
                    seen.lock()
                        .map_err(|_| HandlerError::Retryable("poisoned".into()))?
                        .push((
                            ctx.payload,
                            ctx.execution_id(),
                            ctx.attempt(),
                            ctx.redelivered(),
                        ));
                    if block_first {
                        ctx.cancel().cancelled().await;
                    }
                    Ok(())
                }
            }),
        )
        .build()
        .expect("kernel")
}

fn seen() -> Seen {
    Arc::new(Mutex::new(Vec::new()))
}

fn taken(seen: &Seen) -> Vec<(u64, ExecutionId, u32, bool)> {
    seen.lock().expect("seen").clone()
}

async fn wait_for(seen: &Seen, n: usize) {
    for _ in 0..500 {
        if taken(seen).len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_restart_runs_what_was_acknowledged_and_what_was_running() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("jobs.redb");
    let first = seen();
    let k = kernel(&path, &first, true);
    k.submit(
        When::After(Duration::ZERO),
        Job::named("record").payload(&1u64),
    )
    .await
    .expect("submit");
    let later = Job::named("record").payload(&2u64);
    // Far enough that it is not due before the shutdown, on a busy machine too.
    k.submit(When::After(Duration::from_millis(1500)), later)
        .await
        .expect("submit");
    wait_for(&first, 1).await;
    // Job 1 runs (and waits) when the process stops; job 2 is not due yet.
    let report = k.shutdown(Duration::from_millis(50)).await;
    assert_eq!(report.stopped, 1);
    let before = taken(&first);
    assert_eq!(before.len(), 1);

    let second = seen();
    let k = kernel(&path, &second, false);
    wait_for(&second, 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut after = taken(&second);
    after.sort_by_key(|s| s.0);
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(
        after[0],
        (1, before[0].1, 1, true),
        "run again, same execution"
    );
    assert_eq!((after[1].0, after[1].3), (2, false));
    // Both done: the file forgets them.
    for _ in 0..200 {
        if k.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(k.is_empty());
    k.shutdown(Duration::from_secs(1)).await;
    let k = kernel(&path, &seen(), false);
    assert!(k.is_empty(), "nothing left in the file");
}

#[tokio::test]
async fn persisted_jobs_take_the_async_submit_and_a_known_handler() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("jobs.redb");
    let k = kernel(&path, &seen(), false);
    let sync = k.after(Duration::ZERO, Job::named("record").payload(&1u64));
    assert!(
        matches!(sync, Err(EmbeddedError::Invalid { field: "job", .. })),
        "{sync:?}"
    );
    let unknown = k
        .submit(When::After(Duration::ZERO), Job::named("nope"))
        .await;
    assert!(
        matches!(unknown, Err(EmbeddedError::UnknownHandler(_))),
        "{unknown:?}"
    );
    // A closure is not persisted, and takes either submit.
    k.after(Duration::ZERO, Job::new(|_| async { Ok(()) }))
        .expect("closure");
    // Kept for a restart whose kernel does not know the handler.
    k.submit(
        When::After(Duration::from_secs(60)),
        Job::named("record").payload(&1u64),
    )
    .await
    .expect("submit");
    k.shutdown(Duration::from_secs(1)).await;
    let without = Kernel::builder().store(&path).build();
    assert!(matches!(without, Err(EmbeddedError::UnknownHandler(ref h)) if h == "record"));
}

#[tokio::test]
async fn a_file_that_is_no_store_is_refused_with_its_name() {
    let dir = tempfile::tempdir().expect("dir");
    let garbage = dir.path().join("garbage.redb");
    std::fs::write(&garbage, vec![0x5a; 8192]).expect("write");
    let err = Kernel::builder()
        .store(&garbage)
        .build()
        .expect_err("refused");
    assert!(
        matches!(
            err,
            EmbeddedError::Store {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("garbage.redb"), "{err}");

    let foreign = dir.path().join("foreign.redb");
    {
        let db = redb::Database::create(&foreign).expect("db");
        let txn = db.begin_write().expect("txn");
        let table: redb::TableDefinition<&str, &str> = redb::TableDefinition::new("theirs");
        txn.open_table(table)
            .expect("table")
            .insert("a", "b")
            .expect("insert");
        txn.commit().expect("commit");
    }
    let err = Kernel::builder()
        .store(&foreign)
        .build()
        .expect_err("refused");
    assert!(err.to_string().contains("foreign.redb"), "{err}");
    assert!(err.to_string().contains("another program"), "{err}");
}

#[tokio::test]
async fn a_restart_catches_up_at_half_the_workers() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("jobs.redb");
    let k = kernel(&path, &seen(), false);
    // Nothing runs in this process, however slow its submits (the pause is not persisted).
    k.pause_all();
    for n in 0..6u64 {
        let job = Job::named("record").payload(&n);
        k.submit(When::After(Duration::from_millis(50)), job)
            .await
            .expect("submit");
    }
    k.shutdown(Duration::ZERO).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (r, m) = (running.clone(), most.clone());
    let done = seen();
    let d = done.clone();
    let k = Kernel::builder()
        .workers(4)
        .store(&path)
        .handler(
            "record",
            typed(move |ctx: Attempt<u64>| {
                let (r, m, d) = (r.clone(), m.clone(), d.clone());
                async move {
                    let n = ctx.payload;
                    use std::sync::atomic::Ordering;
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    // Long enough that the two started together overlap on a busy machine.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    r.fetch_sub(1, Ordering::SeqCst);
                    d.lock()
                        .map_err(|_| HandlerError::Retryable("poisoned".into()))?
                        .push((n, ctx.execution_id(), ctx.attempt(), ctx.redelivered()));
                    Ok(())
                }
            }),
        )
        .build()
        .expect("kernel");
    for _ in 0..300 {
        if taken(&done).len() >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(taken(&done).len(), 6);
    assert_eq!(
        most.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "half of 4"
    );
    k.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_persisted_chain_goes_on_after_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("jobs.redb");
    let k = kernel(&path, &seen(), false);
    // Not due within the staging window, so the restart finds it staged-to-be.
    let parent = k
        .submit(
            When::After(Duration::from_millis(1500)),
            Job::named("record").payload(&1u64),
        )
        .await
        .expect("parent");
    k.submit(
        When::AfterJobs(vec![parent.into()]),
        Job::named("record").payload(&2u64),
    )
    .await
    .expect("child");
    let closure_parent = k
        .after(Duration::from_secs(60), Job::new(|_| async { Ok(()) }))
        .expect("closure");
    let refused = k
        .submit(
            When::AfterJobs(vec![closure_parent.into()]),
            Job::named("record").payload(&3u64),
        )
        .await;
    assert!(
        matches!(
            refused,
            Err(EmbeddedError::Invalid {
                field: "parents",
                ..
            })
        ),
        "{refused:?}"
    );
    k.shutdown(Duration::from_millis(50)).await;

    let after = seen();
    let k = kernel(&path, &after, false);
    wait_for(&after, 2).await;
    let payloads: Vec<u64> = taken(&after).iter().map(|s| s.0).collect();
    assert_eq!(payloads, [1, 2], "the parent, then its child, once each");
    k.shutdown(Duration::from_millis(50)).await;
}
