//! Generic JSON webhook channel: one POST per alert with a stable, documented body.
//!
//! The body is versioned (`"version": 1`) because receivers we do not control parse it; fields
//! are only ever added. `at` is given both as RFC 3339 (for people and log tools) and as
//! milliseconds (for programs). Any 2xx answer counts as delivered; the body is ignored.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};

use crate::alert::Alert;
use crate::channel::{check_url, execute, http_client, Channel, SendFuture};
use crate::error::AlertError;

/// The `version` of the webhook body.
pub const WEBHOOK_PAYLOAD_VERSION: u32 = 1;

/// Settings of a [`WebhookChannel`].
#[derive(Clone)]
pub struct WebhookConfig {
    /// Channel name for logs and statistics. Default `webhook`.
    pub name: String,
    /// Where to POST. Required.
    pub url: String,
    /// Extra request headers, e.g. `Authorization`. Default none.
    pub headers: Vec<(String, String)>,
    /// Per-request timeout. Default 5 s.
    pub timeout: Duration,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            name: "webhook".into(),
            url: String::new(),
            headers: Vec::new(),
            timeout: Duration::from_secs(5),
        }
    }
}

impl fmt::Debug for WebhookConfig {
    // URLs and header values commonly carry credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("WebhookConfig")
            .field("name", &self.name)
            .field("url", &"<redacted>")
            .field("headers", &header_names)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The webhook body for `alert`:
///
/// ```json
/// {"source":"ax","version":1,"level":"critical","kind":"task_dead_lettered",
///  "title":"…","message":"…","task":{"namespace":"…","id":"…"},"fields":{"attempts":"3"},
///  "at":"2023-11-14T22:13:20.123Z","at_ms":1700000000123}
/// ```
///
/// `task` is `null` when the alert is not about a task.
pub fn webhook_payload(alert: &Alert) -> Value {
    json!({
        "source": "ax",
        "version": WEBHOOK_PAYLOAD_VERSION,
        "level": alert.level.as_str(),
        "kind": alert.kind.as_str(),
        "title": alert.title,
        "message": alert.message,
        "task": alert.task.as_ref().map(|t| json!({ "namespace": t.namespace, "id": t.id })),
        "fields": alert.fields,
        "at": alert.at.to_rfc3339(),
        "at_ms": alert.at.0,
    })
}

/// Delivers alerts as JSON to any HTTP endpoint.
pub struct WebhookChannel {
    config: WebhookConfig,
    url: reqwest::Url,
    client: reqwest::Client,
    headers: HeaderMap,
}

impl WebhookChannel {
    /// Checks the URL and headers and builds the HTTP client.
    pub fn new(config: WebhookConfig) -> Result<Self, AlertError> {
        let url = check_url("url", &config.url)?;
        let client = http_client(config.timeout)?;
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| AlertError::InvalidConfig {
                    field: "headers",
                    reason: format!("invalid header name {name:?}"),
                })?;
            let mut value =
                HeaderValue::from_str(value).map_err(|_| AlertError::InvalidConfig {
                    field: "headers",
                    reason: format!("invalid value for header {name}"),
                })?;
            value.set_sensitive(true);
            headers.append(name, value);
        }
        Ok(WebhookChannel {
            config,
            url,
            client,
            headers,
        })
    }
}

impl fmt::Debug for WebhookChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookChannel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Channel for WebhookChannel {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn send<'a>(&'a self, alert: &'a Alert) -> SendFuture<'a> {
        Box::pin(async move {
            let request = self
                .client
                .post(self.url.clone())
                .headers(self.headers.clone())
                .json(&webhook_payload(alert));
            execute(&self.config.name, self.config.timeout, request).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ax_scheduler_core::UtcMillis;

    #[test]
    fn payload_shape() {
        let alert = Alert::task_failed("ns", "t1", 2, "exit 1", UtcMillis(1_700_000_000_123));
        assert_eq!(
            webhook_payload(&alert),
            json!({
                "source": "ax",
                "version": 1,
                "level": "warn",
                "kind": "task_failed",
                "title": "Task failed: ns/t1",
                "message": "Attempt 2 failed: exit 1",
                "task": { "namespace": "ns", "id": "t1" },
                "fields": { "attempt": "2" },
                "at": "2023-11-14T22:13:20.123Z",
                "at_ms": 1_700_000_000_123_i64,
            })
        );
        let leader = Alert::leader_changed(None, Some("node-a"), UtcMillis(0));
        assert_eq!(webhook_payload(&leader)["task"], Value::Null);
    }

    #[test]
    fn bad_headers_rejected_and_redacted() {
        let config = WebhookConfig {
            url: "http://127.0.0.1:9/hook?token=abc".into(),
            headers: vec![("Authorization".into(), "Bearer s3cret".into())],
            ..WebhookConfig::default()
        };
        let shown = format!("{:?}", WebhookChannel::new(config.clone()).unwrap());
        assert!(
            !shown.contains("s3cret") && !shown.contains("token=abc"),
            "{shown}"
        );
        let bad = WebhookConfig {
            headers: vec![("bad header".into(), "x".into())],
            ..config
        };
        assert!(matches!(
            WebhookChannel::new(bad),
            Err(AlertError::InvalidConfig {
                field: "headers",
                ..
            })
        ));
    }
}
