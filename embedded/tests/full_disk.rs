//! A full disk under the durable store, for real: the store lives on a small tmpfs that a
//! filler file has nearly used up. Submits go on until one fails; that one must fail with the
//! store's retryable error naming the file and the cause, the kernel must go on running, a
//! submit after space was freed must succeed, and a restart must find every acknowledged job
//! and run it, and none cancelled while the disk was full.
//!
//! Mounting needs root (tests run as root here and in CI). Where the mount is refused the
//! test fails under `AX_CI` and is skipped with a message elsewhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_embedded::handler::{typed, Typed as Attempt};
use ax_embedded::{EmbeddedError, Job, JobId, Kernel, TaskStatus, When};

const HOUR: Duration = Duration::from_secs(3600);
/// The tmpfs: small, so that filling it takes a few hundred submits.
const DISK_MIB: u64 = 16;
/// What the filler leaves free for the store.
const FREE_MIB: u64 = 2;

/// A tmpfs mounted for the test, unmounted when dropped (on a failure too).
struct Mount(PathBuf);

impl Mount {
    /// Mounts a tmpfs on `dir`; `None` (after saying why) where mounting is not permitted.
    fn tmpfs(dir: &Path) -> Option<Mount> {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={DISK_MIB}m"), "tmpfs"])
            .arg(dir)
            .output();
        let why = match out {
            Ok(o) if o.status.success() => return Some(Mount(dir.to_path_buf())),
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_owned(),
            Err(e) => e.to_string(),
        };
        let msg = format!(
            "cannot mount a tmpfs on {} (needs root): {why}",
            dir.display()
        );
        assert!(std::env::var_os("AX_CI").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
        None
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Lazy: a kernel of a failed test may still hold the file open.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

type Ran = Arc<Mutex<BTreeSet<u64>>>;

fn kernel(path: &Path, ran: &Ran) -> Kernel {
    let ran = ran.clone();
    Kernel::builder()
        .store(path)
        .handler(
            "order",
            typed(move |ctx: Attempt<(u64, String)>| {
                let ran = ran.clone();
                async move {
                    ran.lock().expect("ran").insert(ctx.payload.0);
                    Ok(())
                }
            }),
        )
        .build()
        .expect("kernel")
}

fn order(n: u64) -> Job {
    // A payload of some size, so that the disk fills after a few hundred jobs.
    Job::named("order").payload(&(n, "x".repeat(8 * 1024)))
}

/// Writes a file of `mib` MiB of zeros (tmpfs keeps every page written).
fn fill(path: &Path, mib: u64) {
    let chunk = vec![0u8; 1024 * 1024];
    let mut f = std::fs::File::create(path).expect("filler");
    for _ in 0..mib {
        std::io::Write::write_all(&mut f, &chunk).expect("filler write");
    }
    f.sync_all().expect("filler sync");
}

/// Submits orders until one fails; returns the acknowledged ones and the error.
async fn submit_until_full(k: &Kernel) -> (Vec<(u64, JobId)>, EmbeddedError) {
    let mut acked = Vec::new();
    for n in 0..10_000u64 {
        match k.submit(When::After(HOUR), order(n)).await {
            Ok(id) => acked.push((n, id)),
            Err(e) => return (acked, e),
        }
    }
    panic!("{} submits into a full disk all succeeded", acked.len());
}

async fn wait_for(ran: &Ran, n: usize) {
    for _ in 0..500 {
        if ran.lock().expect("ran").len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_submits_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("dir");
    let Some(_mount) = Mount::tmpfs(dir.path()) else {
        return;
    };
    let filler = dir.path().join("filler");
    fill(&filler, DISK_MIB - FREE_MIB);
    let path = dir.path().join("orders.redb");
    let ran: Ran = Arc::default();
    let k = kernel(&path, &ran);

    let (mut acked, err) = submit_until_full(&k).await;
    assert!(!acked.is_empty(), "the store took no job at all: {err}");
    assert!(err.is_retryable(), "a full disk is retryable: {err:?}");
    let EmbeddedError::Store { path: named, .. } = &err else {
        panic!("not the store's error: {err:?}");
    };
    assert_eq!(named, &path);
    let shown = err.to_string();
    eprintln!("a full disk: {shown}");
    assert!(shown.contains(&path.display().to_string()), "{shown}");
    assert!(shown.contains("No space left on device"), "{shown}");
    assert!(
        shown.contains("not kept"),
        "says what became of the job: {shown}"
    );

    // Still full: the next submit fails the same way (not with a stale error of the last).
    let again = k
        .submit(When::After(HOUR), order(u64::MAX))
        .await
        .expect_err("a submit into a disk still full");
    assert!(again.is_retryable(), "{again:?}");
    assert!(
        again.to_string().contains("No space left on device"),
        "{again}"
    );

    // Changes nobody waits for, made while the disk is full, still reach the file once it
    // can write: the cancelled job must not come back at the restart, the paused ones
    // (each a whole spec to write again) must come back paused.
    let (_, cancelled) = acked.remove(0);
    k.cancel(cancelled).expect("cancel");
    let paused: Vec<JobId> = acked.iter().take(10).map(|(_, id)| *id).collect();
    for id in &paused {
        assert_eq!(k.pause(*id).expect("pause"), TaskStatus::Paused);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;

    // The kernel still runs jobs.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = Mutex::new(Some(tx));
    k.after(
        Duration::ZERO,
        Job::new(move |_| {
            if let Some(tx) = tx.lock().expect("tx").take() {
                let _ = tx.send(());
            }
            async { Ok(()) }
        }),
    )
    .expect("in-memory job");
    tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .expect("the kernel runs jobs after a failed write")
        .expect("ran");

    // Space freed: the same submit succeeds.
    std::fs::remove_file(&filler).expect("free space");
    let n = 1_000_000;
    let id = k
        .submit(When::After(HOUR), order(n))
        .await
        .expect("a submit once space is freed");
    acked.push((n, id));
    k.shutdown(Duration::from_secs(1)).await;

    // Everything acknowledged is in the file, and runs.
    let k = kernel(&path, &ran);
    assert_eq!(k.len(), acked.len(), "jobs found by the restart");
    assert!(
        matches!(k.trigger(cancelled), Err(EmbeddedError::NotFound(i)) if i == cancelled),
        "a job cancelled while the disk was full came back"
    );
    for id in &paused {
        assert_eq!(k.status(*id), Some(TaskStatus::Paused), "paused while full");
        k.resume(*id).expect("resume");
    }
    for (_, id) in &acked {
        k.trigger(*id)
            .unwrap_or_else(|e| panic!("job {id:?} was acknowledged but is gone: {e}"));
    }
    wait_for(&ran, acked.len()).await;
    let want: BTreeSet<u64> = acked.iter().map(|(n, _)| *n).collect();
    assert_eq!(*ran.lock().expect("ran"), want);
    k.shutdown(Duration::from_secs(1)).await;
}
