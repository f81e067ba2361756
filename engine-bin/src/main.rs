//! The `ax` binary: reads the edge, parses the command line, runs the command, and turns its
//! outcome into an exit code (see `docs/cli.md`).

use std::process::ExitCode;

use ax::cli::commands;
use ax::cli::edge::Edge;
use ax::cli::{Cli, CliError};
use clap::Parser;

/// mimalloc instead of glibc's allocator: a fire allocates and frees dozens of small buffers
/// (its message, its JSON, its log line, the Redis and HTTP frames), and glibc's `malloc` and
/// `free` took about a fifth of the process's CPU at 10 000 fires a second. Built without
/// transparent huge pages (the workspace's `no_thp`): as the heap grew, each first touch of
/// a 2 MiB page had the kernel zero all of it in one fault, tens of milliseconds of faults in
/// a burst that the fire path felt as lateness.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long the runtime's blocking threads get to end once the command has returned.
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

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
    let outcome = runtime.block_on(commands::run(cli, &edge));
    // Dropping a runtime waits for its blocking threads without end; a stuck one (a DNS
    // lookup, a file on a hung disk) must not keep a stopped replica alive.
    runtime.shutdown_timeout(EXIT_WAIT);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            commands::report(&err);
            ExitCode::from(err.exit_code())
        }
    }
}
