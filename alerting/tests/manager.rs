//! The alert manager end to end: de-duplication, rate limit and summary, the non-blocking
//! intake, retries, isolation of failing channels, and shutdown. Timing logic runs on paused
//! tokio time with in-memory channels; HTTP delivery runs against a local receiver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_alerting::{
    Alert, AlertError, AlertKind, AlertManager, AlertManagerConfig, AlertSender, Channel,
    DeliveryRetry, FeishuChannel, FeishuConfig, Level, PolicyConfig, SendFuture, WebhookChannel,
    WebhookConfig,
};
use ax_scheduler_core::{Clock, UtcMillis};
use serde_json::json;
use support::{dead_url, Receiver};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const NOW: UtcMillis = UtcMillis(1_700_000_000_000);

/// An in-memory channel: records deliveries and attempt instants, fails from a script, and
/// can take a long time per attempt.
#[derive(Default)]
struct Memory {
    name: String,
    delivered: Mutex<Vec<Alert>>,
    attempts: Mutex<Vec<Instant>>,
    failures: Mutex<VecDeque<AlertError>>,
    latency: Duration,
}

impl Memory {
    fn new(name: &str) -> Arc<Self> {
        Arc::new(Memory {
            name: name.into(),
            ..Memory::default()
        })
    }

    fn failing(name: &str, failures: Vec<AlertError>) -> Arc<Self> {
        Arc::new(Memory {
            name: name.into(),
            failures: Mutex::new(failures.into()),
            ..Memory::default()
        })
    }

    fn slow(name: &str, latency: Duration) -> Arc<Self> {
        Arc::new(Memory {
            name: name.into(),
            latency,
            ..Memory::default()
        })
    }

    fn delivered(&self) -> Vec<Alert> {
        self.delivered.lock().unwrap().clone()
    }

    fn titles(&self) -> Vec<String> {
        self.delivered().into_iter().map(|a| a.title).collect()
    }
}

impl Channel for Memory {
    fn name(&self) -> &str {
        &self.name
    }

    fn send<'a>(&'a self, alert: &'a Alert) -> SendFuture<'a> {
        Box::pin(async move {
            self.attempts.lock().unwrap().push(Instant::now());
            if !self.latency.is_zero() {
                tokio::time::sleep(self.latency).await;
            }
            let failure = self.failures.lock().unwrap().pop_front();
            match failure {
                Some(err) => Err(err),
                None => {
                    self.delivered.lock().unwrap().push(alert.clone());
                    Ok(())
                }
            }
        })
    }
}

fn status(code: u16) -> AlertError {
    AlertError::Status {
        channel: "memory".into(),
        status: code,
        body: String::new(),
    }
}

struct Running {
    sender: AlertSender,
    tracker: TaskTracker,
    cancel: CancellationToken,
}

impl Running {
    fn start(config: AlertManagerConfig, channels: Vec<Arc<dyn Channel>>) -> Self {
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let sender = AlertManager::new(config, channels)
            .unwrap()
            .spawn(&tracker, cancel.clone());
        Running {
            sender,
            tracker,
            cancel,
        }
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.tracker.close();
        tokio::time::timeout(Duration::from_secs(5), self.tracker.wait())
            .await
            .expect("alert manager stops on cancel");
    }
}

/// Lets the manager and workers run (paused time advances only as far as needed).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

fn failed(id: &str, attempt: u32) -> Alert {
    Alert::task_failed("ns", id, attempt, "boom", NOW)
}

#[tokio::test(start_paused = true)]
async fn duplicates_within_five_minutes_are_sent_once() {
    let memory = Memory::new("memory");
    let run = Running::start(AlertManagerConfig::default(), vec![memory.clone()]);

    for attempt in 1..=3 {
        assert!(run.sender.send(failed("a", attempt)));
    }
    settle().await;
    assert_eq!(memory.titles(), vec!["Task failed: ns/a"]);
    assert_eq!(memory.delivered()[0].message, "Attempt 1 failed: boom");

    tokio::time::sleep(Duration::from_secs(4 * 60)).await;
    assert!(run.sender.send(failed("a", 4)));
    settle().await;
    assert_eq!(
        memory.delivered().len(),
        1,
        "still inside the 5 minute window"
    );

    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(run.sender.send(failed("a", 5)));
    settle().await;
    let delivered = memory.delivered();
    assert_eq!(delivered.len(), 2, "window over: sent again");
    assert_eq!(delivered[1].message, "Attempt 5 failed: boom");
    assert_eq!(delivered[1].fields["duplicates_suppressed"], "3");

    let stats = run.sender.stats();
    assert_eq!((stats.received, stats.deduplicated, stats.sent), (5, 3, 2));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn urls_in_alerts_reach_no_channel_with_their_credentials() {
    let memory = Memory::new("memory");
    let run = Running::start(AlertManagerConfig::default(), vec![memory.clone()]);
    let mut alert = Alert::task_failed(
        "ns",
        "hook",
        1,
        "POST https://bot:pw@example.com/h?token=s3cret failed: connection refused",
        NOW,
    );
    alert
        .fields
        .insert("target".into(), "https://example.com/x?key=s3cret".into());
    assert!(run.sender.send(alert));
    settle().await;
    let delivered = memory.delivered();
    assert_eq!(
        delivered[0].message,
        "Attempt 1 failed: POST https://***@example.com/h?token=*** failed: connection refused"
    );
    assert_eq!(
        delivered[0].fields["target"],
        "https://example.com/x?key=***"
    );
    run.stop().await;
}

/// A wall clock stopped at one instant.
#[derive(Debug)]
struct Stopped(UtcMillis);

impl Clock for Stopped {
    fn now(&self) -> UtcMillis {
        self.0
    }
}

#[tokio::test(start_paused = true)]
async fn the_manager_s_time_is_anchored_to_the_clock_it_is_given() {
    let memory = Memory::new("memory");
    let tracker = TaskTracker::new();
    let cancel = CancellationToken::new();
    let config = AlertManagerConfig {
        policy: PolicyConfig {
            rate_limit: 1,
            ..PolicyConfig::default()
        },
        ..AlertManagerConfig::default()
    };
    let sender = AlertManager::new(config, vec![memory.clone()])
        .unwrap()
        .with_clock(Arc::new(Stopped(UtcMillis(0))))
        .spawn(&tracker, cancel.clone());
    assert!(sender.send(failed("a", 1)));
    assert!(sender.send(failed("b", 1)));
    settle().await;
    tokio::time::sleep(Duration::from_secs(61)).await;
    let delivered = memory.delivered();
    assert_eq!(delivered.len(), 2, "{delivered:?}");
    // Held back at the clock's instant, not the host's.
    assert!(
        delivered[1].message.contains("since 1970-01-01T00:0"),
        "{}",
        delivered[1].message
    );
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
}

#[tokio::test(start_paused = true)]
async fn ten_a_minute_then_one_summary() {
    let memory = Memory::new("memory");
    let run = Running::start(AlertManagerConfig::default(), vec![memory.clone()]);
    let started = Instant::now();

    for i in 0..13 {
        assert!(run.sender.send(failed(&format!("t{i:02}"), 1)));
    }
    let dead = Alert::task_dead_lettered("ns", "x", 3, "boom", NOW);
    assert!(run.sender.send(dead));
    settle().await;
    assert_eq!(memory.delivered().len(), 10);
    assert_eq!(run.sender.stats().rate_limited, 4);

    // Nothing more until a minute after the first deferred alert.
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(memory.delivered().len(), 10);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let delivered = memory.delivered();
    assert_eq!(delivered.len(), 11);
    let summary = &delivered[10];
    assert_eq!(summary.kind, AlertKind::DeferredSummary);
    assert_eq!(summary.level, Level::Critical);
    assert_eq!(summary.title, "4 alert(s) held back by the rate limit");
    assert_eq!(summary.fields["held_back"], "4");
    assert_eq!(summary.fields["held.task_failed"], "3");
    assert_eq!(summary.fields["held.task_dead_lettered"], "1");
    let lines: Vec<&str> = summary.message.lines().skip(1).collect();
    assert_eq!(
        lines,
        vec![
            "- 1 × [critical] task_dead_lettered: Task dead-lettered: ns/x",
            "- 1 × [warn] task_failed: Task failed: ns/t10",
            "- 1 × [warn] task_failed: Task failed: ns/t11",
            "- 1 × [warn] task_failed: Task failed: ns/t12",
        ]
    );
    assert!(started.elapsed() >= Duration::from_secs(60));

    let stats = run.sender.stats();
    assert_eq!(
        (stats.summaries, stats.sent, stats.rate_limited),
        (1, 11, 4)
    );
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn min_level_filters() {
    let memory = Memory::new("memory");
    let config = AlertManagerConfig {
        policy: PolicyConfig {
            min_level: Level::Critical,
            ..PolicyConfig::default()
        },
        ..AlertManagerConfig::default()
    };
    let run = Running::start(config, vec![memory.clone()]);
    run.sender.send(failed("a", 1));
    run.sender.send(Alert::circuit_open(
        "redis",
        5,
        Duration::from_secs(30),
        NOW,
    ));
    settle().await;
    assert_eq!(memory.titles(), vec!["Circuit open: redis"]);
    assert_eq!(run.sender.stats().filtered, 1);
    run.stop().await;
}

#[tokio::test]
async fn full_intake_drops_instead_of_blocking() {
    let memory = Memory::new("memory");
    let config = AlertManagerConfig {
        queue_capacity: 2,
        ..AlertManagerConfig::default()
    };
    let run = Running::start(config, vec![memory.clone()]);
    // The current-thread runtime cannot run the manager until this test yields, so the queue
    // fills after exactly two alerts.
    let accepted: Vec<bool> = (0..5)
        .map(|i| run.sender.send(failed(&i.to_string(), 1)))
        .collect();
    assert_eq!(accepted, vec![true, true, false, false, false]);
    assert_eq!(run.sender.stats().dropped, 3);

    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        memory.titles(),
        vec!["Task failed: ns/0", "Task failed: ns/1"]
    );
    assert!(
        run.sender.send(failed("later", 1)),
        "accepts again once drained"
    );
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn retryable_failures_back_off_exponentially() {
    let memory = Memory::failing("memory", vec![status(500), status(503), status(502)]);
    let run = Running::start(AlertManagerConfig::default(), vec![memory.clone()]);
    run.sender.send(failed("a", 1));
    tokio::time::sleep(Duration::from_secs(10)).await;

    assert_eq!(memory.delivered().len(), 1);
    let attempts = memory.attempts.lock().unwrap().clone();
    let gaps: Vec<u64> = attempts
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis() as u64)
        .collect();
    // Each wait is jittered into the upper half of its doubling step (1, 2, 4 s).
    for (gap, base) in gaps.iter().zip([1000, 2000, 4000]) {
        assert!(
            (base / 2..=base).contains(gap),
            "gap {gap} ms outside [{}, {base}]",
            base / 2
        );
    }
    assert_eq!(gaps.len(), 3);
    let stats = run.sender.stats();
    assert_eq!(
        (stats.sent, stats.failed, stats.channels[0].retries),
        (1, 0, 3)
    );
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_retries_and_on_permanent_errors() {
    let exhausted = Memory::failing("exhausted", (0..4).map(|_| status(500)).collect());
    let permanent = Memory::failing(
        "permanent",
        vec![AlertError::Rejected {
            channel: "permanent".into(),
            code: 19021,
            msg: "sign match fail".into(),
        }],
    );
    let run = Running::start(
        AlertManagerConfig::default(),
        vec![exhausted.clone(), permanent.clone()],
    );
    run.sender.send(failed("a", 1));
    tokio::time::sleep(Duration::from_secs(30)).await;

    let stats = run.sender.stats();
    assert_eq!(stats.failed, 2);
    let by_name = |name: &str| {
        stats
            .channels
            .iter()
            .find(|c| c.name == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (by_name("exhausted").failed, by_name("exhausted").retries),
        (1, 3)
    );
    assert_eq!(
        (by_name("permanent").failed, by_name("permanent").retries),
        (1, 0)
    );
    assert_eq!(exhausted.attempts.lock().unwrap().len(), 4);
    assert_eq!(permanent.attempts.lock().unwrap().len(), 1);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_channel_does_not_hold_up_the_others() {
    let slow = Memory::slow("slow", Duration::from_secs(3600));
    let fast = Memory::new("fast");
    let run = Running::start(
        AlertManagerConfig::default(),
        vec![slow.clone(), fast.clone()],
    );
    run.sender.send(failed("a", 1));
    run.sender.send(failed("b", 1));
    settle().await;
    assert_eq!(
        fast.titles(),
        vec!["Task failed: ns/a", "Task failed: ns/b"]
    );
    assert!(slow.delivered().is_empty());
    // Cancellation aborts the slow request instead of waiting an hour for it.
    run.stop().await;
    assert!(slow.delivered().is_empty());
}

#[tokio::test(start_paused = true)]
async fn dropping_every_sender_flushes_the_summary() {
    let memory = Memory::new("memory");
    let config = AlertManagerConfig {
        policy: PolicyConfig {
            rate_limit: 1,
            ..PolicyConfig::default()
        },
        ..AlertManagerConfig::default()
    };
    let Running {
        sender,
        tracker,
        cancel: _cancel,
    } = Running::start(config, vec![memory.clone()]);
    for id in ["a", "b", "c"] {
        sender.send(failed(id, 1));
    }
    let stats_handle = sender.clone();
    drop(sender);
    drop(stats_handle);
    tracker.close();
    tokio::time::timeout(Duration::from_secs(5), tracker.wait())
        .await
        .expect("manager ends when all senders are gone");
    let delivered = memory.delivered();
    assert_eq!(delivered.len(), 2);
    assert_eq!(delivered[1].kind, AlertKind::DeferredSummary);
    assert_eq!(delivered[1].fields["held_back"], "2");
}

#[test]
fn configuration_is_validated() {
    let twins: Vec<Arc<dyn Channel>> = vec![Memory::new("same"), Memory::new("same")];
    assert!(matches!(
        AlertManager::new(AlertManagerConfig::default(), twins),
        Err(AlertError::InvalidConfig {
            field: "channels",
            ..
        })
    ));
    let zero = AlertManagerConfig {
        queue_capacity: 0,
        ..AlertManagerConfig::default()
    };
    assert!(matches!(
        AlertManager::new(zero, vec![]),
        Err(AlertError::InvalidConfig {
            field: "queue_capacity",
            ..
        })
    ));
}

// ---- Over HTTP, in real time (short backoffs). ----

fn fast_retry() -> DeliveryRetry {
    DeliveryRetry {
        retries: 3,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn webhook_500_twice_then_200_is_retried_and_delivered() {
    let receiver = Receiver::with_script(vec![(500, "down"), (500, "down")]).await;
    let webhook = WebhookChannel::new(WebhookConfig {
        url: receiver.url("/alerts"),
        ..WebhookConfig::default()
    })
    .unwrap();
    let config = AlertManagerConfig {
        retry: fast_retry(),
        ..AlertManagerConfig::default()
    };
    let run = Running::start(config, vec![Arc::new(webhook)]);
    let alert = Alert::leader_changed(Some("node-a"), Some("node-b"), NOW);
    run.sender.send(alert);

    let requests = receiver.wait_for(3, Duration::from_secs(10)).await;
    eventually("delivery counted", || run.sender.stats().sent == 1).await;
    let expected = json!({
        "source": "ax",
        "version": 1,
        "level": "warn",
        "kind": "leader_changed",
        "title": "Leader changed",
        "message": "Leader is now node-b (was node-a)",
        "task": null,
        "fields": { "current": "node-b", "previous": "node-a" },
        "at": "2023-11-14T22:13:20.000Z",
        "at_ms": 1_700_000_000_000_i64,
    });
    for request in &requests {
        assert_eq!(request.body, expected);
    }
    let stats = run.sender.stats();
    assert_eq!((stats.failed, stats.channels[0].retries), (0, 2));
    assert_eq!(receiver.requests().len(), 3);
    run.stop().await;
}

#[tokio::test]
async fn dead_endpoint_does_not_block_other_channels() {
    let receiver = Receiver::start().await;
    let dead = FeishuChannel::new(FeishuConfig {
        webhook_url: dead_url(),
        timeout: Duration::from_secs(1),
        ..FeishuConfig::default()
    })
    .unwrap();
    let live = WebhookChannel::new(WebhookConfig {
        url: receiver.url("/alerts"),
        ..WebhookConfig::default()
    })
    .unwrap();
    // Slower backoff than elsewhere so the dead channel is provably still busy (at least
    // 250 + 500 + 500 ms per alert after jitter, at most 2.5 s) while the live one has
    // delivered.
    let config = AlertManagerConfig {
        retry: DeliveryRetry {
            retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(1),
        },
        ..AlertManagerConfig::default()
    };
    let run = Running::start(config, vec![Arc::new(dead), Arc::new(live)]);
    let started = std::time::Instant::now();

    run.sender.send(failed("a", 1));
    receiver.wait_for(1, Duration::from_secs(1)).await;
    run.sender.send(failed("b", 1));
    let requests = receiver.wait_for(2, Duration::from_secs(1)).await;
    assert_eq!(requests[1].body["title"], "Task failed: ns/b");
    // The dead channel is still retrying its first alert (1.25 s to 2.5 s of backoff).
    assert!(started.elapsed() < Duration::from_millis(2500));
    assert_eq!(run.sender.stats().channels[0].failed, 0);

    eventually("dead channel gives up on both alerts", || {
        run.sender.stats().channels[0].failed == 2
    })
    .await;
    let stats = run.sender.stats();
    assert_eq!(stats.channels[0].name, "feishu");
    assert_eq!(stats.channels[0].retries, 6);
    assert_eq!(
        (stats.channels[1].name.as_str(), stats.channels[1].sent),
        ("webhook", 2)
    );
    run.stop().await;
}

#[tokio::test]
async fn feishu_rejection_counts_as_failure_without_retry() {
    let receiver = Receiver::with_script(vec![(
        200,
        r#"{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time","data":{}}"#,
    )])
    .await;
    let feishu = FeishuChannel::new(FeishuConfig {
        webhook_url: receiver.url("/hook"),
        secret: Some("stale".into()),
        ..FeishuConfig::default()
    })
    .unwrap();
    let config = AlertManagerConfig {
        retry: fast_retry(),
        ..AlertManagerConfig::default()
    };
    let run = Running::start(config, vec![Arc::new(feishu)]);
    run.sender.send(failed("a", 1));
    eventually("failure counted", || run.sender.stats().failed == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        receiver.requests().len(),
        1,
        "a rejected signature is not retried"
    );
    let stats = run.sender.stats();
    assert_eq!((stats.sent, stats.channels[0].retries), (0, 0));
    run.stop().await;
}
