//! The built-in `command` handler: runs an executable the replica's configuration names.
//!
//! Who decides what runs is the point of its design. A task names a command
//! (`"command": {"name": "backup", "args": [...], "env": {...}}`); the replica's
//! configuration ([`CommandsConfig`], `[worker.commands.<name>]` in `ax.toml`) says which
//! executable that is, the arguments it always gets first, the directory it runs in and the
//! only environment variables a task may set. Whoever can write tasks can therefore run the
//! commands an operator put on the replicas, with arguments, and nothing else: no path, no
//! shell line, no inherited environment comes from a task. A name a replica does not know
//! fails the execution permanently, with the names it does know, since another attempt on
//! the same replicas would fail the same way.
//!
//! Running: no shell (the arguments reach the program as they are, one by one); the
//! environment is built from nothing ([`env`]); stdin is empty and the payload is in
//! `AX_PAYLOAD`; stdout and stderr are read as they come into capped excerpts
//! (`capture`), so a chatty command neither blocks on a full pipe nor grows memory.
//! Exit code 0 is success; any other is a retryable failure whose error carries the code
//! and the end of stderr; the excerpts and the exit code go to the history.
//!
//! Stopping: the command leads a process group of its own (`group`). On a timeout, a kill
//! or the worker's shutdown the pool cancels the handler's token and waits
//! [`Handler::stop_grace`]: the group gets SIGTERM, then SIGKILL after the command's
//! `kill_grace`. When the command exits by itself, whatever it left running in its group is
//! killed too, so an execution never outlives its attempt. A process that leaves the group on
//! purpose (`setsid`) escapes this; only a cgroup would hold it.
//!
//! Identity: a command runs as the replica's user, or as the `user` and `group` its
//! configuration names (`user`). A command that would run as root (euid 0, no other user
//! named) is refused unless `commands_allow_root` says otherwise; ax's image and chart run
//! as a non-root user.

mod capture;
mod config;
mod deny;
mod env;
mod group;
mod home;
mod task_args;
mod user;

use std::collections::BTreeMap;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use ax_queue::ExecutionMessage;
use ax_scheduler_core::task::CommandCall;
use ax_scheduler_core::AttemptOutput;
use rustix::process::Signal;

use crate::error::WorkerError;
use crate::handler::{
    ClusterAttempt, Context, Handler, HandlerContext, HandlerError, HandlerFuture,
};
use capture::Excerpt;
pub use config::{
    CommandConfig, CommandsConfig, DEFAULT_KILL_GRACE, DEFAULT_MAX_OUTPUT_BYTES, MAX_KILL_GRACE,
    STOP_MARGIN,
};
pub use env::BASE_ENV;
use group::GroupGuard;
pub use task_args::TaskArgs;

/// How long the pipes are still read after the command is gone (a process that left the
/// group may hold them open).
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// Bytes of stderr's end an error message quotes.
const ERROR_STDERR_BYTES: usize = 512;

/// Runs the configured command a task names. See the module notes.
#[derive(Clone, Debug)]
pub struct CommandHandler {
    cfg: std::sync::Arc<CommandsConfig>,
    /// The replica's effective uid, read once: it does not change while ax runs.
    euid: u32,
}

impl CommandHandler {
    /// A handler for `cfg`'s commands; refuses a configuration with problems.
    pub fn new(cfg: CommandsConfig) -> Result<Self, WorkerError> {
        let problems = cfg.problems();
        if !problems.is_empty() {
            let lines: Vec<String> = problems.iter().map(|(k, p)| format!("{k}: {p}")).collect();
            return Err(WorkerError::InvalidConfig(lines.join("; ")));
        }
        let euid = rustix::process::geteuid().as_raw();
        for (name, c) in &cfg.commands {
            if !c.path.is_file() {
                tracing::warn!(command = %name, path = %c.path.display(), "configured command not found: its executions will fail");
            }
        }
        if euid == 0 && !cfg.allow_root && !cfg.commands.is_empty() {
            tracing::warn!(
                "this replica runs as root: the command handler refuses to run commands \
                 (run ax as a non-root user, or set worker.commands_allow_root)"
            );
        }
        Ok(CommandHandler {
            cfg: std::sync::Arc::new(cfg),
            euid,
        })
    }

    /// The configured command names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.cfg.commands.keys().cloned().collect()
    }

    /// The command a message asks for, if this replica may run it.
    fn resolve<'a>(
        &'a self,
        exec: &'a ExecutionMessage,
    ) -> Result<(&'a CommandConfig, &'a CommandCall, user::Identity), HandlerError> {
        let Some(call) = &exec.command else {
            return Err(HandlerError::Permanent(
                "task has no `command` for the command handler".into(),
            ));
        };
        let Some(cfg) = self.cfg.commands.get(&call.name) else {
            return Err(HandlerError::Permanent(format!(
                "unknown command `{}`: this replica configures [{}]; configure it on every \
                 replica serving queue `{}` ([worker.commands.{}]), or give the task a queue \
                 only replicas that have it serve",
                call.name,
                self.names().join(", "),
                exec.queue,
                call.name
            )));
        };
        let identity = cfg.identity().map_err(|(field, e)| {
            HandlerError::Permanent(format!("worker.commands.{}.{field}: {e}", call.name))
        })?;
        if identity.uid.unwrap_or(self.euid) == 0 && !self.cfg.allow_root {
            return Err(HandlerError::Permanent(
                "this replica runs as root (euid 0): the command handler runs commands only as \
                 a non-root user (the replica's, or the command's `user`), unless \
                 worker.commands_allow_root is true"
                    .into(),
            ));
        }
        Ok((cfg, call, identity))
    }
}

impl Handler for CommandHandler {
    fn run(&self, ctx: Context) -> HandlerFuture<'_> {
        Box::pin(async move {
            let ClusterAttempt {
                ctx, message: exec, ..
            } = ClusterAttempt::of(&ctx)?;
            let (cfg, call, identity) = self.resolve(exec)?;
            run(cfg, call, identity, exec, ctx).await
        })
    }

    fn stop_grace(&self, ctx: &Context) -> Duration {
        ctx.extension::<ClusterAttempt>()
            .and_then(|c| c.message.command.as_ref())
            .and_then(|c| self.cfg.commands.get(&c.name))
            .map_or(Duration::ZERO, |c| c.kill_grace + STOP_MARGIN)
    }
}

/// Runs one attempt of `call` as `cfg` says.
async fn run(
    cfg: &CommandConfig,
    call: &CommandCall,
    identity: user::Identity,
    exec: &ExecutionMessage,
    ctx: &HandlerContext,
) -> Result<(), HandlerError> {
    let name = call.name.as_str();
    task_args::check(name, cfg.task_args, &cfg.arg_patterns, &call.args)
        .map_err(HandlerError::Permanent)?;
    let mut env = env::build(cfg, exec, &call.env).map_err(|names| {
        HandlerError::Permanent(format!(
            "command `{name}` does not let a task set {}: an operator lists the names a task \
             may set in worker.commands.{name}.allow_env",
            names.join(", ")
        ))
    })?;
    // The operator's own values for the command (credentials, often) are masked in its
    // output as the task's are.
    ctx.output.hide(cfg.env.values().cloned());
    let home = home::private_home(cfg, &identity).map_err(|e| {
        HandlerError::Retryable(format!(
            "cannot make a private home for command `{name}`: {e}"
        ))
    })?;
    if let Some(home) = &home {
        env.insert("HOME".into(), home.path().display().to_string());
    }
    let mut child = spawn(cfg, call, identity, &env).map_err(|e| spawn_error(name, cfg, e))?;
    let guard = GroupGuard::new(child.id());
    tracing::debug!(command = name, pid = child.id(), "command started");
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let mut out = Excerpt::new(cfg.max_output_bytes);
    let mut err = Excerpt::new(cfg.max_output_bytes);
    let reading = async {
        tokio::join!(
            async {
                if let Some(s) = stdout {
                    capture::drain(s, &mut out).await;
                }
            },
            async {
                if let Some(s) = stderr {
                    capture::drain(s, &mut err).await;
                }
            }
        )
    };
    let (status, stopped) = supervise(child, guard, reading, cfg, ctx, name).await;
    drop(home);
    let status = status
        .map_err(|e| HandlerError::Retryable(format!("cannot wait for command `{name}`: {e}")))?;
    tracing::debug!(command = name, exit_code = status.code(), "command ended");
    ctx.output.set(AttemptOutput::command(
        status.code(),
        &out.bytes(),
        &err.bytes(),
        out.is_cut() || err.is_cut(),
    ));
    judge(name, status, &err, stopped)
}

/// Starts the command with nothing but what `cfg` and the task give it, as `identity`,
/// leading a process group of its own.
fn spawn(
    cfg: &CommandConfig,
    call: &CommandCall,
    identity: user::Identity,
    env: &BTreeMap<String, String>,
) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&cfg.path);
    cmd.args(task_args::argv(&cfg.args, cfg.task_args, &call.args))
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // The group guard kills the whole group; the child alone is not enough.
        .kill_on_drop(false);
    if let Some(dir) = &cfg.working_dir {
        cmd.current_dir(dir);
    }
    if let Some(gid) = identity.gid {
        cmd.gid(gid);
    }
    if let Some(uid) = identity.uid {
        cmd.uid(uid);
    }
    cmd.spawn()
}

/// Waits for the command while `reading` drains its pipes, stopping its group when the
/// token is cancelled (SIGTERM, then SIGKILL after `kill_grace`), and kills what it left
/// in its group. Returns its exit status and whether it was stopped.
async fn supervise(
    mut child: tokio::process::Child,
    guard: GroupGuard,
    reading: impl std::future::Future<Output = ((), ())>,
    cfg: &CommandConfig,
    ctx: &HandlerContext,
    name: &str,
) -> (std::io::Result<ExitStatus>, bool) {
    let mut stopped = false;
    let mut reading = std::pin::pin!(reading);
    let mut read_all = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut killed = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = &mut reading, if !read_all => read_all = true,
            _ = ctx.cancel.cancelled(), if kill_at.is_none() => {
                tracing::info!(command = name, grace = ?cfg.kill_grace, "stopping the command: SIGTERM to its process group");
                stopped = true;
                guard.signal(Signal::TERM);
                kill_at = Some(tokio::time::Instant::now() + cfg.kill_grace);
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(tokio::time::Instant::now)),
                if kill_at.is_some() && !killed => {
                tracing::warn!(command = name, "the command outlived its grace: SIGKILL to its process group");
                guard.signal(Signal::KILL);
                killed = true;
            }
        }
    };
    if guard.kill_rest() && status.is_ok() {
        tracing::info!(
            command = name,
            "killed what the command left running in its process group"
        );
    }
    if !read_all {
        let _ = tokio::time::timeout(DRAIN_GRACE, &mut reading).await;
    }
    (status, stopped)
}

/// The attempt's result from the command's exit status.
fn judge(
    name: &str,
    status: ExitStatus,
    stderr: &Excerpt,
    stopped: bool,
) -> Result<(), HandlerError> {
    use std::os::unix::process::ExitStatusExt;
    let tail = stderr.last(ERROR_STDERR_BYTES);
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!("; stderr: {tail}")
    };
    match (status.code(), status.signal()) {
        // The pool has already settled a stopped attempt by why it stopped it; this only
        // keeps a command that exits 0 on SIGTERM from reading as a success.
        (Some(0), _) if stopped => Err(HandlerError::Retryable(format!(
            "command `{name}` was stopped (it exited with code 0){tail}"
        ))),
        (Some(0), _) => Ok(()),
        (Some(code), _) => Err(HandlerError::Retryable(format!(
            "command `{name}` exited with code {code}{tail}"
        ))),
        (None, Some(sig)) => Err(HandlerError::Retryable(format!(
            "command `{name}` was killed by signal {sig}{}{tail}",
            signal_name(sig)
        ))),
        (None, None) => Err(HandlerError::Retryable(format!(
            "command `{name}` ended without an exit code{tail}"
        ))),
    }
}

/// ` (SIGKILL)` for the signals people know by name; empty for the others.
fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => " (SIGHUP)",
        2 => " (SIGINT)",
        6 => " (SIGABRT)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        13 => " (SIGPIPE)",
        15 => " (SIGTERM)",
        _ => "",
    }
}

/// Why a command did not start: a path that is missing or not executable stays so (an
/// operator must fix the replica), anything else (no memory, too many processes) may pass.
fn spawn_error(name: &str, cfg: &CommandConfig, e: std::io::Error) -> HandlerError {
    use std::io::ErrorKind;
    let text = format!(
        "cannot start command `{name}` ({}): {e}",
        cfg.path.display()
    );
    match e.kind() {
        ErrorKind::NotFound | ErrorKind::PermissionDenied | ErrorKind::InvalidInput => {
            HandlerError::Permanent(text)
        }
        _ => HandlerError::Retryable(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(json: &str) -> ExecutionMessage {
        let spec = ax_scheduler_core::TaskSpec::from_json(json.as_bytes(), "ns", "t").unwrap();
        ExecutionMessage::for_fire(
            &spec,
            ax_scheduler_core::UtcMillis(0),
            ax_scheduler_core::UtcMillis(0),
            1,
        )
    }

    #[test]
    fn unknown_commands_and_root_are_refused_permanently() {
        let mut cfg = CommandsConfig::default();
        cfg.commands
            .insert("backup".into(), CommandConfig::new("/bin/true"));
        let h = CommandHandler {
            cfg: std::sync::Arc::new(cfg.clone()),
            euid: 1000,
        };
        let other = exec(
            r#"{"handler":"command","schedule":{"every":"1m"},"queue":"scripts","command":{"name":"restore"}}"#,
        );
        let e = h.resolve(&other).unwrap_err();
        assert!(!e.is_retryable());
        assert!(
            e.to_string().starts_with(
                "unknown command `restore`: this replica configures [backup]; configure it on \
                 every replica serving queue `scripts`"
            ),
            "{e}"
        );
        let backup =
            exec(r#"{"handler":"command","schedule":{"every":"1m"},"command":{"name":"backup"}}"#);
        assert!(h.resolve(&backup).is_ok());
        let ctx = |m: &ExecutionMessage| {
            let parts = HandlerContext {
                worker_id: "w".into(),
                cancel: crate::Cancel::new(),
                http: crate::EgressClient::new(crate::EgressPolicy::default()).unwrap(),
                output: crate::OutputSlot::default(),
                completion: None,
            };
            ClusterAttempt::context(parts, m.clone(), ax_scheduler_core::UtcMillis(0))
        };
        assert_eq!(
            h.stop_grace(&ctx(&backup)),
            DEFAULT_KILL_GRACE + STOP_MARGIN
        );
        assert_eq!(h.stop_grace(&ctx(&other)), Duration::ZERO);

        let root = CommandHandler {
            cfg: std::sync::Arc::new(cfg.clone()),
            euid: 0,
        };
        let e = root.resolve(&backup).unwrap_err();
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("worker.commands_allow_root"), "{e}");
        cfg.allow_root = true;
        let allowed = CommandHandler {
            cfg: std::sync::Arc::new(cfg),
            euid: 0,
        };
        assert!(allowed.resolve(&backup).is_ok());
    }
}
