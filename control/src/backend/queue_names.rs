//! The names of the queues a cluster uses, remembered between calls.
//!
//! On a replica with the scheduler role the backend reads them from the role's catalog
//! instead (`Backend::with_live_queues`), which follows every spec change; what follows is
//! for the others (a worker-only replica, the CLI's own backend) and for the moment before
//! the catalog's first sync.
//!
//! Several reads need every queue (the status, the dead letters of all queues, a kill or a
//! requeue by execution id), and the only complete source is the task specs in etcd: reading
//! them all costs O(tasks) (about 270 ms at 20 000 tasks), and the console asks for the
//! status every 5 s per open tab. So the set is read once and kept: fresh for at least
//! [`MIN_KEPT`], and for ten times as long as the last read took, so that reading it takes at
//! most a tenth of the time however many tasks there are. Only the first call waits for a
//! read (the others meanwhile wait for its answer). Past its freshness the set is still
//! answered at once, and one read runs behind it to refresh it: no call pays the O(tasks)
//! read again, and the set a caller sees is at most one keeping time and one read old. A put
//! through this backend adds its queue at once; a queue that only a put through another
//! replica introduced appears when the set is read again. A refresh that fails keeps the old
//! set for [`MIN_KEPT`] before the next try.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::api::ApiError;

/// The shortest time a read set is kept.
pub(super) const MIN_KEPT: Duration = Duration::from_secs(5);
/// How many times the read's own duration the set is kept at least.
const KEPT_PER_READ: u32 = 10;

/// The remembered set and when it goes stale.
#[derive(Debug, Default)]
pub(super) struct QueueNames {
    /// Held while the first caller reads, so the others wait for its answer instead of
    /// reading too.
    read: Mutex<()>,
    /// Set while a refresh runs behind the answers.
    refreshing: AtomicBool,
    known: SyncMutex<Option<(BTreeSet<String>, Instant)>>,
}

impl QueueNames {
    /// The set: from memory (refreshed behind the answer once stale), else from `read`.
    /// `read` runs on a task of its own when it refreshes, so it owns what it reads with.
    pub(super) async fn get<F, Fut>(self: &Arc<Self>, read: F) -> Result<Vec<String>, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<BTreeSet<String>, ApiError>> + Send + 'static,
    {
        match self.known() {
            Some((names, true)) => return Ok(names),
            Some((names, false)) => {
                self.refresh_behind(read());
                return Ok(names);
            }
            None => {}
        }
        let _reading = self.read.lock().await;
        // The caller before this one may have read it meanwhile.
        if let Some((names, _)) = self.known() {
            return Ok(names);
        }
        self.read_now(read()).await
    }

    /// Adds `name` to a remembered set (a put through this backend used it).
    pub(super) fn note(&self, name: &str) {
        if let Some((names, _)) = self.lock().as_mut() {
            if !names.contains(name) {
                names.insert(name.to_owned());
            }
        }
    }

    /// Reads the set and keeps it for ten times the read's duration (at least [`MIN_KEPT`]).
    async fn read_now<Fut>(&self, read: Fut) -> Result<Vec<String>, ApiError>
    where
        Fut: Future<Output = Result<BTreeSet<String>, ApiError>>,
    {
        let started = Instant::now();
        let names = read.await?;
        let took = started.elapsed();
        let until = Instant::now() + MIN_KEPT.max(took.saturating_mul(KEPT_PER_READ));
        let list = names.iter().cloned().collect();
        *self.lock() = Some((names, until));
        Ok(list)
    }

    /// Starts one read behind the answers, unless one runs already. The task ends with the
    /// read, which the registry bounds by its request timeouts.
    fn refresh_behind<Fut>(self: &Arc<Self>, read: Fut)
    where
        Fut: Future<Output = Result<BTreeSet<String>, ApiError>> + Send + 'static,
    {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(error) = this.read_now(read).await {
                tracing::warn!(%error, "could not read the queue names again; the old set is kept");
                if let Some((_, until)) = this.lock().as_mut() {
                    *until = Instant::now() + MIN_KEPT;
                }
            }
            this.refreshing.store(false, Ordering::Release);
        });
    }

    /// The set, if read once, and whether it is still fresh.
    fn known(&self) -> Option<(Vec<String>, bool)> {
        let known = self.lock();
        let (names, until) = known.as_ref()?;
        Some((names.iter().cloned().collect(), Instant::now() < *until))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(BTreeSet<String>, Instant)>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    type Read = std::pin::Pin<Box<dyn Future<Output = Result<BTreeSet<String>, ApiError>> + Send>>;

    /// A read that counts itself, takes `took` and answers `names` (or fails).
    fn reader(
        reads: &Arc<AtomicU32>,
        took: Duration,
        names: Result<&[&str], ()>,
    ) -> impl FnOnce() -> Read {
        let reads = Arc::clone(reads);
        let names = names.map(|n| n.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>());
        move || {
            Box::pin(async move {
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(took).await;
                names.map_err(|()| ApiError::Unavailable("etcd is away".into()))
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_first_call_waits_and_a_stale_set_is_refreshed_behind_the_answer() {
        let names = Arc::new(QueueNames::default());
        let reads = Arc::new(AtomicU32::new(0));
        // Ten callers at once: one read, the others wait for its answer.
        let mut calls = Vec::new();
        for _ in 0..10 {
            let names = Arc::clone(&names);
            let r = reader(&reads, Duration::from_millis(100), Ok(&["a"]));
            calls.push(tokio::spawn(async move { names.get(r).await }));
        }
        for c in calls {
            assert_eq!(c.await.unwrap().unwrap(), ["a"]);
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        names.note("b");
        let fresh = names.get(reader(&reads, Duration::ZERO, Ok(&[]))).await;
        assert_eq!(fresh.unwrap(), ["a", "b"]);
        assert_eq!(reads.load(Ordering::SeqCst), 1, "fresh");

        // Stale: answered at once from memory, while one read of 2 s runs behind.
        tokio::time::sleep(MIN_KEPT).await;
        let asked = Instant::now();
        let stale = names.get(reader(&reads, Duration::from_secs(2), Ok(&["a", "c"])));
        assert_eq!(stale.await.unwrap(), ["a", "b"]);
        assert_eq!(
            asked.elapsed(),
            Duration::ZERO,
            "no caller waits for a refresh"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        let during = names.get(reader(&reads, Duration::ZERO, Ok(&[]))).await;
        assert_eq!(during.unwrap(), ["a", "b"]);
        assert_eq!(reads.load(Ordering::SeqCst), 2, "one refresh at a time");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = names.get(reader(&reads, Duration::ZERO, Ok(&[]))).await;
        assert_eq!(after.unwrap(), ["a", "c"], "refreshed");

        // A read of 2 s is kept for 20 s.
        tokio::time::sleep(Duration::from_secs(15)).await;
        names
            .get(reader(&reads, Duration::ZERO, Ok(&[])))
            .await
            .unwrap();
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "kept ten times as long as it took"
        );

        // A refresh that fails keeps the set, and tries again after MIN_KEPT.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let failing = names.get(reader(&reads, Duration::ZERO, Err(())));
        assert_eq!(failing.await.unwrap(), ["a", "c"]);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(reads.load(Ordering::SeqCst), 3);
        let kept = names.get(reader(&reads, Duration::ZERO, Ok(&["d"]))).await;
        assert_eq!(
            kept.unwrap(),
            ["a", "c"],
            "the old set, fresh again for a while"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(reads.load(Ordering::SeqCst), 3, "no retry before MIN_KEPT");
        tokio::time::sleep(MIN_KEPT).await;
        names
            .get(reader(&reads, Duration::ZERO, Ok(&["d"])))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let retried = names.get(reader(&reads, Duration::ZERO, Ok(&[]))).await;
        assert_eq!(retried.unwrap(), ["d"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_read_that_fails_is_an_error_and_the_next_call_reads_again() {
        let names = Arc::new(QueueNames::default());
        let reads = Arc::new(AtomicU32::new(0));
        assert!(names
            .get(reader(&reads, Duration::ZERO, Err(())))
            .await
            .is_err());
        let again = names.get(reader(&reads, Duration::ZERO, Ok(&["a"]))).await;
        assert_eq!(again.unwrap(), ["a"]);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }
}
