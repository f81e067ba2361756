//! An example program that registers a task and fires it with a payload, with `ax-sdk`'s
//! client: the calls `ax task put` and `ax task trigger` make, from code.
//!
//! Settings from the environment: `AX_ETCD_ENDPOINTS` (default `http://127.0.0.1:2379`),
//! `AX_ETCD_PREFIX` (default `/scheduler`), `AX_REDIS_URL`, `AX_REDIS_KEY_PREFIX`,
//! `AX_QUEUE` (default `rust`, the queue `examples/rust-worker` serves).

use ax_sdk::{Client, Config};
use serde_json::json;

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::redis(env("AX_REDIS_URL", "redis://127.0.0.1:6379"))
        .key_prefix(env("AX_REDIS_KEY_PREFIX", "ax"))
        .etcd(env("AX_ETCD_ENDPOINTS", "http://127.0.0.1:2379").split(','))
        .etcd_prefix(env("AX_ETCD_PREFIX", "/scheduler"));
    let client = Client::connect(&config).await?.actor("rust-client-example");
    let put = client
        .put(
            "examples",
            "nightly-report",
            &json!({
                "handler": "example.long",
                "queue": env("AX_QUEUE", "rust"),
                "schedule": {"cron": "0 2 * * *"},
                "payload": {"ms": 1000},
                "timeout": "1m",
            }),
        )
        .await?;
    println!(
        "registered {}/{} (changed: {})",
        put.namespace, put.id, !put.unchanged
    );
    let run = client
        .trigger(
            "examples",
            "nightly-report",
            Some(&json!({"ms": 200})),
            None,
        )
        .await?;
    println!("fired now as execution {}", run.execution_id);
    for record in client.history("examples", "nightly-report", 5).await? {
        println!("{} attempt {}", record.execution_id, record.attempt);
    }
    Ok(())
}
