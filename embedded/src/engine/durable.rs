//! The engine's store: where durable jobs' changes go, and how a restart rebuilds the
//! engine from what the store holds.
//!
//! Changes are queued as [`Op`]s in the order they are made ([`Engine::persist`]) and sent
//! to the store's writer in one batch before the lock is let go ([`Engine::flush`]), so the
//! file holds them in the engine's order. A restart arms each job from its recorded state
//! (the dispatcher plans what it missed) and queues the executions it had in flight again.

use std::sync::Arc;

use ax_scheduler_core::{ExecutionId, UtcMillis};
use tokio::sync::oneshot;

use super::{Attempt, Engine};
use crate::error::{EmbeddedError, Result};
use crate::job::Handlers;
use crate::job_id::JobId;
use crate::store::{Loaded, Op, StoreHandle};

impl Engine {
    /// Persists this engine's durable jobs to `store` from now on.
    pub(crate) fn set_store(&mut self, store: StoreHandle) {
        self.store = Some(store);
    }

    /// The store, taken to close it: nothing is persisted after.
    pub(crate) fn take_store(&mut self) -> Option<StoreHandle> {
        self.store.take()
    }

    /// Whether jobs run by a handler name are persisted.
    pub(crate) fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Sends the store changes made so far, if any, in one batch.
    pub(crate) fn flush(&mut self) {
        if let (Some(store), false) = (&self.store, self.outbox.is_empty()) {
            drop(store.send(std::mem::take(&mut self.outbox)));
        }
    }

    /// Sends the store changes made so far (perhaps none); the answer says when they and
    /// everything sent before are on disk. `None` without a store.
    pub(crate) fn flush_acked(&mut self) -> Option<oneshot::Receiver<Result<(), String>>> {
        let store = self.store.as_ref()?;
        Some(store.send(std::mem::take(&mut self.outbox)))
    }

    /// The store's file, for errors.
    pub(crate) fn store_path(&self) -> Option<std::path::PathBuf> {
        self.store.as_ref().map(|s| s.path().to_path_buf())
    }

    /// Queues `op` for the store when the job is durable and there is a store.
    pub(super) fn persist(&mut self, durable: bool, op: impl FnOnce() -> Op) {
        if durable && self.store.is_some() {
            self.outbox.push(op());
        }
    }

    /// Rebuilds the jobs a store holds: each armed from its recorded state (the dispatcher
    /// plans what it missed), each execution in flight queued again (or its retry armed),
    /// the dead letters kept.
    pub(crate) fn restore(
        &mut self,
        loaded: Loaded,
        handlers: &Handlers,
        now: UtcMillis,
    ) -> Result<()> {
        let Loaded {
            jobs,
            mut states,
            running,
            dead,
            skipped,
        } = loaded;
        if skipped > 0 {
            tracing::error!(skipped, "stored jobs out of bounds were not restored");
        }
        // What ran or failed was a task: it goes back to the dispatcher whatever its instant.
        // ... and so does a parent: its children's edges must find it.
        let held: std::collections::HashSet<JobId> = running
            .iter()
            .map(|(id, _)| *id)
            .chain(dead.iter().map(|d| d.job))
            .chain(
                jobs.iter()
                    .flat_map(|(_, spec)| crate::parents::parent_ids(spec)),
            )
            .collect();
        for (id, spec) in jobs {
            let run = handlers
                .get(&spec.handler)
                .cloned()
                .ok_or_else(|| EmbeddedError::UnknownHandler(spec.handler.to_string()))?;
            self.next_id = self.next_id.max(id.0);
            let key = self.key_of(id);
            let state = states.remove(&id);
            let revision = state.as_ref().map_or(1, |s| s.spec_revision.max(1));
            let mut spec = spec;
            spec.id = Arc::clone(&key.id);
            spec.namespace = Arc::clone(&self.namespace);
            spec.intern(&mut self.interner);
            if let Some(k) = &spec.idempotency_key {
                self.idempotency.insert(k.clone(), id);
            }
            // A job the dispatcher never held (no state recorded) and not due soon is staged
            // again; anything it held goes back to it, to plan what was missed.
            let fresh = state.is_none() && !held.contains(&id);
            match self.staging.stages(&spec, now) {
                Some(promote_at) if fresh => {
                    self.staging
                        .stage_durable(id, Arc::new(spec), run, promote_at);
                }
                _ => {
                    let spec = Arc::new(spec);
                    self.admit(id, key, spec, (run, true), (revision, state), now);
                }
            }
        }
        for (id, stored) in running {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            job.active += 1;
            let attempt = Attempt {
                job: id,
                execution: stored.execution,
                attempt: stored.attempt,
                fire_at: stored.fire_at,
                first_started: stored.first_started,
                epoch: 0,
                recovered: stored.retry_at.is_none(),
                run_now: false,
                started: now,
            };
            match stored.retry_at {
                Some(due) => drop(self.retries.insert(due, attempt)),
                None => self.waiting.push(attempt, job.spec.priority, now),
            }
        }
        self.restore_unrecorded(now);
        for letter in dead {
            self.dead.insert(letter.job, letter);
        }
        self.catching_up = true;
        Ok(())
    }

    /// A job whose recorded state says a fire is executing but whose execution is not in the
    /// store (the two are written in one batch, so only an older file has one) runs that
    /// fire again rather than never.
    fn restore_unrecorded(&mut self, now: UtcMillis) {
        for (id, job) in &mut self.jobs {
            let Some(state) = self.dispatcher.state(&job.key) else {
                continue;
            };
            let Some(fire_at) = state.last_fire_at else {
                continue;
            };
            if job.active > 0 || !state.status.is_executing() {
                continue;
            }
            job.active += 1;
            let attempt = Attempt {
                job: *id,
                execution: ExecutionId::for_fire(&job.key, fire_at),
                attempt: 0,
                fire_at,
                first_started: None,
                epoch: 0,
                recovered: true,
                run_now: false,
                started: now,
            };
            self.waiting.push(attempt, job.spec.priority, now);
        }
    }
}
