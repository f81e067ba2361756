//! Dependent jobs: a job that has no time of its own and runs when its parents' executions
//! end as it asks (the cluster's `depends_on`).
//!
//! The kernel only turns [`Parent`]s into the core's [`Dependency`] edges and checks them at
//! the call; runs, fan-in, `within` and skipped steps are the dispatcher's, as for a
//! cluster task. What is the kernel's own is when a job of a chain may be forgotten (see
//! `engine::forget`), since a job of the kernel leaves memory once nothing of it is to come.

use std::collections::HashSet;
use std::time::Duration;

use ax_scheduler_core::task::{
    DependOn, Dependency, DEFAULT_DEPENDENCY_WITHIN, MAX_DEPENDENCY_WITHIN, MAX_PARENTS,
};
use ax_scheduler_core::TaskSpec;

use crate::error::{EmbeddedError, Result};
use crate::job::NAMESPACE;
use crate::job_id::JobId;

/// One parent of a dependent job ([`Kernel::when_done`](crate::Kernel::when_done)): the
/// job, which of its ends lets the child run, and how long after the run reached the child
/// (its first parent ended) the other parents may take.
///
/// ```
/// use std::time::Duration;
/// use ax_embedded::{JobId, Parent};
/// # fn demo(extract: JobId, audit: JobId) -> Vec<Parent> {
/// vec![
///     Parent::succeeded(extract),
///     Parent::ended(audit).within(Duration::from_secs(2 * 3600)),
/// ]
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parent {
    job: JobId,
    on: DependOn,
    within: Duration,
}

impl Parent {
    /// The child runs once `job`'s execution succeeded (the default of `depends_on`).
    pub fn succeeded(job: JobId) -> Self {
        Parent::on(job, DependOn::Success)
    }

    /// The child runs once `job`'s execution failed for good (retries exhausted, or
    /// killed).
    pub fn failed(job: JobId) -> Self {
        Parent::on(job, DependOn::Failure)
    }

    /// The child runs once `job`'s execution ended, however.
    pub fn ended(job: JobId) -> Self {
        Parent::on(job, DependOn::Any)
    }

    /// How long the parents may take once the run reached the child; later, its step is
    /// skipped. Default 24 h, at most 7 days.
    pub fn within(mut self, within: Duration) -> Self {
        self.within = within;
        self
    }

    fn on(job: JobId, on: DependOn) -> Self {
        Parent {
            job,
            on,
            within: DEFAULT_DEPENDENCY_WITHIN,
        }
    }

    /// The parent job.
    pub fn job(&self) -> JobId {
        self.job
    }
}

impl From<JobId> for Parent {
    fn from(job: JobId) -> Self {
        Parent::succeeded(job)
    }
}

/// The edges of a dependent job, if its parents can be: 1 to [`MAX_PARENTS`] distinct jobs,
/// each `within` in range. Whether each parent exists is the engine's to say.
pub(crate) fn dependencies(parents: &[Parent]) -> Result<Vec<Dependency>> {
    let bad = |reason: String| Err(EmbeddedError::invalid("parents", reason));
    if parents.is_empty() {
        return bad("a dependent job needs at least one parent".to_owned());
    }
    if parents.len() > MAX_PARENTS {
        return bad(format!("{} parents, at most {MAX_PARENTS}", parents.len()));
    }
    let mut seen = HashSet::new();
    for p in parents {
        if !seen.insert(p.job) {
            return bad(format!("job {} is listed twice", p.job.get()));
        }
        if p.within.is_zero() || p.within > MAX_DEPENDENCY_WITHIN {
            return bad(format!(
                "within {:?} of job {} is not between 1 ms and 7 days",
                p.within,
                p.job.get()
            ));
        }
    }
    Ok(parents
        .iter()
        .map(|p| Dependency {
            task: format!("{NAMESPACE}/{}", p.job.get()),
            on: p.on,
            within: p.within,
        })
        .collect())
}

/// The parents of a job's spec (none for a job with a time of its own).
pub(crate) fn parent_ids(spec: &TaskSpec) -> impl Iterator<Item = JobId> + '_ {
    spec.depends_on.iter().filter_map(|d| {
        let id = d.task.strip_prefix(NAMESPACE)?.strip_prefix('/')?;
        id.parse().ok().map(JobId)
    })
}
