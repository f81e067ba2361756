//! What `ax serve` does to its own process so that what it runs cannot read its secrets.
//!
//! A replica holds secrets in memory (the etcd and Redis passwords, API tokens, alert
//! webhooks) and runs programs: the `command` handler's children. A child that runs as the
//! same user could read the replica's `/proc/<pid>/environ` and `/proc/<pid>/mem`, or attach
//! to it with `ptrace`, and take them all. Marking the process not dumpable
//! (`prctl(PR_SET_DUMPABLE, 0)`) makes the kernel give its `/proc` files to root and refuse
//! `ptrace` to anyone without `CAP_SYS_PTRACE`; it also means no core dump (which would hold
//! the same secrets). A child does not inherit the flag through `exec` of an ordinary
//! program, so it changes nothing for the commands themselves.
//!
//! A failure is logged, not fatal: on a kernel or sandbox that refuses the call the replica
//! still works, with the protection of its other layers (commands start with an environment
//! built from nothing, and may run as another user).

/// Makes this process not dumpable; `Err` with the OS's reason when it cannot.
pub fn make_undumpable() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    }
    Ok(())
}

/// Whether this process is not dumpable (always `false` off Linux).
pub fn is_undumpable() -> bool {
    #[cfg(target_os = "linux")]
    {
        matches!(
            rustix::process::dumpable_behavior(),
            Ok(rustix::process::DumpableBehavior::NotDumpable)
        )
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Hardens the serving process, logging what could not be done.
pub fn apply() {
    match make_undumpable() {
        Ok(()) => tracing::debug!("process marked not dumpable"),
        Err(e) => tracing::warn!(
            error = %e,
            "cannot mark the process not dumpable: a command running as ax's user could read \
             its memory and environment"
        ),
    }
}
