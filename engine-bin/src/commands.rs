//! What each command does, given the parsed command line and the facts read at the edge.
//!
//! Commands that need the etcd registry or the Redis queue report
//! [`CliError::NotYetAvailable`] (exit code 2) until those parts are wired; they still load
//! and validate the configuration first, so a broken configuration is reported the same way
//! by every command.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use crate::cli::{Cli, CliError, Command, ConfigCommand, DlqCommand, TaskCommand};
use crate::config::{Config, LoadOptions, DEFAULT_CONFIG_PATH};
use crate::edge::Edge;
use crate::logging::{self, LogSettings, LogTarget};
use crate::serve::Server;
use crate::shutdown::Shutdown;
use crate::task_file;
use ax_scheduler_core::UtcMillis;

/// Time allowed past `worker.shutdown_grace` for everything else to stop.
const SHUTDOWN_MARGIN: Duration = Duration::from_secs(5);

/// Runs the command.
pub async fn run(cli: Cli, edge: &Edge) -> Result<(), CliError> {
    let serving = matches!(cli.command, Command::Serve);
    // The server logs to stdout at info; one-shot commands keep stdout for their output.
    let (default_filter, target) = if serving {
        ("info", LogTarget::Stdout)
    } else {
        ("warn", LogTarget::Stderr)
    };
    let settings = LogSettings::resolve(cli.global.log_format, &edge.env, default_filter, target)
        .map_err(CliError::Usage)?;
    logging::init(&settings).map_err(CliError::Usage)?;

    let config = load_config(&cli, edge)?;
    match cli.command {
        Command::Serve => serve(config).await,
        Command::Config(ConfigCommand::Print) => {
            print_stdout(&config.to_masked_toml())?;
            Ok(())
        }
        Command::Task(TaskCommand::Put {
            file,
            dry_run,
            id,
            namespace,
        }) => task_put(&file, dry_run, id.as_deref(), namespace.as_deref()),
        Command::Task(TaskCommand::Get(_)) => Err(CliError::NotYetAvailable("task get")),
        Command::Task(TaskCommand::List { .. }) => Err(CliError::NotYetAvailable("task list")),
        Command::Task(TaskCommand::Delete(_)) => Err(CliError::NotYetAvailable("task delete")),
        Command::Task(TaskCommand::Pause(_)) => Err(CliError::NotYetAvailable("task pause")),
        Command::Task(TaskCommand::Resume(_)) => Err(CliError::NotYetAvailable("task resume")),
        Command::Task(TaskCommand::Trigger(_)) => Err(CliError::NotYetAvailable("task trigger")),
        Command::Task(TaskCommand::History { .. }) => {
            Err(CliError::NotYetAvailable("task history"))
        }
        Command::Dlq(DlqCommand::List { .. }) => Err(CliError::NotYetAvailable("dlq list")),
        Command::Dlq(DlqCommand::Requeue { .. }) => Err(CliError::NotYetAvailable("dlq requeue")),
        Command::Dlq(DlqCommand::Purge { .. }) => Err(CliError::NotYetAvailable("dlq purge")),
        Command::Status => Err(CliError::NotYetAvailable("status")),
    }
}

/// Loads the effective configuration from the command line and the edge.
pub fn load_config(cli: &Cli, edge: &Edge) -> Result<Config, CliError> {
    let overrides = cli.global.overrides();
    Ok(Config::load(LoadOptions {
        config_flag: cli.global.config.as_deref(),
        env: &edge.env,
        overrides: &overrides,
        default_path: Some(Path::new(DEFAULT_CONFIG_PATH)),
        hostname: edge.hostname.as_deref(),
    })?)
}

async fn serve(config: Config) -> Result<(), CliError> {
    let deadline = config.worker.shutdown_grace + SHUTDOWN_MARGIN;
    let shutdown = Shutdown::new();
    shutdown
        .listen_for_signals()
        .map_err(|e| CliError::Failed(anyhow::anyhow!("cannot listen for signals: {e}")))?;
    let result = match Server::bind(config).await {
        Ok(server) => server.run(&shutdown).await,
        Err(e) => {
            shutdown.cancel();
            Err(e)
        }
    };
    if let Err(e) = shutdown.wait(deadline).await {
        tracing::error!(error = %e, "shutdown did not finish in time; exiting anyway");
        result?;
        return Err(CliError::Failed(e.into()));
    }
    tracing::info!("stopped");
    Ok(result?)
}

/// Validates a spec file; with `--dry-run` prints the preview. Writing needs the registry,
/// which is not wired yet, so without `--dry-run` a valid spec ends in `NotYetAvailable`.
fn task_put(
    file: &str,
    dry_run: bool,
    id: Option<&str>,
    namespace: Option<&str>,
) -> Result<(), CliError> {
    let bytes = read_input(file)?;
    let key = task_file::resolve_key(&bytes, file, id, namespace).map_err(CliError::Usage)?;
    let spec = task_file::validate(&bytes, &key).map_err(CliError::Invalid)?;
    if !dry_run {
        return Err(CliError::NotYetAvailable("task put (without --dry-run)"));
    }
    // The clock is read here, at the edge; the preview itself is a function of `now`.
    let now = UtcMillis::from_datetime(&chrono::Utc::now());
    let report = task_file::preview(&spec, now).map_err(CliError::Invalid)?;
    print_stdout(&report)
}

/// The bytes of `file`, or of stdin for `-`.
fn read_input(file: &str) -> Result<Vec<u8>, CliError> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| CliError::Usage(format!("cannot read stdin: {e}")))?;
        Ok(buf)
    } else {
        std::fs::read(file).map_err(|e| CliError::Usage(format!("cannot read {file}: {e}")))
    }
}

fn print_stdout(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Failed(anyhow::anyhow!("cannot write to stdout: {e}")))
}

/// Prints `err` on stderr the way scripts and people expect: `ax: error: ...`, one problem
/// per line for invalid input.
pub fn report(err: &CliError) {
    match err {
        CliError::Failed(e) => eprintln!("ax: error: {e:#}"),
        other => eprintln!("ax: error: {other}"),
    }
}
