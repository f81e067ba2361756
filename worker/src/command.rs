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
//! ([`capture`]), so a chatty command neither blocks on a full pipe nor grows memory.
//! Exit code 0 is success; any other is a retryable failure whose error carries the code
//! and the end of stderr; the excerpts and the exit code go to the history.
//!
//! Stopping: the command leads a process group of its own ([`group`]). On a timeout, a kill
//! or the worker's shutdown the pool cancels the handler's token and waits
//! [`Handler::stop_grace`]: the group gets SIGTERM, then SIGKILL after the command's
//! `kill_grace`. When the command exits by itself, whatever it left running in its group is
//! killed too, so an execution never outlives its attempt. A process that leaves the group on
//! purpose (`setsid`) escapes this; only a cgroup would hold it.
//!
//! Root: a replica running as root (euid 0) refuses to run commands unless
//! `commands_allow_root` says otherwise; ax's image and chart run as a non-root user.

mod capture;
mod env;
mod group;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use ax_queue::ExecutionMessage;
use ax_scheduler_core::task::CommandCall;
use ax_scheduler_core::validate::{check_env_name, check_name};
use ax_scheduler_core::{AttemptOutput, MAX_COMMAND_OUTPUT_BYTES};
use rustix::process::Signal;
use serde::{Deserialize, Serialize};

use crate::error::WorkerError;
use crate::handler::{Handler, HandlerContext, HandlerError, HandlerFuture};
use capture::Excerpt;
pub use env::BASE_ENV;
use group::GroupGuard;

/// Bytes of each stream a command's history entry keeps, by default.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 4096;
/// How long a stopped command has between SIGTERM and SIGKILL, by default.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// Longest `kill_grace` a command may be given.
pub const MAX_KILL_GRACE: Duration = Duration::from_secs(300);
/// How long the pipes are still read after the command is gone (a process that left the
/// group may hold them open).
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// What the pool waits beyond `kill_grace` for the handler to report a stopped command.
const STOP_MARGIN: Duration = Duration::from_secs(2);
/// Bytes of stderr's end an error message quotes.
const ERROR_STDERR_BYTES: usize = 512;

/// The commands a replica runs: `[worker.commands.<name>]` and `commands_allow_root`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommandsConfig {
    /// Commands by the name tasks use.
    pub commands: BTreeMap<String, CommandConfig>,
    /// Run commands even when the replica runs as root. Off by default: a command would
    /// then have every right on the machine.
    pub allow_root: bool,
}

/// One configured command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    /// Absolute path of the executable.
    pub path: PathBuf,
    /// Arguments it always gets, before the task's.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables it always gets (over [`BASE_ENV`]).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of the environment variables a task may set; default none.
    #[serde(default)]
    pub allow_env: Vec<String>,
    /// Directory it runs in; default the replica's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<PathBuf>,
    /// Bytes of each of stdout and stderr kept in the history (the first and last halves);
    /// default [`DEFAULT_MAX_OUTPUT_BYTES`], at most [`MAX_COMMAND_OUTPUT_BYTES`].
    #[serde(default = "default_max_output")]
    pub max_output_bytes: usize,
    /// Time between SIGTERM and SIGKILL when it is stopped; default [`DEFAULT_KILL_GRACE`].
    #[serde(
        default = "default_kill_grace",
        with = "ax_scheduler_core::duration_serde"
    )]
    pub kill_grace: Duration,
}

fn default_max_output() -> usize {
    DEFAULT_MAX_OUTPUT_BYTES
}

fn default_kill_grace() -> Duration {
    DEFAULT_KILL_GRACE
}

impl CommandConfig {
    /// The command at `path` with every other setting at its default.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        CommandConfig {
            path: path.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            allow_env: Vec::new(),
            working_dir: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            kill_grace: DEFAULT_KILL_GRACE,
        }
    }
}

impl CommandsConfig {
    /// Every problem of the configuration as (its key, `worker.commands.<name>.<field>`,
    /// what is wrong).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut push = |key: String, problem: String| out.push((key, problem));
        for (name, c) in &self.commands {
            let key = format!("worker.commands.{name}");
            if let Err(e) = check_name(name) {
                push(key.clone(), format!("the command name {e}"));
            }
            if !c.path.is_absolute() {
                push(
                    format!("{key}.path"),
                    format!(
                        "`{}` must be an absolute path (no PATH search)",
                        c.path.display()
                    ),
                );
            }
            if let Some(dir) = &c.working_dir {
                if !dir.is_absolute() {
                    push(
                        format!("{key}.working_dir"),
                        format!("`{}` must be an absolute path", dir.display()),
                    );
                }
            }
            for (i, a) in c.args.iter().enumerate() {
                if a.contains('\0') {
                    push(
                        format!("{key}.args"),
                        format!("entry {i} contains a NUL byte"),
                    );
                }
            }
            for (k, v) in &c.env {
                if let Err(e) = check_env_name(k) {
                    push(format!("{key}.env"), e);
                }
                if v.contains('\0') {
                    push(format!("{key}.env.{k}"), "contains a NUL byte".into());
                }
            }
            for k in &c.allow_env {
                if let Err(e) = check_env_name(k) {
                    push(format!("{key}.allow_env"), e);
                }
            }
            if c.max_output_bytes == 0 || c.max_output_bytes > MAX_COMMAND_OUTPUT_BYTES {
                push(
                    format!("{key}.max_output_bytes"),
                    format!(
                        "{} is out of range 1-{MAX_COMMAND_OUTPUT_BYTES}",
                        c.max_output_bytes
                    ),
                );
            }
            if c.kill_grace > MAX_KILL_GRACE {
                push(
                    format!("{key}.kill_grace"),
                    format!(
                        "{:?} is longer than the most allowed, {:?}",
                        c.kill_grace, MAX_KILL_GRACE
                    ),
                );
            }
        }
        out
    }
}

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
    ) -> Result<(&'a CommandConfig, &'a CommandCall), HandlerError> {
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
        if self.euid == 0 && !self.cfg.allow_root {
            return Err(HandlerError::Permanent(
                "this replica runs as root (euid 0): the command handler runs commands only as \
                 a non-root user, unless worker.commands_allow_root is true"
                    .into(),
            ));
        }
        Ok((cfg, call))
    }
}

impl Handler for CommandHandler {
    fn run<'a>(&'a self, ctx: HandlerContext, exec: &'a ExecutionMessage) -> HandlerFuture<'a> {
        Box::pin(async move {
            let (cfg, call) = self.resolve(exec)?;
            run(cfg, call, exec, &ctx).await
        })
    }

    fn stop_grace(&self, exec: &ExecutionMessage) -> Duration {
        exec.command
            .as_ref()
            .and_then(|c| self.cfg.commands.get(&c.name))
            .map_or(Duration::ZERO, |c| c.kill_grace + STOP_MARGIN)
    }
}

/// Runs one attempt of `call` as `cfg` says.
async fn run(
    cfg: &CommandConfig,
    call: &CommandCall,
    exec: &ExecutionMessage,
    ctx: &HandlerContext,
) -> Result<(), HandlerError> {
    let name = call.name.as_str();
    let env = env::build(cfg, exec, &call.env).map_err(|names| {
        HandlerError::Permanent(format!(
            "command `{name}` does not let a task set {}: an operator lists the names a task \
             may set in worker.commands.{name}.allow_env",
            names.join(", ")
        ))
    })?;
    let mut cmd = tokio::process::Command::new(&cfg.path);
    cmd.args(&cfg.args)
        .args(&call.args)
        .env_clear()
        .envs(&env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // The group guard kills the whole group; the child alone is not enough.
        .kill_on_drop(false);
    if let Some(dir) = &cfg.working_dir {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().map_err(|e| spawn_error(name, cfg, e))?;
    let guard = GroupGuard::new(child.id());
    tracing::debug!(command = name, pid = child.id(), "command started");
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let mut out = Excerpt::new(cfg.max_output_bytes);
    let mut err = Excerpt::new(cfg.max_output_bytes);
    let mut stopped = false;
    let status = {
        let reading = std::pin::pin!(async {
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
        });
        let mut reading = reading;
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
        status
    };
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
        (Some(0), _) if !stopped => Ok(()),
        (Some(code), _) => Err(HandlerError::Retryable(format!(
            "command `{name}` exited with code {code}{tail}"
        ))),
        (None, Some(sig)) => Err(HandlerError::Retryable(format!(
            "command `{name}` was killed by signal {sig}{tail}"
        ))),
        (None, None) => Err(HandlerError::Retryable(format!(
            "command `{name}` ended without an exit code{tail}"
        ))),
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

    #[test]
    fn configuration_problems_name_their_key() {
        let mut cfg = CommandsConfig::default();
        cfg.commands.insert(
            "bad name".into(),
            CommandConfig {
                env: [("AX_TASK".to_owned(), "x".to_owned())].into(),
                allow_env: vec!["1X".into()],
                working_dir: Some("data".into()),
                max_output_bytes: 0,
                kill_grace: Duration::from_secs(301),
                ..CommandConfig::new("backup.sh")
            },
        );
        let p: Vec<String> = cfg
            .problems()
            .iter()
            .map(|(k, p)| format!("{k}: {p}"))
            .collect();
        assert_eq!(p.len(), 7, "{p:?}");
        assert!(
            p[0].starts_with("worker.commands.bad name: the command name"),
            "{p:?}"
        );
        assert!(
            p[1].starts_with("worker.commands.bad name.path: `backup.sh` must be an absolute path")
        );
        assert!(p[2].starts_with("worker.commands.bad name.working_dir:"));
        assert!(p[3].starts_with("worker.commands.bad name.env: `AX_TASK` is reserved"));
        assert!(p[4].starts_with("worker.commands.bad name.allow_env: `1X` is not"));
        assert!(p[5].starts_with("worker.commands.bad name.max_output_bytes: 0 is out of range"));
        assert!(p[6].starts_with("worker.commands.bad name.kill_grace:"));
        assert!(CommandHandler::new(cfg).is_err());
    }

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
        assert_eq!(h.stop_grace(&backup), DEFAULT_KILL_GRACE + STOP_MARGIN);
        assert_eq!(h.stop_grace(&other), Duration::ZERO);

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
