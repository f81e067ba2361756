//! ax alert manager.
//!
//! The engine raises [`Alert`]s (one constructor per trigger: task failed, dead-lettered,
//! queue backlog, leader change, schedule delay, skipped fires, circuit open) through an
//! [`AlertSender`], which never blocks. A background [`AlertManager`] drops alerts below the
//! minimum level, sends each `(title, task)` at most once per de-duplication window (5 min),
//! allows at most 10 alerts per rolling minute and summarises the rest in one alert, and
//! delivers to [`Channel`]s — a Feishu interactive card ([`FeishuChannel`]) and a generic JSON
//! webhook ([`WebhookChannel`]) — each in its own worker with retries and backoff.
//!
//! The rules live in the clock-free [`Policy`]; payload formats are documented in
//! `docs/alerting.md` and built by [`feishu_payload`] and [`webhook_payload`].

mod alert;
mod channel;
mod dispatch;
mod error;
mod feishu;
mod manager;
mod policy;
mod stats;
mod webhook;

pub use alert::{
    Alert, AlertKind, Level, DEFAULT_QUEUE_BACKLOG_THRESHOLD, DEFAULT_SCHEDULE_DELAY_THRESHOLD,
};
pub use channel::{Channel, SendFuture};
pub use dispatch::DeliveryRetry;
pub use error::{AlertError, FEISHU_CODE_RATE_LIMITED};
pub use feishu::{
    feishu_card, feishu_payload, feishu_sign, feishu_template, FeishuChannel, FeishuConfig,
    FEISHU_MAX_MESSAGE_CHARS,
};
pub use manager::{AlertManager, AlertManagerConfig, AlertSender};
pub use policy::{Decision, Policy, PolicyConfig};
pub use stats::{AlertStats, ChannelStats};
pub use webhook::{webhook_payload, WebhookChannel, WebhookConfig, WEBHOOK_PAYLOAD_VERSION};
