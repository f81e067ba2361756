//! Feishu (Lark) custom-bot channel: an interactive card per alert.
//!
//! The payload is built by pure functions ([`feishu_card`], [`feishu_sign`]) so its exact
//! shape is unit-tested; [`FeishuChannel`] only adds the signature and performs the POST.
//! Feishu answers HTTP 200 even when it refuses a message, with the verdict in a JSON `code`
//! (0 = accepted; e.g. 19021 = bad signature or timestamp more than an hour off), so the body
//! is always parsed and a non-zero code is a failure. Text that comes from tasks (error
//! messages, field values) is HTML-escaped inside `lark_md` so it cannot inject `<at>` mentions;
//! the message itself is shown as `plain_text`.

use std::fmt;
use std::time::Duration;

use ax_scheduler_core::UtcMillis;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::alert::{Alert, Level};
use crate::channel::{
    check_url, execute, http_client, snippet, truncate_chars, Channel, SendFuture,
};
use crate::error::AlertError;

/// Longest message shown in a card; Feishu limits the request size and a stack trace in an
/// error message must not make the alert itself fail.
pub const FEISHU_MAX_MESSAGE_CHARS: usize = 3000;

/// Settings of a [`FeishuChannel`].
#[derive(Clone)]
pub struct FeishuConfig {
    /// Channel name for logs and statistics. Default `feishu`.
    pub name: String,
    /// The bot's webhook, `https://open.feishu.cn/open-apis/bot/v2/hook/<token>`. Required.
    pub webhook_url: String,
    /// The bot's signing secret when "signature verification" is enabled. Default none.
    pub secret: Option<String>,
    /// Per-request timeout. Default 5 s.
    pub timeout: Duration,
}

impl Default for FeishuConfig {
    fn default() -> Self {
        FeishuConfig {
            name: "feishu".into(),
            webhook_url: String::new(),
            secret: None,
            timeout: Duration::from_secs(5),
        }
    }
}

impl fmt::Debug for FeishuConfig {
    // The URL holds the bot token and the secret signs messages: neither belongs in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeishuConfig")
            .field("name", &self.name)
            .field("webhook_url", &"<redacted>")
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The header colour (Feishu card template) of a level.
pub fn feishu_template(level: Level) -> &'static str {
    match level {
        Level::Info => "blue",
        Level::Warn => "orange",
        Level::Critical => "red",
        Level::Fatal => "carmine",
    }
}

/// Feishu's signature: base64(HMAC-SHA256(key = "{timestamp}\n{secret}", message = "")),
/// with `timestamp` in seconds.
pub fn feishu_sign(timestamp_secs: i64, secret: &str) -> String {
    let key = format!("{timestamp_secs}\n{secret}");
    // HMAC accepts keys of any length (long keys are hashed), so this cannot fail.
    let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes())
        .expect("HMAC takes keys of any length");
    BASE64.encode(mac.finalize().into_bytes())
}

/// Escapes the characters that `lark_md` would read as markup tags or entities.
fn escape_md(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn md_field(key: &str, value: &str) -> Value {
    json!({
        "is_short": true,
        "text": { "tag": "lark_md", "content": format!("**{}**\n{}", escape_md(key), escape_md(value)) }
    })
}

/// The `card` object of the interactive message for `alert` (without `msg_type` or signature).
pub fn feishu_card(alert: &Alert) -> Value {
    let mut fields = vec![
        md_field("Level", alert.level.as_str()),
        md_field("Kind", alert.kind.as_str()),
    ];
    if let Some(task) = &alert.task {
        fields.push(md_field("Task", &task.to_string()));
    }
    fields.extend(alert.fields.iter().map(|(k, v)| md_field(k, v)));

    let mut elements = Vec::new();
    if !alert.message.is_empty() {
        elements.push(json!({
            "tag": "div",
            "text": {
                "tag": "plain_text",
                "content": truncate_chars(&alert.message, FEISHU_MAX_MESSAGE_CHARS),
            }
        }));
    }
    elements.push(json!({ "tag": "div", "fields": fields }));
    elements.push(json!({ "tag": "hr" }));
    elements.push(json!({
        "tag": "note",
        "elements": [ { "tag": "plain_text", "content": format!("ax · {}", alert.at) } ]
    }));

    json!({
        "config": { "wide_screen_mode": true },
        "header": {
            "template": feishu_template(alert.level),
            "title": {
                "tag": "plain_text",
                "content": format!("[{}] {}", alert.level.as_str().to_uppercase(), alert.title),
            }
        },
        "elements": elements,
    })
}

/// The full request body: `{"msg_type":"interactive","card":…}`, plus `timestamp` (seconds, as
/// a string) and `sign` when `signing` gives a secret and the current time.
pub fn feishu_payload(alert: &Alert, signing: Option<(&str, UtcMillis)>) -> Value {
    let mut payload = json!({ "msg_type": "interactive", "card": feishu_card(alert) });
    if let (Some((secret, now)), Value::Object(map)) = (signing, &mut payload) {
        let timestamp = now.0.div_euclid(1000);
        map.insert("timestamp".into(), Value::String(timestamp.to_string()));
        map.insert("sign".into(), Value::String(feishu_sign(timestamp, secret)));
    }
    payload
}

/// Delivers alerts to a Feishu custom bot.
pub struct FeishuChannel {
    config: FeishuConfig,
    url: reqwest::Url,
    client: reqwest::Client,
    clock: fn() -> UtcMillis,
}

impl FeishuChannel {
    /// Checks the configuration and builds the HTTP client.
    pub fn new(config: FeishuConfig) -> Result<Self, AlertError> {
        let url = check_url("webhook_url", &config.webhook_url)?;
        let client = http_client(config.timeout)?;
        Ok(FeishuChannel {
            config,
            url,
            client,
            clock: UtcMillis::now,
        })
    }

    /// Replaces the wall clock used for the signature timestamp (tests pin it).
    pub fn with_clock(mut self, clock: fn() -> UtcMillis) -> Self {
        self.clock = clock;
        self
    }

    /// The request body this channel would send for `alert` now.
    pub fn payload(&self, alert: &Alert) -> Value {
        let signing = self
            .config
            .secret
            .as_deref()
            .map(|secret| (secret, (self.clock)()));
        feishu_payload(alert, signing)
    }

    async fn deliver(&self, alert: &Alert) -> Result<(), AlertError> {
        let name = &self.config.name;
        let request = self
            .client
            .post(self.url.clone())
            .json(&self.payload(alert));
        let body = execute(name, self.config.timeout, request).await?;
        let answer: Value =
            serde_json::from_str(&body).map_err(|err| AlertError::InvalidResponse {
                channel: name.clone(),
                reason: format!("body is not JSON ({err}): {}", snippet(&body)),
            })?;
        // Current bots answer {"code":0,"msg":"success"}; older ones {"StatusCode":0,...}.
        let code = answer
            .get("code")
            .or_else(|| answer.get("StatusCode"))
            .and_then(Value::as_i64);
        match code {
            Some(0) => Ok(()),
            Some(code) => Err(AlertError::Rejected {
                channel: name.clone(),
                code,
                msg: answer
                    .get("msg")
                    .or_else(|| answer.get("StatusMessage"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            }),
            None => Err(AlertError::InvalidResponse {
                channel: name.clone(),
                reason: format!("no `code` in answer: {}", snippet(&body)),
            }),
        }
    }
}

impl fmt::Debug for FeishuChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeishuChannel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Channel for FeishuChannel {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn send<'a>(&'a self, alert: &'a Alert) -> SendFuture<'a> {
        Box::pin(self.deliver(alert))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::AlertKind;

    #[test]
    fn signature_matches_reference_vectors() {
        // Computed independently with Python's hmac/hashlib/base64 following Feishu's sample:
        // hmac.new(f"{ts}\n{secret}".encode(), b"", sha256), base64-encoded.
        assert_eq!(
            feishu_sign(1_599_360_473, "ax-test-secret"),
            "kU0sipF6wHdiiXnfq/7PLt1hvgkcFPLgNhG/yAo4yL0="
        );
        assert_eq!(
            feishu_sign(1_700_000_000, "SECxyz"),
            "GnU9dobz1WousiKlH0LX6FYP8yrWNCgoJOvRhpMc8HY="
        );
    }

    #[test]
    fn colour_by_level() {
        let colours: Vec<_> = [Level::Info, Level::Warn, Level::Critical, Level::Fatal]
            .into_iter()
            .map(|level| {
                let alert = Alert::new(level, AlertKind::Other, "t", "m", UtcMillis(0));
                feishu_card(&alert)["header"]["template"].clone()
            })
            .collect();
        assert_eq!(
            colours,
            vec![
                json!("blue"),
                json!("orange"),
                json!("red"),
                json!("carmine")
            ]
        );
    }

    #[test]
    fn card_shape() {
        let alert = Alert::task_dead_lettered(
            "billing",
            "nightly",
            3,
            "exit <at id=all></at> 1",
            UtcMillis(1_700_000_000_123),
        );
        let expected = json!({
            "config": { "wide_screen_mode": true },
            "header": {
                "template": "red",
                "title": { "tag": "plain_text", "content": "[CRITICAL] Task dead-lettered: billing/nightly" }
            },
            "elements": [
                { "tag": "div", "text": { "tag": "plain_text",
                  "content": "Gave up after 3 attempts; last error: exit <at id=all></at> 1" } },
                { "tag": "div", "fields": [
                    { "is_short": true, "text": { "tag": "lark_md", "content": "**Level**\ncritical" } },
                    { "is_short": true, "text": { "tag": "lark_md", "content": "**Kind**\ntask_dead_lettered" } },
                    { "is_short": true, "text": { "tag": "lark_md", "content": "**Task**\nbilling/nightly" } },
                    { "is_short": true, "text": { "tag": "lark_md", "content": "**attempts**\n3" } }
                ] },
                { "tag": "hr" },
                { "tag": "note", "elements": [
                    { "tag": "plain_text", "content": "ax · 2023-11-14T22:13:20.123Z" }
                ] }
            ]
        });
        assert_eq!(feishu_card(&alert), expected);
    }

    #[test]
    fn field_values_are_escaped_and_long_messages_cut() {
        let alert = Alert::new(
            Level::Info,
            AlertKind::Other,
            "t",
            "x".repeat(5000),
            UtcMillis(0),
        )
        .with_field("who", "<at id=all></at> & co");
        let card = feishu_card(&alert);
        assert_eq!(
            card["elements"][1]["fields"][2]["text"]["content"],
            "**who**\n&lt;at id=all&gt;&lt;/at&gt; &amp; co"
        );
        let shown = card["elements"][0]["text"]["content"].as_str().unwrap();
        assert_eq!(shown.chars().count(), FEISHU_MAX_MESSAGE_CHARS + 1);
        // Without a message the fields come first.
        let bare = Alert::new(Level::Info, AlertKind::Other, "t", "", UtcMillis(0));
        assert_eq!(feishu_card(&bare)["elements"][0]["tag"], "div");
        assert!(feishu_card(&bare)["elements"][0].get("fields").is_some());
    }

    #[test]
    fn payload_signed_only_with_secret() {
        let alert = Alert::new(Level::Warn, AlertKind::Other, "t", "m", UtcMillis(0));
        let unsigned = feishu_payload(&alert, None);
        assert_eq!(unsigned["msg_type"], "interactive");
        assert!(unsigned.get("sign").is_none() && unsigned.get("timestamp").is_none());

        let signed = feishu_payload(&alert, Some(("SECxyz", UtcMillis(1_700_000_000_999))));
        assert_eq!(signed["timestamp"], "1700000000");
        assert_eq!(
            signed["sign"],
            "GnU9dobz1WousiKlH0LX6FYP8yrWNCgoJOvRhpMc8HY="
        );
        assert_eq!(signed["card"], unsigned["card"]);
    }

    #[test]
    fn debug_redacts_secrets() {
        let config = FeishuConfig {
            webhook_url: "https://open.feishu.cn/open-apis/bot/v2/hook/TOKEN123".into(),
            secret: Some("SECRET456".into()),
            ..FeishuConfig::default()
        };
        let shown = format!("{:?}", FeishuChannel::new(config).unwrap());
        assert!(
            !shown.contains("TOKEN123") && !shown.contains("SECRET456"),
            "{shown}"
        );
    }
}
