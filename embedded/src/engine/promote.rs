//! How far ahead of the fire path staged jobs become tasks: at most [`PROMOTED_AHEAD`]
//! promoted jobs wait to start at a time.
//!
//! A staged job is promoted when its promotion instant (a window before its own) passes.
//! Unbounded, a burst of two million jobs due within half a second would all be promoted
//! within one second, two million dispatcher tasks of over a kilobyte each (gigabytes of
//! fresh pages, tables rehashed at every doubling), while each step, and a burst takes a
//! step at every attempt's end, promotes [`STEP_PROMOTIONS`](super::STEP_PROMOTIONS) jobs for
//! the one attempt its freed worker started. The fires would wait behind the promotions: a
//! hundred promotions for each fire, a thousand fires a second while the process takes both
//! cores.
//!
//! So the jobs promoted by the steps are kept in a queue, in promotion order (their fire
//! order), until each one's first attempt started, it left, or no fire of it is to come any
//! more (paused, its fire skipped); while [`PROMOTED_AHEAD`] of them are in it, the ripe
//! jobs wait staged, compact and in order. The fire path then does one promotion for each
//! fire, and the tables it works on hold the next sixteen thousand jobs (some twenty
//! megabytes), not the burst. Nothing changes for a job on time: that many promoted jobs
//! are over a tenth of a second of fires at a hundred thousand a second, and a job promoted
//! at or past its instant fires in the step that promoted it. A burst up to that size is
//! still promoted whole in the second before it, as before. The order of fires is still the
//! order of instants: the ripe jobs are promoted in it. A job the program acts on (trigger,
//! pause, kill) is promoted for that at once, as before, and is not counted.

use std::collections::VecDeque;

use ax_scheduler_core::UtcMillis;

use super::{Engine, STEP_PROMOTIONS};
use crate::job_id::JobId;

/// How many promoted jobs may wait for their first attempt to start.
pub(crate) const PROMOTED_AHEAD: usize = 1 << 14;

/// The jobs the steps promoted and whose first attempt has not started, in promotion order.
#[derive(Default)]
pub(super) struct Ahead {
    queue: VecDeque<JobId>,
}

impl Ahead {
    /// Jobs in the queue (some perhaps started already, behind one that has not).
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Promotions the queue has room for in one step.
    fn room(&self) -> usize {
        PROMOTED_AHEAD
            .saturating_sub(self.queue.len())
            .min(STEP_PROMOTIONS)
    }
}

impl Engine {
    /// Promotes the staged jobs whose time came, as many as the queue has room for.
    pub(super) fn promote_due(&mut self, now: UtcMillis) {
        self.settle_ahead();
        let room = self.ahead.room();
        if room == 0 {
            return;
        }
        for job in self.staging.due(now, room) {
            let id = job.id;
            self.promote(job, now);
            if let Some(entry) = self.jobs.get_mut(&id) {
                entry.awaiting_launch = true;
                self.ahead.queue.push_back(id);
            }
        }
    }

    /// Lets go of the queue's front jobs that no longer wait: started, gone, or with no
    /// fire to come.
    pub(super) fn settle_ahead(&mut self) {
        while let Some(&id) = self.ahead.queue.front() {
            if self.waits_to_start(id) {
                break;
            }
            self.ahead.queue.pop_front();
        }
    }

    /// Whether the queue has room: the next staged job due is worth a wakeup.
    pub(super) fn may_promote(&self) -> bool {
        self.ahead.len() < PROMOTED_AHEAD
    }

    /// Whether a promoted job's first attempt is still to start: it is queued for a worker,
    /// or its fire is armed, queued or held.
    fn waits_to_start(&self, id: JobId) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        if !job.awaiting_launch {
            return false;
        }
        job.active > 0
            || self.dispatcher.fire_pending(&job.key)
            || self
                .dispatcher
                .state(&job.key)
                .is_some_and(|s| s.next_fire_at.is_some() || s.held_fire_at.is_some())
    }
}

#[cfg(test)]
mod tests;
