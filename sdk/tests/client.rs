//! The SDK's client against real etcd and Redis: a put validates as `ax task put` does
//! (every problem at once, nothing written), and get, list, pause, resume, trigger with a
//! payload, history, kill and delete reach the same records the CLI reads; a worker given
//! etcd publishes what it serves, which the put's check then compares with.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ax_sdk::client::ApiError;
use ax_sdk::{Client, Config, Error};
use ax_testkit::{etcd_endpoint, redis_url, unique_name};
use serde_json::json;

async fn client() -> Client {
    let config = Config::redis(redis_url())
        .key_prefix(unique_name("sdkc"))
        .etcd([etcd_endpoint()])
        .etcd_prefix(format!("/{}", unique_name("sdkc")));
    Client::connect(&config).await.unwrap().actor("sdk-test")
}

fn spec() -> serde_json::Value {
    json!({
        "handler": "email.send",
        "schedule": {"every": "1h"},
        "queue": "mail",
        "payload": {"to": "a@example.com"},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_put_read_controlled_and_deleted() {
    let c = client().await;
    let put = c.put("shop", "receipts", &spec()).await.unwrap();
    assert!(put.written && !put.unchanged, "{put:?}");
    let again = c.put("shop", "receipts", &spec()).await.unwrap();
    assert!(again.unchanged, "the same spec twice changes nothing");

    let view = c.get("shop", "receipts").await.unwrap();
    assert_eq!(view.spec["handler"], "email.send");
    let list = c.list(ax_sdk::TaskFilter::all()).await.unwrap();
    assert_eq!(list.items.len(), 1);

    let paused = c.pause("shop", "receipts").await.unwrap();
    assert_eq!(paused.spec["paused"], true, "{paused:?}");
    let resumed = c.resume("shop", "receipts").await.unwrap();
    assert_ne!(resumed.spec["paused"], true);

    let fired = c
        .trigger(
            "shop",
            "receipts",
            Some(&json!({"to": "b@example.com"})),
            None,
        )
        .await
        .unwrap();
    assert!(!fired.execution_id.to_string().is_empty());
    assert!(c.history("shop", "receipts", 10).await.unwrap().is_empty());

    c.delete("shop", "receipts").await.unwrap();
    let gone = c.get("shop", "receipts").await.unwrap_err();
    assert!(matches!(gone, Error::Api(ApiError::NotFound(_))), "{gone}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_is_refused_with_every_problem_and_nothing_written() {
    let c = client().await;
    let mut bad = spec();
    bad["schedule"] = json!({"every": "soon"});
    bad["timeout"] = json!("forever");
    let err = c.put("shop", "broken", &bad).await.unwrap_err();
    let Error::Api(ApiError::Invalid { errors, .. }) = &err else {
        panic!("not refused as invalid: {err}");
    };
    assert!(errors.len() >= 2, "every problem at once: {errors:?}");
    assert!(!err.is_retryable());
    let gone = c.get("shop", "broken").await.unwrap_err();
    assert!(matches!(gone, Error::Api(ApiError::NotFound(_))), "{gone}");
}

#[tokio::test]
async fn a_client_without_etcd_is_refused() {
    let err = Client::connect(&Config::redis("redis://127.0.0.1:1"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reads_the_replicas_ax_toml() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ax.toml");
    let etcd_prefix = format!("/{}", unique_name("sdkt"));
    std::fs::write(
        &path,
        format!(
            "[etcd]\nendpoints = [\"{}\"]\nprefix = \"{etcd_prefix}\"\n\n\
             [redis]\nurl = \"{}\"\nkey_prefix = \"{}\"\n",
            etcd_endpoint(),
            redis_url(),
            unique_name("sdkt")
        ),
    )
    .unwrap();
    let config = Config::from_ax_toml(&path).unwrap();
    let c = Client::connect(&config).await.unwrap();
    c.put("shop", "from-file", &spec()).await.unwrap();
    assert_eq!(c.get("shop", "from-file").await.unwrap().id, "from-file");

    std::fs::write(&path, "[etcd]\nendpoint = \"typo\"\n").unwrap();
    let err = Config::from_ax_toml(&path).unwrap_err();
    assert!(err.to_string().contains("endpoint"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_given_etcd_is_seen_by_the_put_check_while_it_runs() {
    let config = Config::redis(redis_url())
        .key_prefix(unique_name("sdkw"))
        .etcd([etcd_endpoint()])
        .etcd_prefix(format!("/{}", unique_name("sdkw")));
    let c = Client::connect(&config).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = ax_sdk::Worker::builder(config.clone())
        .handler(
            "email.send",
            |_job: ax_sdk::Typed<serde_json::Value>| async { Ok(()) },
        )
        .queues(["mail"])
        .run(stop.clone());
    let running = tokio::spawn(worker);
    let mut typo = spec();
    typo["handler"] = json!("email.sned");
    let mut refused = None;
    for _ in 0..100 {
        match c.put("shop", "typo", &typo).await {
            Err(e) => {
                refused = Some(e);
                break;
            }
            Ok(_) => {
                c.delete("shop", "typo").await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    let Some(Error::Api(ApiError::Invalid { errors, .. })) = refused else {
        panic!("the typo was never refused: {refused:?}");
    };
    assert!(
        errors[0].contains("did you mean `email.send`?"),
        "{errors:?}"
    );
    // A spec with problems of its own is told of its handler too, in the same answer.
    let mut worse = typo.clone();
    worse["priority"] = json!(12);
    let Err(Error::Api(ApiError::Invalid { errors, .. })) = c.put("shop", "worse", &worse).await
    else {
        panic!("the spec was taken");
    };
    assert!(
        errors.iter().any(|e| e.starts_with("priority:")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("did you mean `email.send`?")),
        "{errors:?}"
    );
    c.put("shop", "receipts", &spec()).await.unwrap();
    // For a handler whose workers come later, the CLI's choice.
    let allowed = ax_sdk::client::PutOptions {
        allow_unserved_handler: true,
        ..Default::default()
    };
    let later = c.put_with("shop", "typo", &typo, allowed).await.unwrap();
    assert!(later.written, "{later:?}");
    c.delete("shop", "typo").await.unwrap();

    stop.cancel();
    running.await.unwrap().unwrap();
    c.put("shop", "typo", &typo)
        .await
        .expect("with the worker gone, nothing serves the queue to compare with");
}
