//! How jobs ended, remembered for a while after they leave the kernel.
//!
//! A kernel forgets a job once nothing of it is to come, so that its memory follows what is
//! pending. A caller that submitted a job still wants to ask how it went; the answer is kept
//! here, bounded twice: for at most [`ENDS_KEPT_FOR`] after the end, and among at most the
//! latest [`MAX_ENDS_KEPT`] ends (a burst of millions of jobs keeps at most that many, about
//! 30 bytes each). Past either bound the job is unknown, as one that never existed.

use std::time::Duration;

use ax_scheduler_core::{AttemptOutcome, UtcMillis};

use crate::job_id::JobId;
use crate::table::JobTable;

/// How long an end is remembered at most (at least half of it).
pub const ENDS_KEPT_FOR: Duration = Duration::from_secs(3600);
/// How many ends are remembered at most (the latest; at least half as many).
pub const MAX_ENDS_KEPT: usize = 100_000;

/// How a job the kernel no longer runs ended ([`Kernel::ended`](crate::Kernel::ended)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobEnd {
    /// Its last execution succeeded.
    Succeeded,
    /// Its last execution failed for good, and its dead letter was purged.
    Failed,
    /// Its last execution was killed.
    Killed,
    /// It was cancelled (or a job it waited on was) before it had ended.
    Cancelled,
    /// Its last execution failed for good and its dead letter is held: it can still be
    /// requeued ([`Kernel::requeue`](crate::Kernel::requeue)).
    DeadLettered,
}

impl JobEnd {
    /// The end of a job whose latest execution ended with `outcome` (its last attempt).
    pub(crate) fn of_outcome(outcome: AttemptOutcome) -> JobEnd {
        match outcome {
            AttemptOutcome::Succeeded => JobEnd::Succeeded,
            AttemptOutcome::Killed => JobEnd::Killed,
            _ => JobEnd::Failed,
        }
    }
}

/// The remembered ends, in two generations: new ends go to `current`; once it holds half
/// the count bound, or its first end is half the time bound old, it becomes `previous` and
/// the older `previous` is dropped whole. So recording is one insert (no queue of ids to
/// walk), a lookup is two, memory stays under [`MAX_ENDS_KEPT`], and an end is kept for
/// at least half of either bound (for [`ENDS_KEPT_FOR`], never longer: its instant is
/// checked on lookup).
#[derive(Debug, Default)]
pub(crate) struct Ends {
    /// Keyed as the job table is: ids the kernel made, hashed cheaply.
    current: JobTable<(JobEnd, UtcMillis)>,
    /// When `current` took its first end.
    current_since: Option<UtcMillis>,
    previous: JobTable<(JobEnd, UtcMillis)>,
}

impl Ends {
    /// Remembers that `job` ended so at `now`.
    pub(crate) fn record(&mut self, job: JobId, end: JobEnd, now: UtcMillis) {
        let since = *self.current_since.get_or_insert(now);
        if self.current.len() >= MAX_ENDS_KEPT / 2 || now.since(since) >= ENDS_KEPT_FOR / 2 {
            self.previous = std::mem::take(&mut self.current);
            self.current_since = Some(now);
        }
        self.previous.remove(&job);
        self.current.insert(job, (end, now));
    }

    /// How `job` ended, if that is still remembered at `now`.
    pub(crate) fn get(&self, job: JobId, now: UtcMillis) -> Option<JobEnd> {
        let (end, at) = self.current.get(&job).or_else(|| self.previous.get(&job))?;
        (now.since(*at) <= ENDS_KEPT_FOR).then_some(*end)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_are_kept_for_their_time_and_count_only() {
        let mut ends = Ends::default();
        let t0 = UtcMillis(1_000_000_000);
        ends.record(JobId(1), JobEnd::Succeeded, t0);
        assert_eq!(ends.get(JobId(1), t0), Some(JobEnd::Succeeded));
        assert_eq!(ends.get(JobId(2), t0), None);
        let later = t0.add(ENDS_KEPT_FOR + Duration::from_millis(1));
        assert_eq!(ends.get(JobId(1), later), None, "past its time");
        ends.record(JobId(2), JobEnd::Failed, later);
        ends.record(JobId(3), JobEnd::Failed, later);
        assert_eq!(ends.get(JobId(2), later), Some(JobEnd::Failed));
        // Ten times the count bound: memory stays within it, the latest half is kept.
        let n = MAX_ENDS_KEPT as u64 * 10;
        for i in 0..n {
            ends.record(JobId(10 + i), JobEnd::Succeeded, later);
            assert!(ends.len() <= MAX_ENDS_KEPT);
        }
        for back in [1, MAX_ENDS_KEPT as u64 / 2] {
            assert_eq!(
                ends.get(JobId(10 + n - back), later),
                Some(JobEnd::Succeeded)
            );
        }
        assert_eq!(ends.get(JobId(10), later), None, "the oldest went first");
    }

    #[test]
    fn a_corrected_record_keeps_the_later_end() {
        let mut ends = Ends::default();
        let t = UtcMillis(5_000);
        ends.record(JobId(1), JobEnd::Succeeded, t);
        ends.record(JobId(1), JobEnd::Cancelled, t.add(Duration::from_millis(1)));
        assert_eq!(
            ends.get(JobId(1), t.add(Duration::from_millis(2))),
            Some(JobEnd::Cancelled)
        );
    }
}
