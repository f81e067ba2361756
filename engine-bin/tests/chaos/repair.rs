//! Scenarios of task states that no worker event will ever correct, which the leader's
//! repair of states in doubt must make true (see `scheduler/src/term/repair.rs`).

use std::time::Duration;

use serde_json::json;

use super::harness::{http_task, now_ms, rfc3339, wait_until, Cluster, Roles, SERIAL};

/// A short `scheduler.repair_after`, so the scenario sees a repair within seconds; the rule
/// is the same as with the default minute.
const REPAIR_AFTER: &str = "10s";

/// Redis restarted empty (no persistence) while executions waited in a queue: they are gone
/// with it, and no end will ever come for them. Each lost execution must show as such (its
/// task FAILED with the "execution lost" error, an alert), none may run later unannounced,
/// and tasks due after the restart run as usual. Before the repair, their one-shots said
/// `RUNNING` for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_with_executions_waiting() {
    let _serial = SERIAL.lock().await;
    let mut redis = ax_testkit::RedisServer::start();
    let mut c = Cluster::on(
        "chaos-redis-empty",
        ax_testkit::etcd_endpoint(),
        redis.url(),
    )
    .await;
    c.env.push(("AX_REPAIR_AFTER", REPAIR_AFTER.to_owned()));
    for id in ["r1", "r2", "r3"] {
        c.start_replica(id, Roles::Both).await;
    }
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    // Workers take nothing: the fires wait in the queue, as a backlog does.
    c.ax_ok(&["queue", "pause", "default"]).await;
    let due = now_ms() + 1500;
    let lost: Vec<(String, String, serde_json::Value)> = (0..20)
        .map(|i| {
            let spec = http_task(&c, json!({ "at": rfc3339(due + i * 20) }), "default");
            ("chaos".to_owned(), format!("lost{i:02}"), spec)
        })
        .collect();
    c.put_tasks(&lost).await;
    wait_until(Duration::from_secs(15), "the fires enqueued", || {
        let c = &c;
        async move {
            let states = c.states("chaos").await;
            (0..20).all(|i| {
                states
                    .get(&format!("lost{i:02}"))
                    .is_some_and(|s| s["status"] == "RUNNING")
            })
        }
    })
    .await;
    redis.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.restart();
    let restarted = now_ms();
    // A one-shot due after the restart runs (the queue is no longer paused: that was in
    // Redis too).
    let after = http_task(&c, json!({ "at": rfc3339(now_ms() + 3000) }), "default");
    c.put_task("chaos", "after", &after).await;
    wait_until(
        Duration::from_secs(45),
        "every lost execution repaired",
        || {
            let c = &c;
            async move {
                let states = c.states("chaos").await;
                (0..20).all(|i| {
                    states.get(&format!("lost{i:02}")).is_some_and(|s| {
                        s["status"] == "FAILED"
                            && s["last_error"]
                                .as_str()
                                .is_some_and(|e| e.starts_with("execution lost"))
                    })
                })
            }
        },
    )
    .await;
    let repaired_in = now_ms() - restarted;
    wait_until(Duration::from_secs(15), "the later one-shot ran", || {
        let ran = !c.receiver.executions_of("after").is_empty();
        async move { ran }
    })
    .await;
    // Nothing lost ran later, unannounced.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ran_lost = c
        .receiver
        .executions()
        .iter()
        .filter(|e| e.task_id.starts_with("lost"))
        .count();
    let mut repairs = 0.0;
    for id in ["r1", "r2", "r3"] {
        repairs += c
            .metric(id, r#"scheduler_state_repairs_total{how="lost"}"#)
            .await
            .unwrap_or(0.0);
    }
    println!(
        "chaos: Redis restarted empty with 20 executions waiting: 20 lost, each repaired FAILED (\"execution lost\") {repaired_in} ms after the restart (repair_after {REPAIR_AFTER}), {repairs} repairs counted, {ran_lost} of them ran later"
    );
    assert_eq!(ran_lost, 0, "a lost execution ran later");
    assert!(
        c.receiver.has_alert("backend_restarted"),
        "no backend_restarted alert"
    );
    assert!(
        c.receiver.has_alert("execution lost"),
        "no alert names the lost executions"
    );
    assert!(repairs >= 20.0, "repairs counted: {repairs}");
    c.clean_up().await;
}
