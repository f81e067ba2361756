//! The term's one timer wheel, and the three timers a task may own in it.
//!
//! A task has one slot per kind of timer ([`Armed`]), so it never owns two of a kind: its
//! next fire, its held fire's retry, its next deadline. Arming goes through here, where
//! that rule is checked. Due entries are drained into a buffer kept from poll to poll, which
//! a busy leader would otherwise allocate at every tick.

use std::time::Duration;

use crate::time::UtcMillis;
use crate::timer::{TimerConfig, TimerHandle, TimerWheel};

use super::armed::{Armed, TimerEntry, TimerKind};

#[derive(Debug)]
pub(super) struct Timers {
    wheel: TimerWheel<TimerEntry>,
    due: Vec<(UtcMillis, TimerEntry)>,
}

impl Timers {
    pub(super) fn new(config: TimerConfig, now: UtcMillis) -> Self {
        Timers {
            wheel: TimerWheel::new(config, now),
            due: Vec::new(),
        }
    }

    /// Timers pending.
    pub(super) fn len(&self) -> usize {
        self.wheel.len()
    }

    /// When the earliest timer is due.
    pub(super) fn next_due(&self) -> Option<UtcMillis> {
        self.wheel.next_due()
    }

    fn insert(&mut self, task: &Armed, kind: TimerKind, due: UtcMillis) -> TimerHandle {
        self.wheel.insert(
            due,
            TimerEntry {
                key: std::sync::Arc::clone(&task.key),
                kind,
                generation: task.generation,
            },
        )
    }

    /// Records the task's next fire and arms its timer for it (none for `None`).
    pub(super) fn set_next(&mut self, task: &mut Armed, next: Option<UtcMillis>) {
        task.state.next_fire_at = next;
        if let Some(due) = next {
            debug_assert!(task.timer.is_none(), "one scheduled timer per task");
            task.timer = Some(self.insert(task, TimerKind::Scheduled, due));
        }
    }

    /// Gives `task` its one held-fire retry timer, `after` from `now`.
    pub(super) fn arm_held_retry(&mut self, task: &mut Armed, after: Duration, now: UtcMillis) {
        debug_assert!(task.held_timer.is_none(), "one held-fire retry per task");
        task.held_timer = Some(self.insert(task, TimerKind::HeldRetry, now.add(after)));
    }

    /// Arms the task's next deadline judgement at `at`.
    pub(super) fn arm_deadline(&mut self, task: &mut Armed, at: UtcMillis) {
        debug_assert!(task.deadline_timer.is_none(), "one deadline timer per task");
        task.deadline_timer = Some(self.insert(task, TimerKind::Deadline, at));
    }

    /// Cancels a timer taken from its task's slot, if there was one.
    pub(super) fn cancel(&mut self, handle: Option<TimerHandle>) {
        if let Some(handle) = handle {
            self.wheel.cancel(handle);
        }
    }

    /// Cancels every timer of a task that is going.
    pub(super) fn cancel_all(&mut self, task: &Armed) {
        for handle in task.timers() {
            self.wheel.cancel(handle);
        }
    }

    /// Advances to `now` and hands out the entries come due; hand the emptied buffer back
    /// with [`give_back`](Self::give_back).
    pub(super) fn take_due(&mut self, now: UtcMillis) -> Vec<(UtcMillis, TimerEntry)> {
        let mut due = std::mem::take(&mut self.due);
        self.wheel.advance_into(now, &mut due);
        due
    }

    /// Keeps the buffer `take_due` handed out, for the next poll.
    pub(super) fn give_back(&mut self, due: Vec<(UtcMillis, TimerEntry)>) {
        debug_assert!(due.is_empty(), "every due timer was handled");
        self.due = due;
    }
}
