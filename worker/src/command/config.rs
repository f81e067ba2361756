//! What a replica's operator configures for the `command` handler, and its checks.
//!
//! The same struct is the `[worker.commands.<name>]` table of `ax.toml` (the binary embeds
//! it in its configuration) and what the handler runs with, so a setting is defined once.
//! [`CommandsConfig::problems`] names each problem by its key, as the binary's
//! configuration check reports them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ax_scheduler_core::task::CommandCall;
use ax_scheduler_core::validate::{check_env_name, check_name};
use ax_scheduler_core::MAX_COMMAND_OUTPUT_BYTES;
use serde::{Deserialize, Serialize};

use super::task_args::{self, TaskArgs};
use super::user::{self, Identity};

/// Bytes of each stream a command's history entry keeps, by default.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 4096;
/// How long a stopped command has between SIGTERM and SIGKILL, by default.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// Longest `kill_grace` a command may be given.
pub const MAX_KILL_GRACE: Duration = Duration::from_secs(300);
/// What the pool waits beyond `kill_grace` for the handler to report a stopped command.
pub const STOP_MARGIN: Duration = Duration::from_secs(2);

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
    /// What a task may pass as arguments; default none.
    #[serde(default)]
    pub task_args: TaskArgs,
    /// With `task_args = "patterns"`: the regex each task argument must match entirely, by
    /// position.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arg_patterns: Vec<String>,
    /// Environment variables it always gets (over `BASE_ENV`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of the environment variables a task may set; default none.
    #[serde(default)]
    pub allow_env: Vec<String>,
    /// Directory it runs in; default the replica's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<PathBuf>,
    /// User it runs as (a name of `/etc/passwd` or a uid); default the replica's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Group it runs as (a name of `/etc/group` or a gid); default `user`'s primary group,
    /// else the replica's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
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
            task_args: TaskArgs::None,
            arg_patterns: Vec::new(),
            env: BTreeMap::new(),
            allow_env: Vec::new(),
            working_dir: None,
            user: None,
            group: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            kill_grace: DEFAULT_KILL_GRACE,
        }
    }
}

impl CommandConfig {
    /// The ids it runs as, from `user` and `group`.
    pub(crate) fn identity(&self) -> Result<Identity, (&'static str, String)> {
        user::resolve(self.user.as_deref(), self.group.as_deref())
    }
}

impl CommandsConfig {
    /// The longest a stopped command may take to end (its `kill_grace` and
    /// [`STOP_MARGIN`]): what a replica's shutdown allows beyond `shutdown_grace`. Zero
    /// without commands.
    pub fn longest_stop(&self) -> Duration {
        self.commands
            .values()
            .map(|c| c.kill_grace + STOP_MARGIN)
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Whether a task may pass `call`'s arguments to its command, by the command's
    /// `task_args` rule. A command this configuration does not know passes: the replicas
    /// that run it decide, and refuse it there.
    pub fn check_task_args(&self, call: &CommandCall) -> Result<(), String> {
        match self.commands.get(&call.name) {
            Some(cfg) => task_args::check(&call.name, cfg.task_args, &cfg.arg_patterns, &call.args),
            None => Ok(()),
        }
    }

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
            if let Err((field, problem)) = c.identity() {
                push(format!("{key}.{field}"), problem);
            }
            for (field, problem) in task_args::problems(c.task_args, &c.arg_patterns) {
                push(format!("{key}.{field}"), problem);
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
                } else if let Some(e) = super::deny::denied(k) {
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
        assert_eq!(cfg.longest_stop(), Duration::from_secs(303));
        assert_eq!(CommandsConfig::default().longest_stop(), Duration::ZERO);
        assert!(crate::CommandHandler::new(cfg).is_err());
    }

    #[test]
    fn a_user_or_group_that_does_not_exist_is_refused_at_load() {
        let mut cfg = CommandsConfig::default();
        cfg.commands.insert(
            "job".into(),
            CommandConfig {
                user: Some("no-such-user-ax".into()),
                ..CommandConfig::new("/usr/local/bin/job")
            },
        );
        let p = cfg.problems();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "worker.commands.job.user");
        assert!(
            p[0].1
                .starts_with("no user `no-such-user-ax` in /etc/passwd"),
            "{p:?}"
        );
        cfg.commands.get_mut("job").unwrap().user = Some("root".into());
        cfg.commands.get_mut("job").unwrap().group = Some("no-such-group-ax".into());
        let p = cfg.problems();
        assert_eq!(p[0].0, "worker.commands.job.group", "{p:?}");
        cfg.commands.get_mut("job").unwrap().group = None;
        assert!(cfg.problems().is_empty());
        cfg.commands.get_mut("job").unwrap().user = Some("no-such-user-ax".into());
        assert!(crate::CommandHandler::new(cfg).is_err());
    }

    #[test]
    fn a_patterns_rule_without_patterns_is_refused_at_load() {
        let mut cfg = CommandsConfig::default();
        cfg.commands.insert(
            "report".into(),
            CommandConfig {
                task_args: TaskArgs::Patterns,
                ..CommandConfig::new("/usr/local/bin/report")
            },
        );
        let p = cfg.problems();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "worker.commands.report.arg_patterns");
        assert!(crate::CommandHandler::new(cfg).is_err());
    }

    #[test]
    fn loader_variables_are_refused_in_allow_env() {
        let mut cfg = CommandsConfig::default();
        cfg.commands.insert(
            "job".into(),
            CommandConfig {
                allow_env: vec![
                    "TARGET".into(),
                    "LD_PRELOAD".into(),
                    "PATH".into(),
                    "BASH_ENV".into(),
                    "PYTHONPATH".into(),
                    "NODE_OPTIONS".into(),
                ],
                env: [("PATH".to_owned(), "/opt/job/bin".to_owned())].into(),
                ..CommandConfig::new("/usr/local/bin/job")
            },
        );
        let p: Vec<String> = cfg
            .problems()
            .iter()
            .map(|(k, p)| format!("{k}: {p}"))
            .collect();
        assert_eq!(p.len(), 5, "{p:?}");
        assert!(
            p[0].starts_with("worker.commands.job.allow_env: `LD_PRELOAD` is a LD_* variable"),
            "{p:?}"
        );
        assert!(p[1].starts_with("worker.commands.job.allow_env: `PATH` changes what"));
        assert!(p.iter().all(|l| !l.contains("TARGET")), "{p:?}");
        let e = crate::CommandHandler::new(cfg).unwrap_err().to_string();
        assert!(e.contains("`NODE_OPTIONS`"), "{e}");
    }
}
