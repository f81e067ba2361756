//! The `ax` binary: reads the edge, parses the command line, runs the command, and turns its
//! outcome into an exit code (see `docs/cli.md`).

use std::process::ExitCode;

use ax_engine::cli::{Cli, CliError};
use ax_engine::commands;
use ax_engine::edge::Edge;
use clap::Parser;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let edge = Edge::from_process();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let err = CliError::Failed(anyhow::anyhow!("cannot start the async runtime: {e}"));
            commands::report(&err);
            return ExitCode::from(err.exit_code());
        }
    };
    match runtime.block_on(commands::run(cli, &edge)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            commands::report(&err);
            ExitCode::from(err.exit_code())
        }
    }
}
