//! The names of the queues a cluster uses, remembered between calls.
//!
//! Several reads need every queue (the status, the dead letters of all queues, a kill or a
//! requeue by execution id), and the only complete source is the task specs in etcd: reading
//! them all costs O(tasks) (about 270 ms at 20 000 tasks), and the console asks for the
//! status every 5 s per open tab. So the set is read once and kept: for at least
//! [`MIN_KEPT`], and for ten times as long as the last read took, so that reading it takes at
//! most a tenth of the time however many tasks there are. One caller reads while the others
//! wait for its answer. A put through this backend adds its queue at once; a queue that only
//! a put through another replica introduced appears when the set is read again.

use std::collections::BTreeSet;
use std::sync::Mutex as SyncMutex;
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
    /// Held while one caller reads, so the others wait for its answer instead of reading too.
    read: Mutex<()>,
    known: SyncMutex<Option<(BTreeSet<String>, Instant)>>,
}

impl QueueNames {
    /// The set, from memory while it is fresh, else from `read`.
    pub(super) async fn get<F, Fut>(&self, read: F) -> Result<Vec<String>, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<BTreeSet<String>, ApiError>>,
    {
        if let Some(names) = self.fresh() {
            return Ok(names);
        }
        let _reading = self.read.lock().await;
        // Someone else may have read it while this caller waited.
        if let Some(names) = self.fresh() {
            return Ok(names);
        }
        let started = Instant::now();
        let names = read().await?;
        let took = started.elapsed();
        let until = Instant::now() + MIN_KEPT.max(took.saturating_mul(KEPT_PER_READ));
        let list = names.iter().cloned().collect();
        *self.lock() = Some((names, until));
        Ok(list)
    }

    /// Adds `name` to a remembered set (a put through this backend used it).
    pub(super) fn note(&self, name: &str) {
        if let Some((names, _)) = self.lock().as_mut() {
            if !names.contains(name) {
                names.insert(name.to_owned());
            }
        }
    }

    fn fresh(&self) -> Option<Vec<String>> {
        let known = self.lock();
        let (names, until) = known.as_ref()?;
        (Instant::now() < *until).then(|| names.iter().cloned().collect())
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
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn the_set_is_read_once_while_fresh_and_again_when_stale() {
        let names = Arc::new(QueueNames::default());
        let reads = Arc::new(AtomicU32::new(0));
        let read = |took: Duration| {
            let reads = Arc::clone(&reads);
            move || async move {
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(took).await;
                Ok(BTreeSet::from(["a".to_owned()]))
            }
        };
        // Ten callers at once: one read.
        let mut calls = Vec::new();
        for _ in 0..10 {
            let names = Arc::clone(&names);
            let r = read(Duration::from_millis(100));
            calls.push(tokio::spawn(async move { names.get(r).await }));
        }
        for c in calls {
            assert_eq!(c.await.unwrap().unwrap(), ["a"]);
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        names.note("b");
        assert_eq!(names.get(read(Duration::ZERO)).await.unwrap(), ["a", "b"]);
        assert_eq!(reads.load(Ordering::SeqCst), 1, "fresh");
        tokio::time::sleep(MIN_KEPT).await;
        names.get(read(Duration::from_secs(2))).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 2, "stale");
        // A read of 2 s is kept for 20 s.
        tokio::time::sleep(Duration::from_secs(15)).await;
        names.get(read(Duration::ZERO)).await.unwrap();
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "kept ten times as long as it took"
        );
    }
}
