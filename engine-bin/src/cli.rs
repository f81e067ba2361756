//! The command line: the clap definitions, exit codes and the error type commands return;
//! its submodules parse nothing else: [`commands`] calls an operation for each command,
//! [`output`] prints what it answered, [`task_file`] reads a spec file, [`edge`] is what the
//! process reads of its surroundings.
//!
//! Exit codes are part of the interface scripts rely on (docs/cli.md), so they are named
//! constants here and every failure goes through [`CliError::exit_code`]. Global flags that
//! set configuration keys are turned into [`ConfigOverrides`], the top configuration layer;
//! their environment counterparts are read by the config module, not by clap, so that the
//! precedence rules live in one place.

pub mod commands;
pub mod edge;
pub mod output;
mod plumbing;
pub mod scheduled;
pub mod task_file;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{ConfigError, ConfigOverrides, ReplicaRole};
use ax_control::api::TaskKey;

/// Success.
pub const EXIT_OK: u8 = 0;
/// The operation failed (a backend error, a server that stopped on an error).
pub const EXIT_FAILED: u8 = 1;
/// Usage or configuration error (bad flag, bad config, command not available).
pub const EXIT_USAGE: u8 = 2;
/// Invalid input: the task spec (or other input) failed validation; each error is printed on
/// stderr.
pub const EXIT_INVALID: u8 = 3;
/// The task, execution or dead letter named does not exist.
pub const EXIT_NOT_FOUND: u8 = 4;
/// Conflict: the change lost a race or a newer version exists.
pub const EXIT_CONFLICT: u8 = 5;

/// `ax`: a cluster-native task scheduler.
#[derive(Debug, Parser)]
#[command(name = "ax", version, propagate_version = true)]
pub struct Cli {
    /// Flags every command accepts.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command accepts. Those that set configuration keys override the file and the
/// environment.
#[derive(Debug, Default, Args)]
pub struct GlobalArgs {
    /// Config file (TOML). Default: $AX_CONFIG, else /etc/ax/ax.toml if it exists.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// etcd endpoints, comma separated [etcd.endpoints].
    #[arg(long, global = true, value_delimiter = ',', value_name = "URLS")]
    pub etcd_endpoints: Option<Vec<String>>,
    /// Key prefix in etcd [etcd.prefix].
    #[arg(long, global = true, value_name = "PREFIX")]
    pub etcd_prefix: Option<String>,
    /// Redis URL, redis:// or rediss:// [redis.url].
    #[arg(long, global = true, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Log format. Default: $AX_LOG_FORMAT, else text.
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub log_format: Option<crate::serve::logging::LogFormat>,
}

/// Flags of what a replica runs: on `serve`, and on `config print` to see their effect; the
/// other commands never run a replica, so their help leaves them out.
#[derive(Clone, Debug, Default, Args)]
pub struct ReplicaArgs {
    /// This replica's id [instance.id].
    #[arg(long, value_name = "ID")]
    pub instance_id: Option<String>,
    /// Roles, comma separated: scheduler, worker [instance.roles].
    #[arg(long, value_delimiter = ',', value_name = "ROLES")]
    pub roles: Option<Vec<ReplicaRole>>,
    /// Concurrent executions; 0 means twice the CPU cores [worker.concurrency].
    #[arg(long, value_name = "N")]
    pub worker_concurrency: Option<usize>,
    /// Queues worked on, comma separated [worker.queues].
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub worker_queues: Option<Vec<String>>,
    /// HTTP listen address, host:port [http.listen].
    #[arg(long, value_name = "ADDR")]
    pub http_listen: Option<String>,
}

/// What to say about a `--redis-url` that carries a password: every user of the host reads a
/// process's command line (`/proc/PID/cmdline`, `ps`).
pub fn password_warning(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then(|| {
        "--redis-url carries a password, which every user of this host can read in the \
         process's command line (ps, /proc/PID/cmdline); put it in redis.password_file (or \
         the whole URL in redis.url_file) instead"
            .to_owned()
    })
}

impl Cli {
    /// The flags that set configuration keys, as the top configuration layer.
    pub fn overrides(&self) -> ConfigOverrides {
        let g = &self.global;
        let r = match &self.command {
            Command::Serve(r) | Command::Config(ConfigCommand::Print(r)) => r.clone(),
            _ => ReplicaArgs::default(),
        };
        ConfigOverrides {
            etcd_endpoints: g.etcd_endpoints.clone(),
            etcd_prefix: g.etcd_prefix.clone(),
            redis_url: g.redis_url.clone(),
            instance_id: r.instance_id,
            roles: r.roles,
            worker_concurrency: r.worker_concurrency,
            worker_queues: r.worker_queues,
            http_listen: r.http_listen,
        }
    }
}

impl ValueEnum for ReplicaRole {
    fn value_variants<'a>() -> &'a [Self] {
        &[ReplicaRole::Scheduler, ReplicaRole::Worker]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a replica: election, scheduling, workers, HTTP (metrics, probes, API).
    Serve(ReplicaArgs),
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Manage tasks.
    #[command(subcommand)]
    Task(TaskCommand),
    /// Show the execution history across tasks, newest first.
    History(HistoryArgs),
    /// Inspect one execution.
    #[command(subcommand)]
    Execution(ExecutionCommand),
    /// Inspect and act on dead-lettered executions.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// Pause and resume queues.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Run a handler once at an instant or after a delay, kept in Redis (no task).
    #[command(subcommand)]
    Scheduled(scheduled::ScheduledCommand),
    /// Repair the queues' fences (see docs/runbook.md).
    #[command(subcommand)]
    Fence(FenceCommand),
    /// Pause and resume whole namespaces.
    #[command(subcommand)]
    Namespace(NamespaceCommand),
    /// Make API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Show the audit log: who changed what through ax, newest first.
    Audit {
        /// Only records of the last DURATION (`1h`, `7d`).
        #[arg(long, value_parser = parse_duration)]
        since: Option<std::time::Duration>,
        /// Only records of this actor (a token name, `cli:user@host`, `etcd (direct)`).
        #[arg(long)]
        actor: Option<String>,
        /// Records shown at most (1-1000); stderr says how to get the next page.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
        /// Go on from a page's continue token.
        #[arg(long = "continue", value_name = "TOKEN")]
        continue_token: Option<String>,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
    /// Show the leader, replicas, queue depths and dead-letter count.
    Status {
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
}

/// An RFC 3339 instant such as `2026-11-01T00:00:00Z`.
fn parse_instant(s: &str) -> Result<ax_scheduler_core::UtcMillis, String> {
    instant_at(s, ax_scheduler_core::UtcMillis::now())
}

/// An RFC 3339 instant, `now`, or a duration before `now` (`6h`, `30m`, `7d`), as the console
/// and `history --since` take them.
fn instant_at(
    s: &str,
    now: ax_scheduler_core::UtcMillis,
) -> Result<ax_scheduler_core::UtcMillis, String> {
    if s == "now" {
        return Ok(now);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(ax_scheduler_core::UtcMillis::from_datetime(&t));
    }
    humantime::parse_duration(s)
        .map(|d| now.sub(d))
        .map_err(|_| {
            format!(
                "`{s}` is neither an RFC 3339 instant like 2026-11-01T00:00:00Z, nor `now`, nor a \
             duration before now like 6h or 30m"
            )
        })
}

/// A duration such as `90s`, `1h`, `7d`.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("`{s}` is not a duration like 1h or 7d: {e}"))
}

/// `ax namespace ...`
#[derive(Debug, Subcommand)]
pub enum NamespaceCommand {
    /// No task of the namespace fires until it is resumed (run-now requests still run).
    Pause {
        /// The namespace.
        namespace: String,
    },
    /// The namespace's tasks fire again; fires missed while paused follow each task's
    /// misfire policy.
    Resume {
        /// The namespace.
        namespace: String,
    },
}

/// `ax token ...`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a random API token: prints the token (give it to its holder; it is shown only
    /// here) and the `[[http.tokens]]` entry with its hash for the configuration.
    New {
        /// Who will hold it (logged with each refused request, and in the audit).
        #[arg(long)]
        name: String,
        /// What it may do: read, operate or admin.
        #[arg(long)]
        role: ax_control::api::TokenRole,
    },
}

/// `ax fence ...`
#[derive(Debug, Subcommand)]
pub enum FenceCommand {
    /// Bind the queues' fences to this etcd cluster and its current leader's token, whatever
    /// they hold. For an etcd restored or rebuilt, or a prefix moved between installations:
    /// safe only when no other installation uses this Redis key prefix.
    Reseat {
        /// Only this queue (default: every queue ax knows of).
        #[arg(long)]
        queue: Option<String>,
    },
}

/// `ax config ...`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration as TOML, secrets masked (exit 2 if it is invalid).
    Print(ReplicaArgs),
}

/// A task as the command line names it: `ID` or `NAMESPACE/ID`, or `ID -n NAMESPACE`. Only
/// the argument as typed: [`TaskArg::key`] turns it into the task's key.
#[derive(Debug, Clone, Args)]
pub struct TaskArg {
    /// Task id, or NAMESPACE/ID.
    #[arg(value_name = "[NAMESPACE/]ID")]
    pub id: String,
    /// Namespace of the task (default: `default`).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
}

impl TaskArg {
    /// The task's key: the namespace from `NAMESPACE/ID` or `-n` (they must agree when both
    /// are given), else `default`.
    pub fn key(&self) -> Result<TaskKey, CliError> {
        let (from_id, id) = match self.id.split_once('/') {
            Some((ns, id)) => (Some(ns), id),
            None => (None, self.id.as_str()),
        };
        let namespace = match (from_id, self.namespace.as_deref()) {
            (Some(a), Some(b)) if a != b => {
                return Err(CliError::Usage(format!(
                    "the task `{}` names namespace `{a}` but -n says `{b}`",
                    self.id
                )))
            }
            (Some(ns), _) | (None, Some(ns)) => ns,
            (None, None) => ax_scheduler_core::task::DEFAULT_NAMESPACE,
        };
        if namespace.is_empty() || id.is_empty() || id.contains('/') {
            return Err(CliError::Usage(format!(
                "`{}` is not a task: give ID or NAMESPACE/ID",
                self.id
            )));
        }
        Ok(TaskKey::new(namespace, id))
    }
}

/// How a listing is printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    #[default]
    Table,
    /// JSON, as the HTTP API returns it.
    Json,
}

/// `ax task ...`
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Validate a task spec (JSON) and register it.
    Put {
        /// Spec file, or `-` for stdin.
        file: String,
        /// Validate and print the next 5 fire times; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Register even if no live worker serves the task's handler (its workers are
        /// deployed later); without it such a put is refused.
        #[arg(long)]
        allow_unserved_handler: bool,
        /// Task id (default: the JSON's `id`, else the file name without `.json`).
        #[arg(long)]
        id: Option<String>,
        /// Namespace (default: the JSON's `namespace`, else `default`).
        #[arg(long, short = 'n')]
        namespace: Option<String>,
    },
    /// Show a task's spec and state (header values and URL secrets masked).
    Get {
        /// The task.
        #[command(flatten)]
        task: TaskArg,
        /// Show header values and URL credentials in full.
        #[arg(long)]
        show_secrets: bool,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
    /// List tasks (all of them, read page by page; or one page with `--limit`).
    List {
        /// Only this namespace (default: all).
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Only tasks in this status (SCHEDULED, RUNNING, FAILED, PAUSED, INVALID, ...).
        #[arg(long)]
        status: Option<String>,
        /// Only tasks with this label: `key` or `key=value`.
        #[arg(long, short = 'l')]
        label: Option<String>,
        /// Show one page of at most this many tasks (1-1000) and, on stderr, how to get the
        /// next.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: Option<u16>,
        /// Go on from a page's continue token.
        #[arg(long = "continue", value_name = "TOKEN")]
        continue_token: Option<String>,
        /// Show header values and URL credentials in full.
        #[arg(long)]
        show_secrets: bool,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
    /// Delete a task.
    Delete(TaskArg),
    /// Pause a task (it stays registered and does not fire).
    Pause(TaskArg),
    /// Resume a paused task.
    Resume(TaskArg),
    /// Run a task now, outside its schedule (prints the execution id).
    Trigger {
        /// The task.
        #[command(flatten)]
        task: TaskArg,
        /// Run with this payload (JSON from FILE, or stdin for `-`) instead of the spec's.
        #[arg(long, value_name = "FILE|-")]
        payload: Option<String>,
        /// Run-now requests of the task with the same key run once (within 24 h).
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// Run the task's fires of a past range now, oldest first, each once (prints one line
    /// per fire).
    Backfill {
        /// The task.
        #[command(flatten)]
        task: TaskArg,
        /// Start of the range, inclusive: RFC 3339 (2026-11-01T00:00:00Z), or a duration
        /// before now (6h, 30m, 7d).
        #[arg(long, value_parser = parse_instant)]
        from: ax_scheduler_core::UtcMillis,
        /// End of the range, inclusive: as --from, or `now`.
        #[arg(long, value_parser = parse_instant)]
        to: ax_scheduler_core::UtcMillis,
        /// Most fires to enqueue; a range with more is refused unless --force.
        #[arg(long, default_value_t = 1000)]
        max: usize,
        /// Enqueue a range with more than --max fires (up to 100 000).
        #[arg(long)]
        force: bool,
        /// Only list the fires.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show the chain of dependent tasks a task belongs to (`depends_on`): each task with
    /// its status, each edge with the outcome it waits for; DOT with `--dot`.
    Graph {
        /// The task.
        #[command(flatten)]
        task: TaskArg,
        /// Print Graphviz DOT (`ax task graph T --dot | dot -Tsvg > chain.svg`).
        #[arg(long)]
        dot: bool,
    },
    /// Kill a task's current executions (waiting, retrying or running): they end KILLED,
    /// without retry or failure alert.
    Kill {
        /// The task.
        #[command(flatten)]
        task: TaskArg,
        /// Only this execution (default: every current one of the task).
        #[arg(long, value_name = "ID")]
        execution: Option<String>,
    },
    /// Show the last executions of a task.
    History {
        /// The task.
        #[command(flatten)]
        task: TaskArg,
        /// How many executions to show (1-1000).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
}

/// `ax queue ...`
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Show what a queue holds now: what runs (and where), what waits, the pending retries.
    Show {
        /// Queue name.
        name: String,
        /// Most executions of each kind (1-500).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
    /// Stop workers taking from a queue; running executions finish, new ones wait.
    Pause {
        /// Queue name.
        name: String,
    },
    /// Let workers take from a paused queue again.
    Resume {
        /// Queue name.
        name: String,
    },
}

/// `ax history`: the filters of `GET /api/v1/executions`.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// Only this task: `NAMESPACE/ID`, or `ID` with `-n` (else `default`).
    #[arg(long)]
    pub task: Option<String>,
    /// Only this namespace.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Only failed attempts (retried ones included).
    #[arg(long)]
    pub failed: bool,
    /// Only these outcomes, comma separated (succeeded, retrying, failed, timed_out,
    /// panicked, dead_lettered, killed).
    #[arg(long)]
    pub outcome: Option<String>,
    /// Only attempts that ended since: a duration before now (`1h`, `30m`) or
    /// milliseconds since the epoch.
    #[arg(long)]
    pub since: Option<String>,
    /// Only attempts that ended until, as `--since`.
    #[arg(long)]
    pub until: Option<String>,
    /// How many attempts to show (1-1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub limit: u16,
    /// Go on from the token a previous page printed.
    #[arg(long = "continue", value_name = "TOKEN")]
    pub continue_token: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// `ax execution ...`
#[derive(Debug, Subcommand)]
pub enum ExecutionCommand {
    /// Show one execution's story: fire, enqueue, each attempt, retries, outcome, dead letter.
    Get {
        /// The execution id, or its start or end (at least 6 characters) when that names one
        /// execution of the history.
        id: String,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
}

/// `ax dlq ...`
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead-lettered executions.
    List {
        /// Only this queue (default: all).
        #[arg(long)]
        queue: Option<String>,
        /// How many to show, newest first (1-1000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
    },
    /// Put dead-lettered executions back on their queue, as new executions of their tasks'
    /// current specs (a fixed task runs fixed); prints each new execution id.
    Requeue {
        /// Execution ids, or the start or end of each (at least 6 hex digits).
        #[arg(required_unless_present = "all")]
        ids: Vec<String>,
        /// Every dead-lettered execution (of `--queue` if given).
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// With `--all`: only this queue.
        #[arg(long, requires = "all")]
        queue: Option<String>,
        /// Run the stored messages as they are (old target, headers and args), even for a
        /// task deleted or re-pointed since; by default each is rebuilt from its task's
        /// current spec (saying what of the target changed) and refused if the task is gone.
        #[arg(long)]
        use_stored: bool,
    },
    /// Delete dead-lettered executions for good.
    Purge {
        /// Only this queue (default: all).
        #[arg(long)]
        queue: Option<String>,
    },
}

/// Why a command failed; decides the exit code and what is printed on stderr.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Usage or configuration error.
    #[error("{0}")]
    Usage(String),
    /// The configuration could not be assembled.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Input failed validation; one entry per problem.
    #[error("invalid input:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
    /// What was named does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The change conflicts with the current state.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The operation failed.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Config(_) => EXIT_USAGE,
            CliError::Invalid(_) => EXIT_INVALID,
            CliError::NotFound(_) => EXIT_NOT_FOUND,
            CliError::Conflict(_) => EXIT_CONFLICT,
            CliError::Failed(_) => EXIT_FAILED,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_range_end_is_an_instant_now_or_a_duration_before_now() {
        let now = ax_scheduler_core::UtcMillis(1_796_221_800_000);
        assert_eq!(instant_at("now", now), Ok(now));
        assert_eq!(
            instant_at("6h", now),
            Ok(ax_scheduler_core::UtcMillis(now.0 - 6 * 3_600_000))
        );
        assert_eq!(
            instant_at("2026-12-02T14:30:00Z", ax_scheduler_core::UtcMillis(0)),
            Ok(now)
        );
        let err = instant_at("yesterday", now).unwrap_err();
        assert!(err.contains("duration before now like 6h"), "{err}");
    }

    #[test]
    fn global_flags_become_overrides_anywhere_on_the_line() {
        let cli = Cli::try_parse_from([
            "ax",
            "config",
            "print",
            "--etcd-endpoints",
            "http://a:2379,http://b:2379",
            "--roles",
            "worker",
            "--redis-url",
            "rediss://r:6380",
        ])
        .unwrap();
        let o = cli.overrides();
        assert_eq!(
            o.etcd_endpoints.unwrap(),
            ["http://a:2379", "http://b:2379"]
        );
        assert_eq!(o.roles.unwrap(), [ReplicaRole::Worker]);
        assert_eq!(o.redis_url.unwrap(), "rediss://r:6380");
        assert!(o.http_listen.is_none());
    }

    #[test]
    fn a_password_on_the_command_line_is_warned_of() {
        for url in ["redis://:s3cret@r:6379", "rediss://user:s3cret@r:6380/0"] {
            assert!(password_warning(url).is_some(), "{url}");
        }
        for url in [
            "redis://r:6379",
            "rediss://r:6380/0?x=a@b",
            "redis://user:@r",
            "redis://user@r",
        ] {
            assert!(password_warning(url).is_none(), "{url}");
        }
    }

    #[test]
    fn replica_flags_are_on_serve_and_config_print_only() {
        let help = |path: &[&str]| {
            let mut cmd = Cli::command();
            // Global flags reach the subcommands when the tree is built.
            cmd.build();
            let mut sub = &mut cmd;
            for name in path {
                sub = sub.find_subcommand_mut(name).unwrap();
            }
            sub.render_long_help().to_string()
        };
        for path in [&["serve"][..], &["config", "print"]] {
            let h = help(path);
            assert!(
                h.contains("--roles") && h.contains("--http-listen"),
                "{path:?}: {h}"
            );
        }
        for path in [&["task", "put"][..], &["task", "list"], &["status"]] {
            let h = help(path);
            assert!(h.contains("--etcd-endpoints"), "{path:?}: {h}");
            for serve_only in [
                "--roles",
                "--http-listen",
                "--instance-id",
                "--worker-queues",
            ] {
                assert!(!h.contains(serve_only), "{path:?} lists {serve_only}: {h}");
            }
        }
        let err = Cli::try_parse_from(["ax", "task", "list", "--roles", "worker"]).unwrap_err();
        assert_eq!(err.exit_code(), i32::from(EXIT_USAGE));
    }

    #[test]
    fn unknown_role_is_a_usage_error() {
        let err = Cli::try_parse_from(["ax", "serve", "--roles", "leader"]).unwrap_err();
        assert_eq!(err.exit_code(), i32::from(EXIT_USAGE));
    }

    #[test]
    fn task_refs_default_to_the_default_namespace() {
        let key = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap();
            match cli.command {
                Command::Task(TaskCommand::Pause(r)) => r.key().map(|k| k.to_string()),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            key(&["ax", "task", "pause", "nightly"]).unwrap(),
            "default/nightly"
        );
        assert_eq!(
            key(&["ax", "task", "pause", "ops/nightly"]).unwrap(),
            "ops/nightly"
        );
        assert_eq!(
            key(&["ax", "task", "pause", "nightly", "-n", "ops"]).unwrap(),
            "ops/nightly"
        );
        assert_eq!(
            key(&["ax", "task", "pause", "ops/nightly", "-n", "ops"]).unwrap(),
            "ops/nightly"
        );
        for bad in [
            &["ax", "task", "pause", "ops/nightly", "-n", "billing"][..],
            &["ax", "task", "pause", "a/b/c"],
            &["ax", "task", "pause", "/x"],
        ] {
            assert_eq!(key(bad).unwrap_err().exit_code(), EXIT_USAGE, "{bad:?}");
        }
    }

    #[test]
    fn list_limits_are_bounded() {
        assert!(Cli::try_parse_from(["ax", "dlq", "list", "--limit", "0"]).is_err());
        assert!(Cli::try_parse_from(["ax", "task", "history", "t", "--limit", "1001"]).is_err());
        assert!(Cli::try_parse_from(["ax", "status", "-o", "json"]).is_ok());
    }

    #[test]
    fn exit_codes() {
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
        assert_eq!(CliError::Invalid(vec![]).exit_code(), 3);
        assert_eq!(CliError::NotFound("t".into()).exit_code(), 4);
        assert_eq!(CliError::Conflict("t".into()).exit_code(), 5);
        assert_eq!(CliError::Failed(anyhow::anyhow!("x")).exit_code(), 1);
    }
}
