//! An example service with two handlers, served on an ax cluster's queue with `ax-sdk`.
//!
//! `example.flaky` fails its first attempt with a retryable error and succeeds on the next,
//! so the task's retry policy shows; `example.long` works for the payload's `ms`, watching
//! its cancellation, so a kill, a timeout or the end of the shutdown grace stops it;
//! `example.progress` is a long job that defers its end: the handler returns at once (the
//! worker's slot is free), a task of its own reports progress `steps` times, `ms` apart, and
//! then completes the attempt, which the console shows waiting with its progress until then. Each
//! run prints one line (`ran HANDLER EXECUTION_ID attempt N`) on stdout: the e2e test counts
//! them. SIGTERM or Ctrl-C starts the graceful shutdown. Settings come from the environment
//! (a binary's edge; the SDK itself reads none):
//!
//! - `AX_CONFIG`: the replicas' `ax.toml`, read for Redis, the queue settings and etcd (then
//!   the worker also publishes its instance record); else
//! - `AX_REDIS_URL` (default `redis://127.0.0.1:6379`), `AX_REDIS_KEY_PREFIX` (default `ax`)
//! - `AX_QUEUE` (default `rust`), `AX_WORKER_ID` (default a random id)
//! - `AX_VISIBILITY_TIMEOUT_MS`: how soon a dead worker's message is given back (default
//!   the SDK's, 30 s)

use std::time::Duration;

use ax_sdk::{Config, HandlerError, Typed, Worker};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// The payload of `example.long`.
#[derive(serde::Deserialize)]
struct Long {
    /// How long the job works.
    ms: u64,
}

async fn flaky(job: Typed<serde_json::Value>) -> Result<(), HandlerError> {
    println!(
        "ran example.flaky {} attempt {}",
        job.execution_id(),
        job.attempt()
    );
    if job.attempt() == 1 {
        return Err(HandlerError::Retryable(
            "the first attempt always fails".into(),
        ));
    }
    Ok(())
}

async fn long(job: Typed<Long>) -> Result<(), HandlerError> {
    println!(
        "ran example.long {} attempt {}",
        job.execution_id(),
        job.attempt()
    );
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(job.payload.ms)) => {
            println!("done example.long {}", job.execution_id());
            Ok(())
        }
        () = job.cancel().cancelled() => {
            Err(HandlerError::Retryable("stopped before the work was done".into()))
        }
    }
}

/// The payload of `example.progress`.
#[derive(serde::Deserialize)]
struct Steps {
    /// How many progress reports.
    steps: u32,
    /// The time between two.
    ms: u64,
}

async fn progress(job: Typed<Steps>) -> Result<(), HandlerError> {
    let id = job.execution_id();
    println!("ran example.progress {id} attempt {}", job.attempt());
    let later = job.defer().await?;
    let Steps { steps, ms } = job.payload;
    tokio::spawn(async move {
        for step in 1..=steps {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let percent = f64::from(step) * 100.0 / f64::from(steps.max(1));
            if let Err(e) = later.progress(Some(percent), format!("step {step}")).await {
                eprintln!("progress of {id}: {e}");
            }
        }
        match later.complete(Ok(())).await {
            Ok(()) => println!("completed example.progress {id}"),
            Err(e) => eprintln!("completion of {id}: {e}"),
        }
    });
    Ok(())
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = match std::env::var("AX_CONFIG") {
        Ok(path) => Config::from_ax_toml(path)?,
        Err(_) => Config::redis(env("AX_REDIS_URL", "redis://127.0.0.1:6379"))
            .key_prefix(env("AX_REDIS_KEY_PREFIX", "ax")),
    };
    let mut worker = Worker::builder(config)
        .handler("example.flaky", flaky)
        .handler("example.long", long)
        .handler("example.progress", progress)
        .queues([env("AX_QUEUE", "rust")])
        .concurrency(4)
        .prefetch(0)
        .shutdown_grace(Duration::from_secs(20));
    if let Ok(id) = std::env::var("AX_WORKER_ID") {
        worker = worker.worker_id(id);
    }
    if let Ok(ms) = std::env::var("AX_VISIBILITY_TIMEOUT_MS") {
        worker = worker.visibility_timeout(Duration::from_millis(ms.parse()?));
    }
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    let mut term = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        eprintln!("stopping: finishing what runs");
        on_signal.cancel();
    });
    let summary = worker.run(shutdown).await?;
    println!(
        "stopped: taken {} succeeded {} retried {} released {}",
        summary.taken, summary.succeeded, summary.retried, summary.released
    );
    Ok(())
}
