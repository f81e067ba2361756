//! A persistent cron job in a time zone that survives a restart: the job is a named handler
//! with a payload, kept in a store file. Run it twice: the second run finds the job in the
//! file (the idempotency key makes the submit a no-op) and goes on with its schedule.
//!
//! Run with `cargo run -p ax-embedded --example durable_cron [STORE_FILE]` (default
//! `durable_cron.redb` in the system's temp folder).

use std::time::Duration;

use ax_embedded::handler::Typed as Attempt;
use ax_embedded::{typed, Job, Kernel, When};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Report {
    name: String,
}

async fn send_report(job: Attempt<Report>) -> Result<(), ax_embedded::HandlerError> {
    println!(
        "job {} fire {} (attempt {}{}): sending the {} report",
        job.task_id(),
        job.fire_at(),
        job.attempt(),
        if job.redelivered() {
            ", run again after a restart"
        } else {
            ""
        },
        job.payload.name
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("durable_cron.redb"));
    let kernel = Kernel::builder()
        .store(&path)
        .handler("send_report", typed(send_report))
        .build()?;
    println!("store {} holds {} job(s)", path.display(), kernel.len());

    // Every 2 seconds, on Paris time; a second run of this program finds it already there.
    let job = Job::named("send_report")
        .payload(&Report {
            name: "sales".into(),
        })
        .idempotency_key("sales-report");
    let when = When::Cron {
        expr: "*/2 * * * * *".into(),
        timezone: "Europe/Paris".into(),
    };
    let id = kernel.submit(when, job).await?;
    println!("cron job {id} is on disk");

    tokio::time::sleep(Duration::from_secs(5)).await;
    kernel.shutdown(Duration::from_secs(5)).await;
    println!("stopped; run again to see the job go on");
    Ok(())
}
