//! Feishu and webhook channels against a local HTTP receiver: exact payloads, signatures,
//! Feishu's answer codes and HTTP errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use ax_alerting::{
    feishu_sign, Alert, AlertError, Channel, FeishuChannel, FeishuConfig, WebhookChannel,
    WebhookConfig,
};
use ax_scheduler_core::UtcMillis;
use serde_json::json;
use support::{dead_url, Receiver, HANG};

const AT: UtcMillis = UtcMillis(1_700_000_000_123);
const LIMIT: Duration = Duration::from_secs(5);

fn dead_lettered() -> Alert {
    Alert::task_dead_lettered("billing", "nightly-report", 3, "exit status 2", AT)
}

fn expected_card() -> serde_json::Value {
    json!({
        "config": { "wide_screen_mode": true },
        "header": {
            "template": "red",
            "title": { "tag": "plain_text", "content": "[CRITICAL] Task dead-lettered: billing/nightly-report" }
        },
        "elements": [
            { "tag": "div", "text": { "tag": "plain_text",
              "content": "Gave up after 3 attempts; last error: exit status 2" } },
            { "tag": "div", "fields": [
                { "is_short": true, "text": { "tag": "lark_md", "content": "**Level**\ncritical" } },
                { "is_short": true, "text": { "tag": "lark_md", "content": "**Kind**\ntask_dead_lettered" } },
                { "is_short": true, "text": { "tag": "lark_md", "content": "**Task**\nbilling/nightly-report" } },
                { "is_short": true, "text": { "tag": "lark_md", "content": "**attempts**\n3" } }
            ] },
            { "tag": "hr" },
            { "tag": "note", "elements": [
                { "tag": "plain_text", "content": "ax · 2023-11-14T22:13:20.123Z" }
            ] }
        ]
    })
}

fn feishu(url: String, secret: Option<&str>) -> FeishuChannel {
    FeishuChannel::new(FeishuConfig {
        webhook_url: url,
        secret: secret.map(str::to_owned),
        timeout: Duration::from_secs(2),
        ..FeishuConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn feishu_unsigned_payload_is_exact() {
    let receiver = Receiver::start().await;
    let channel = feishu(receiver.url("/open-apis/bot/v2/hook/tok"), None);
    channel.send(&dead_lettered()).await.unwrap();

    let requests = receiver.wait_for(1, LIMIT).await;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/open-apis/bot/v2/hook/tok");
    assert_eq!(requests[0].headers["content-type"], "application/json");
    assert_eq!(
        requests[0].body,
        json!({ "msg_type": "interactive", "card": expected_card() })
    );
}

#[tokio::test]
async fn feishu_signed_payload_with_pinned_clock_is_exact() {
    let receiver = Receiver::start().await;
    let channel =
        feishu(receiver.url("/hook"), Some("SECxyz")).with_clock(|| UtcMillis(1_700_000_000_999));
    channel.send(&dead_lettered()).await.unwrap();

    let requests = receiver.wait_for(1, LIMIT).await;
    assert_eq!(
        requests[0].body,
        json!({
            "timestamp": "1700000000",
            // base64(HMAC-SHA256(key = "1700000000\nSECxyz", message = "")), computed independently.
            "sign": "GnU9dobz1WousiKlH0LX6FYP8yrWNCgoJOvRhpMc8HY=",
            "msg_type": "interactive",
            "card": expected_card(),
        })
    );
}

#[tokio::test]
async fn feishu_signature_uses_current_time() {
    let receiver = Receiver::start().await;
    let channel = feishu(receiver.url("/hook"), Some("another secret"));
    let before = chrono::Utc::now().timestamp();
    channel.send(&dead_lettered()).await.unwrap();
    let after = chrono::Utc::now().timestamp();

    let body = &receiver.wait_for(1, LIMIT).await[0].body;
    let timestamp: i64 = body["timestamp"].as_str().unwrap().parse().unwrap();
    assert!(
        (before..=after).contains(&timestamp),
        "{timestamp} not in {before}..={after}"
    );
    assert_eq!(body["sign"], feishu_sign(timestamp, "another secret"));
    assert_eq!(body["card"], expected_card());
}

#[tokio::test]
async fn feishu_nonzero_code_is_a_permanent_failure() {
    let receiver = Receiver::with_script(vec![(
        200,
        r#"{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time","data":{}}"#,
    )])
    .await;
    let channel = feishu(receiver.url("/hook"), Some("wrong"));
    let err = channel.send(&dead_lettered()).await.unwrap_err();
    match &err {
        AlertError::Rejected { channel, code, msg } => {
            assert_eq!(channel, "feishu");
            assert_eq!(*code, 19021);
            assert!(msg.starts_with("sign match fail"), "{msg}");
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn feishu_legacy_and_malformed_answers() {
    let receiver = Receiver::with_script(vec![
        (200, r#"{"StatusCode":0,"StatusMessage":"success"}"#),
        (200, r#"{"Extra":"no code"}"#),
        (200, "<html>proxy</html>"),
        (429, r#"{"code":11232,"msg":"frequency limited"}"#),
        (200, r#"{"code":11232,"msg":"frequency limited"}"#),
    ])
    .await;
    let channel = feishu(receiver.url("/hook"), None);
    let alert = dead_lettered();
    channel.send(&alert).await.unwrap();
    assert!(matches!(
        channel.send(&alert).await,
        Err(AlertError::InvalidResponse { .. })
    ));
    assert!(matches!(
        channel.send(&alert).await,
        Err(AlertError::InvalidResponse { .. })
    ));
    let too_many = channel.send(&alert).await.unwrap_err();
    assert!(matches!(too_many, AlertError::Status { status: 429, .. }));
    assert!(too_many.is_retryable());
    let limited = channel.send(&alert).await.unwrap_err();
    assert!(matches!(limited, AlertError::Rejected { code: 11232, .. }));
    assert!(limited.is_retryable());
}

#[tokio::test]
async fn webhook_payload_and_headers_are_exact() {
    let receiver = Receiver::start().await;
    let channel = WebhookChannel::new(WebhookConfig {
        name: "ops".into(),
        url: receiver.url("/alerts"),
        headers: vec![("Authorization".into(), "Bearer t0ken".into())],
        timeout: Duration::from_secs(2),
    })
    .unwrap();
    assert_eq!(channel.name(), "ops");
    let alert = Alert::queue_backlog("ax:ready", 12_345, 10_000, AT);
    channel.send(&alert).await.unwrap();

    let requests = receiver.wait_for(1, LIMIT).await;
    assert_eq!(requests[0].path, "/alerts");
    assert_eq!(requests[0].headers["authorization"], "Bearer t0ken");
    assert_eq!(requests[0].headers["content-type"], "application/json");
    assert_eq!(
        requests[0].body,
        json!({
            "source": "ax",
            "version": 1,
            "level": "critical",
            "kind": "queue_backlog",
            "title": "Queue backlog: ax:ready",
            "message": "12345 entries waiting, threshold 10000; workers are not keeping up",
            "task": null,
            "fields": { "depth": "12345", "queue": "ax:ready", "threshold": "10000" },
            "at": "2023-11-14T22:13:20.123Z",
            "at_ms": 1_700_000_000_123_i64,
        })
    );
}

#[tokio::test]
async fn a_redirect_is_not_followed_by_a_channel() {
    let elsewhere = Receiver::start().await;
    for code in [302, 307, 308] {
        let hook = Receiver::with_script(vec![(code, &elsewhere.url("/stolen"))]).await;
        let channel = WebhookChannel::new(WebhookConfig {
            name: "ops".into(),
            url: hook.url("/alerts"),
            headers: vec![("Authorization".into(), "Bearer t0ken".into())],
            timeout: Duration::from_secs(2),
        })
        .unwrap();
        let e = channel.send(&dead_lettered()).await.unwrap_err();
        assert!(e.to_string().contains(&code.to_string()), "{e}");
        assert_eq!(hook.requests().len(), 1);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(elsewhere.requests().is_empty(), "a redirect was followed");
}

#[tokio::test]
async fn http_errors_are_classified() {
    let receiver = Receiver::with_script(vec![(500, "boom"), (404, "no such hook")]).await;
    let channel = WebhookChannel::new(WebhookConfig {
        url: receiver.url("/alerts"),
        ..WebhookConfig::default()
    })
    .unwrap();
    let alert = dead_lettered();
    let err = channel.send(&alert).await.unwrap_err();
    assert!(matches!(&err, AlertError::Status { status: 500, body, .. } if body == "boom"));
    assert!(err.is_retryable());
    let err = channel.send(&alert).await.unwrap_err();
    assert!(matches!(err, AlertError::Status { status: 404, .. }));
    assert!(!err.is_retryable());

    let dead = WebhookChannel::new(WebhookConfig {
        url: dead_url(),
        ..WebhookConfig::default()
    })
    .unwrap();
    let err = dead.send(&alert).await.unwrap_err();
    assert!(matches!(err, AlertError::Transport { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(!err.to_string().contains("127.0.0.1"), "URL leaked: {err}");
}

#[tokio::test]
async fn slow_endpoint_times_out() {
    let receiver = Receiver::with_script(vec![(HANG, "")]).await;
    let channel = WebhookChannel::new(WebhookConfig {
        url: receiver.url("/slow"),
        timeout: Duration::from_millis(200),
        ..WebhookConfig::default()
    })
    .unwrap();
    let started = std::time::Instant::now();
    let err = channel.send(&dead_lettered()).await.unwrap_err();
    assert!(matches!(err, AlertError::Timeout { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(5));
}
