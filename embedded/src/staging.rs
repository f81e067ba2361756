//! The staging area: one-shot jobs not due soon, held compactly until they are.
//!
//! A job the dispatcher holds is a whole cluster task (its key, spec, state, timer entry,
//! table slots: over a kilobyte), which is what a fire needs but not what a job an hour
//! ahead needs. A one-shot job whose instant is more than [`STAGING_WINDOW`] ahead is kept
//! here instead, in the core's [`TimerWheel`] (the same wheel the engine runs retries on),
//! as one wheel entry whose value is two pointers: the job's body and its spec. Jobs
//! submitted with the same options share one spec (the last few distinct ones are kept to
//! be shared; the spec's id and instant are filled in at promotion), so a million jobs with
//! the same options hold one spec between them. A job whose spec is its own (an idempotency
//! key, a payload, a persisted job) keeps it whole.
//!
//! The wheel entry is due at the job's instant minus the window: when the driver's time
//! reaches it, the engine promotes the job into the dispatcher exactly as a submit of a job
//! due soon does, and the dispatcher arms, fires, retries and plans its misfires as for any
//! task. No scheduling decision is taken here: what is staged is only waiting to become a
//! task. Every operation on a staged job but cancel and status (trigger, pause, kill)
//! promotes it first and then does what it does on any task.
//!
//! A job staged in memory is named by its wheel handle: its [`JobId`] is the handle's bits
//! with the top bit set (ids counted up from 1, the others, never have it), so a cancel
//! goes straight to its entry, with no table from ids to entries. A persisted job keeps the
//! counted id the store knows it by, and is found through a table of its own.
//!
//! The jobs whose promotion instant passed leave the wheel as it passes (each call of
//! [`Staging::due`] takes what ripened since the last one, in order, behind those still
//! waiting) but are promoted a bounded number at a time, when the engine asks for them:
//! making a task takes a few microseconds under the engine's lock, and a burst of a hundred
//! thousand jobs due at one instant made tasks in one step held every submit, cancel and
//! attempt end of the program for a fifth of a second. The engine also holds only so many
//! promoted jobs ahead of its fire path (see `engine::promote`), so a burst of millions
//! waits here, compact and in order, rather than as a million tasks. Until its turn a ripe
//! job is still staged: cancel and status find it.
//!
//! Why one second: it is long against a driver's turn (a stalled driver is late by what it
//! is late by, staged or not: a job promoted past its instant is made a task as of its
//! promotion instant, so its timer has come due and fires late, the misfire policy judging
//! it only past the dispatcher's stall threshold, as for any timer), and short enough that
//! the jobs held whole at once are the next second's fires only. Periodic jobs are not
//! staged: they are tasks for good, with a state every fire writes.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::timer::{TimerConfig, TimerHandle, TimerWheel};
use ax_scheduler_core::{Schedule, TaskSpec, UtcMillis};

use crate::job::JobFn;
use crate::job_id::JobId;
use crate::table::JobTable;

/// How far ahead of its instant a staged job becomes a dispatcher task.
pub(crate) const STAGING_WINDOW: Duration = Duration::from_secs(1);

/// The bit that marks an id made of a wheel handle.
const STAGED_ID: u64 = 1 << 63;

/// How many distinct shared specs are kept for the next submits to share.
const SHARED_SPECS: usize = 8;

/// Ripe jobs whose room the queue keeps once it is empty again.
const RETAINED_RIPE: usize = 4096;

/// A staged job: its body and its spec. A spec with an empty id is shared (or the job's
/// own, in memory) and the id is the wheel handle's; a persisted job's spec carries its id.
pub(crate) struct Staged {
    pub(crate) run: Arc<JobFn>,
    pub(crate) spec: Arc<TaskSpec>,
}

/// A staged job taken out to become a task.
pub(crate) struct Promoted {
    pub(crate) id: JobId,
    pub(crate) run: Arc<JobFn>,
    /// Its instant and id filled in.
    pub(crate) spec: TaskSpec,
    pub(crate) durable: bool,
    /// When it was due to be promoted (a window before its instant).
    pub(crate) promote_at: UtcMillis,
}

/// A job whose promotion instant passed, waiting for its turn to be promoted.
struct Ripe {
    promote_at: UtcMillis,
    id: JobId,
    staged: Staged,
}

/// See the [module notes](self).
pub(crate) struct Staging {
    wheel: TimerWheel<Staged>,
    /// Persisted staged jobs, by the id the store knows.
    durable: JobTable<TimerHandle>,
    shared: Vec<Arc<TaskSpec>>,
    window_ms: i64,
    due: Vec<(UtcMillis, TimerHandle, Staged)>,
    /// Ripe jobs in promotion order (`None`: taken out of turn); the front one is the
    /// `ripe_base`-th ripe job since the queue was last empty.
    ripe: VecDeque<Option<Ripe>>,
    ripe_base: usize,
    /// Where each ripe job is (its count since the queue was last empty), made at the first
    /// cancel that needs it: most bursts see none, and indexing a burst as it ripens was a
    /// whole step's work on its own.
    ripe_at: HashMap<JobId, usize>,
    ripe_indexed: bool,
    /// Ripe jobs still held.
    ripe_live: usize,
    /// The instant the ripe jobs were last taken out at: each one's promotion was due by
    /// then.
    ripened_at: UtcMillis,
}

impl Staging {
    pub(crate) fn new(config: TimerConfig, now: UtcMillis) -> Self {
        Staging {
            wheel: TimerWheel::new(config, now),
            durable: JobTable::default(),
            shared: Vec::new(),
            window_ms: STAGING_WINDOW.as_millis() as i64,
            due: Vec::new(),
            ripe: VecDeque::new(),
            ripe_base: 0,
            ripe_at: HashMap::new(),
            ripe_indexed: false,
            ripe_live: 0,
            ripened_at: now,
        }
    }

    /// The instant a job of this spec would be promoted at, if it is to be staged: a one-shot
    /// due beyond the window.
    pub(crate) fn stages(&self, spec: &TaskSpec, now: UtcMillis) -> Option<UtcMillis> {
        match spec.schedule {
            Schedule::At(at) if !spec.paused && at.0 - self.window_ms > now.0 => {
                Some(UtcMillis(at.0 - self.window_ms))
            }
            _ => None,
        }
    }

    /// Stages a job held in memory, promoted at `promote_at`; its id, or its spec back when
    /// its handle makes no id (a generation past 2^31, or an id `taken` already) and the job
    /// is to be a task at once.
    pub(crate) fn stage(
        &mut self,
        mut spec: TaskSpec,
        run: Arc<JobFn>,
        promote_at: UtcMillis,
        taken: impl Fn(JobId) -> bool,
    ) -> Result<JobId, Box<TaskSpec>> {
        spec.id = Arc::from("");
        spec.schedule = Schedule::At(UtcMillis(0));
        spec.created_at = None;
        let spec = self.share(spec);
        let handle = self.wheel.insert(promote_at, Staged { run, spec });
        let bits = handle.to_bits();
        let id = JobId(bits | STAGED_ID);
        if bits & STAGED_ID != 0 || taken(id) {
            let staged = self
                .wheel
                .cancel(handle)
                .expect("the entry inserted just above is live");
            return Err(Box::new(self.promoted(id, promote_at, staged).spec));
        }
        Ok(id)
    }

    /// Stages a persisted job under its id; its spec is whole.
    pub(crate) fn stage_durable(
        &mut self,
        id: JobId,
        spec: Arc<TaskSpec>,
        run: Arc<JobFn>,
        promote_at: UtcMillis,
    ) {
        let handle = self.wheel.insert(promote_at, Staged { run, spec });
        self.durable.insert(id, handle);
    }

    /// The spec a job without one of its own shares with the jobs staged before it.
    fn share(&mut self, spec: TaskSpec) -> Arc<TaskSpec> {
        let own = spec.idempotency_key.is_some() || !spec.payload.is_null();
        if own {
            return Arc::new(spec);
        }
        if let Some(shared) = self.shared.iter().find(|s| ***s == spec) {
            return Arc::clone(shared);
        }
        let shared = Arc::new(spec);
        if self.shared.len() >= SHARED_SPECS {
            self.shared.remove(0);
        }
        self.shared.push(Arc::clone(&shared));
        shared
    }

    fn handle(&self, id: JobId) -> Option<TimerHandle> {
        if id.0 & STAGED_ID == 0 {
            return self.durable.get(&id).copied();
        }
        let handle = TimerHandle::from_bits(id.0 & !STAGED_ID);
        // A persisted job's entry is never reached through a handle id.
        let staged = self.wheel.get(handle)?;
        staged.spec.id.is_empty().then_some(handle)
    }

    /// Whether `id` is a staged job. A ripe one is looked for in the index if a cancel made
    /// it, else by a walk over the ripe jobs (a status asked within the second a burst is
    /// promoted in).
    pub(crate) fn contains(&self, id: JobId) -> bool {
        if self.handle(id).is_some() {
            return true;
        }
        if self.ripe_live == 0 {
            return false;
        }
        if self.ripe_indexed {
            return self.ripe_at.contains_key(&id);
        }
        self.ripe.iter().flatten().any(|r| r.id == id)
    }

    /// Takes a staged job out, to be dropped or promoted.
    pub(crate) fn take(&mut self, id: JobId) -> Option<Promoted> {
        if let Some(handle) = self.handle(id) {
            let promote_at = self.wheel.due(handle)?;
            let staged = self.wheel.cancel(handle)?;
            self.durable.remove(&id);
            return Some(self.promoted(id, promote_at, staged));
        }
        if self.ripe_live == 0 {
            return None;
        }
        if !self.ripe_indexed {
            let base = self.ripe_base;
            let live = self.ripe.iter().enumerate();
            let at = live.filter_map(|(i, r)| r.as_ref().map(|r| (r.id, base + i)));
            self.ripe_at.extend(at);
            self.ripe_indexed = true;
        }
        let at = self.ripe_at.remove(&id)?;
        let ripe = self.ripe.get_mut(at.checked_sub(self.ripe_base)?)?.take()?;
        self.ripe_live -= 1;
        self.forget_emptied();
        Some(self.promoted(ripe.id, ripe.promote_at, ripe.staged))
    }

    /// Takes out of the wheel what ripened by `now`, then at most `max` of the ripe jobs, in
    /// their order; the rest wait for the next call ([`next_due`](Self::next_due) says so).
    pub(crate) fn due(&mut self, now: UtcMillis, max: usize) -> Vec<Promoted> {
        self.ripen(now);
        let mut out = Vec::with_capacity(max.min(self.ripe_live));
        while out.len() < max {
            let Some(slot) = self.ripe.pop_front() else {
                break;
            };
            self.ripe_base += 1;
            if let Some(ripe) = slot {
                if self.ripe_indexed {
                    self.ripe_at.remove(&ripe.id);
                }
                self.ripe_live -= 1;
                out.push(self.promoted(ripe.id, ripe.promote_at, ripe.staged));
            }
        }
        self.forget_emptied();
        out
    }

    /// Appends every job whose promotion instant `now` reached to the ripe ones, in order:
    /// they all come after those ripe already, whose instants an earlier call reached (a job
    /// is staged only with its promotion instant ahead of its submit).
    fn ripen(&mut self, now: UtcMillis) {
        self.ripened_at = now;
        if self.wheel.is_empty() {
            return;
        }
        let mut due = std::mem::take(&mut self.due);
        self.wheel.advance_handles_into(now, &mut due);
        for (promote_at, handle, staged) in due.drain(..) {
            let id = match staged.spec.id.parse() {
                Ok(n) => JobId(n),
                Err(_) => JobId(handle.to_bits() | STAGED_ID),
            };
            if !staged.spec.id.is_empty() {
                self.durable.remove(&id);
            }
            if self.ripe_indexed {
                self.ripe_at.insert(id, self.ripe_base + self.ripe.len());
            }
            self.ripe.push_back(Some(Ripe {
                promote_at,
                id,
                staged,
            }));
            self.ripe_live += 1;
        }
        self.due = due;
    }

    /// Once no ripe job is held, drops what is left of the queue (jobs taken out of turn)
    /// and the index, and lets a big queue's buffer go.
    fn forget_emptied(&mut self) {
        if self.ripe_live > 0 {
            return;
        }
        debug_assert!(
            self.ripe_at.is_empty(),
            "every indexed ripe job left the index"
        );
        self.ripe_at.clear();
        self.ripe_indexed = false;
        self.ripe.clear();
        self.ripe.shrink_to(RETAINED_RIPE);
        self.ripe_base = 0;
    }

    fn promoted(&self, id: JobId, promote_at: UtcMillis, staged: Staged) -> Promoted {
        let durable = !staged.spec.id.is_empty();
        let mut spec = Arc::unwrap_or_clone(staged.spec);
        if !durable {
            spec.schedule = Schedule::At(UtcMillis(promote_at.0 + self.window_ms));
        }
        Promoted {
            id,
            run: staged.run,
            spec,
            durable,
            promote_at,
        }
    }

    /// When the next staged job is to be promoted: a ripe one's passed instant while some
    /// wait for their turn.
    pub(crate) fn next_due(&self) -> Option<UtcMillis> {
        if self.ripe_live > 0 {
            return Some(self.ripened_at);
        }
        self.wheel.next_due()
    }

    /// Staged jobs.
    pub(crate) fn len(&self) -> usize {
        self.wheel.len() + self.ripe_live
    }
}

#[cfg(test)]
mod tests;
