//! The kernel's default clock: the wall clock read once at build time, then moved by tokio's
//! monotonic clock.
//!
//! The scheduling core takes `now` as an argument and every wait of the kernel is a tokio
//! deadline, so following tokio's clock makes the whole kernel run on virtual time under a
//! paused runtime (`#[tokio::test(start_paused = true)]`): a job due in 30 minutes runs in
//! microseconds of a test. It also means a step of the host's clock does not move the
//! kernel's time; a long-lived process that must follow the wall clock exactly passes
//! [`SystemClock`](ax_scheduler_core::SystemClock) to the builder instead.

use std::fmt;

use ax_scheduler_core::{Clock, UtcMillis};
use tokio::time::Instant;

/// A wall clock that reads `at_origin` at `origin` and moves with tokio's clock from there.
#[derive(Clone, Copy)]
pub(crate) struct TokioClock {
    origin: Instant,
    at_origin: UtcMillis,
}

impl TokioClock {
    /// A clock that reads the host's clock now.
    pub(crate) fn from_now() -> Self {
        TokioClock {
            origin: Instant::now(),
            at_origin: UtcMillis::now(),
        }
    }
}

impl fmt::Debug for TokioClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokioClock({})", self.now().0)
    }
}

impl Clock for TokioClock {
    fn now(&self) -> UtcMillis {
        self.at_origin.add(self.origin.elapsed())
    }
}

/// The tokio instant at which `clock` will read `target` (now, if it is past).
pub(crate) fn instant_at(clock: &dyn Clock, target: UtcMillis) -> Instant {
    Instant::now() + target.since(clock.now())
}
