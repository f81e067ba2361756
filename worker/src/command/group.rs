//! The command's process group: how it is signalled, and the guard that kills it whatever
//! happens to the handler.
//!
//! Every command starts as the leader of a new process group (its pid is the group id), so
//! whatever it forks stays in the group unless it leaves on purpose (`setsid`, `setpgid`),
//! and one `kill(-pgid, sig)` reaches all of it. Signalling a group whose members are all
//! gone fails with `ESRCH`, which is the goal reached, not an error.
//!
//! The handler's future can be dropped at any await (the pool aborts a handler that does not
//! stop within its grace, and a panic unwinds through it): [`GroupGuard`] kills the group
//! with SIGKILL when it is dropped armed, so no path leaves the command running. tokio reaps
//! a dropped child in the background, so no zombie stays either.

use rustix::process::{kill_process_group, Pid, Signal};

/// A signal to the whole group; `false` when the group is gone.
pub(crate) fn signal_group(pgid: Pid, signal: Signal) -> bool {
    match kill_process_group(pgid, signal) {
        Ok(()) => true,
        Err(rustix::io::Errno::SRCH) => false,
        Err(e) => {
            tracing::warn!(pgid = pgid.as_raw_nonzero().get(), error = %e, ?signal, "cannot signal a command's process group");
            false
        }
    }
}

/// Kills the group when dropped, unless disarmed.
#[derive(Debug)]
pub(crate) struct GroupGuard {
    pgid: Option<Pid>,
}

impl GroupGuard {
    /// A guard over the group led by `pid`, or over nothing if there is no pid (the child
    /// was already reaped, which `spawn` does not do).
    pub(crate) fn new(pid: Option<u32>) -> Self {
        let pgid = pid
            .and_then(|p| i32::try_from(p).ok())
            .and_then(Pid::from_raw);
        GroupGuard { pgid }
    }

    /// Sends `signal` to the group; `false` when it is gone.
    pub(crate) fn signal(&self, signal: Signal) -> bool {
        self.pgid.is_some_and(|g| signal_group(g, signal))
    }
}

impl GroupGuard {
    /// Kills what is left of the group once its leader has exited (background processes
    /// the command left behind) and disarms the guard. Called right after the leader is
    /// reaped: its pid, the group id, is then free, but pids are handed out in turn over the
    /// whole pid space, so no new process takes it in between.
    pub(crate) fn kill_rest(mut self) -> bool {
        self.pgid
            .take()
            .is_some_and(|g| signal_group(g, Signal::KILL))
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // The normal path has already killed what was left; this is for futures dropped
            // mid-run (an abort, a panic), where nothing else would.
            signal_group(pgid, Signal::KILL);
        }
    }
}
