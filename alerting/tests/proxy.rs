//! The channels' HTTP client ignores the proxy variables of the process: an alert (and the
//! webhook's secret it carries) goes straight to the configured URL, never through a proxy
//! someone set in the environment. A test binary of its own, since it sets those variables
//! for the whole process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use ax_alerting::{Alert, Channel, WebhookChannel, WebhookConfig};
use ax_scheduler_core::UtcMillis;
use support::Receiver;

#[tokio::test]
async fn proxy_variables_are_ignored() {
    let proxy = Receiver::start().await;
    let hook = Receiver::start().await;
    for var in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        std::env::set_var(var, proxy.url(""));
    }
    for var in ["NO_PROXY", "no_proxy"] {
        std::env::remove_var(var);
    }
    let channel = WebhookChannel::new(WebhookConfig {
        name: "ops".into(),
        url: hook.url("/alerts"),
        headers: vec![("Authorization".into(), "Bearer t0ken".into())],
        timeout: Duration::from_secs(2),
    })
    .unwrap();
    let alert = Alert::queue_backlog("ax:ready", 2, 1, UtcMillis(1_700_000_000_123));
    channel.send(&alert).await.unwrap();
    assert_eq!(hook.requests().len(), 1);
    assert!(
        proxy.requests().is_empty(),
        "the alert went through the proxy"
    );
}
