//! A job's identity, apart from the job so that the errors can name it: the kernel's
//! answers (an unknown job) and the jobs' own code (the id a context names) both use it.

use std::fmt;

use ax_scheduler_core::handler::Context;
use serde::{Deserialize, Serialize};

/// The runner of every attempt in the embedded kernel ([`Context::runner`]).
pub const EMBEDDED_RUNNER: &str = "embedded";

/// A job's identity within its kernel, returned by every submit: unique for the kernel's
/// life (and a persisted job's across restarts), not a count (a job staged in memory is
/// named by where it is held, see `docs/embedded.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub(crate) u64);

impl JobId {
    /// The id's number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The job whose attempt `ctx` is (the kernel names a job's task by its id), or `None`
    /// for an attempt the kernel does not run (a cluster worker's).
    pub fn of(ctx: &Context) -> Option<JobId> {
        if ctx.runner() != EMBEDDED_RUNNER {
            return None;
        }
        ctx.task_id().parse().ok().map(JobId)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
