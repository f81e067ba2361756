//! Overlap `forbid`'s dispatcher half (see [`crate::overlap`]): the fire Redis answered
//! `Held` is kept by its task until the previous execution is over.
//!
//! The held fire is a field of the task's state (`held_fire_at`), not an entry of its own,
//! so it is written with the task and a new leader finds it; later held fires merge into
//! it. Its one retry timer covers a completion event that was lost. A held fire is released
//! once a fire at or after it is in the queue.

use crate::execution::EnqueueOutcome;
use crate::overlap::merge_held;
use crate::time::UtcMillis;

use super::{Dispatch, Dispatcher};

impl Dispatcher {
    /// Takes what the enqueue of `dispatch` came to.
    pub fn on_enqueued(&mut self, dispatch: &Dispatch, outcome: EnqueueOutcome, now: UtcMillis) {
        let Some(task) = self.tasks.get_mut(&dispatch.key) else {
            return;
        };
        match outcome {
            EnqueueOutcome::Enqueued | EnqueueOutcome::Duplicate => {
                // A scheduled fire at or after the held one is in the queue: the held fire
                // is that one, or merged into it.
                if dispatch.run_now.is_none()
                    && task
                        .state
                        .held_fire_at
                        .is_some_and(|h| h <= dispatch.fire_at)
                {
                    task.state.held_fire_at = None;
                    self.writes.current(&task.key);
                    self.timers.cancel(task.held_timer.take());
                }
            }
            EnqueueOutcome::Held => {
                task.state.held_fire_at =
                    Some(merge_held(task.state.held_fire_at, dispatch.fire_at));
                self.writes.current(&task.key);
                if task.held_timer.is_none() {
                    self.timers
                        .arm_held_retry(task, self.config.hold_retry, now);
                }
            }
            // The sender was deposed; the engine ends the term.
            EnqueueOutcome::Fenced { .. } => {}
        }
    }
}
