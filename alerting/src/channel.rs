//! The channel abstraction: one destination that can deliver an alert.
//!
//! `send` returns a boxed future rather than being an `async fn` so the trait stays
//! object-safe: the manager holds a heterogeneous `Vec<Arc<dyn Channel>>` (Feishu, webhooks,
//! test doubles) and one boxed future per delivery costs nothing next to an HTTP request.
//! A channel makes exactly one attempt per call; retries, backoff and isolation from the other
//! channels are the manager's business (see `dispatch`).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::alert::Alert;
use crate::error::AlertError;

/// The future of one delivery attempt.
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), AlertError>> + Send + 'a>>;

/// A destination for alerts.
pub trait Channel: Send + Sync + 'static {
    /// A short name for logs and per-channel statistics, unique within a manager.
    fn name(&self) -> &str;

    /// Makes one attempt to deliver `alert`; must give up within the channel's own timeout.
    fn send<'a>(&'a self, alert: &'a Alert) -> SendFuture<'a>;
}

/// Largest response body quoted in an error message.
const BODY_SNIPPET: usize = 300;

/// Builds the HTTP client of a channel; the timeout covers connect, request and response.
///
/// It ignores the process's proxy variables (`HTTP_PROXY`, `ALL_PROXY`...) and follows no
/// redirect: a channel's URL and headers carry its secret (a Feishu or Slack webhook token,
/// an `Authorization` header), which go to the configured URL only, never to a proxy the
/// environment names or wherever a redirect points. A redirect is an HTTP error like any
/// other non-2xx answer.
pub(crate) fn http_client(timeout: Duration) -> Result<reqwest::Client, AlertError> {
    if timeout.is_zero() {
        return Err(AlertError::InvalidConfig {
            field: "timeout",
            reason: "must be longer than zero".into(),
        });
    }
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|err| AlertError::InvalidConfig {
            field: "timeout",
            reason: format!("cannot build the HTTP client: {}", err.without_url()),
        })
}

/// Checks that `url` is an absolute http(s) URL, without echoing it (it may hold a token).
pub(crate) fn check_url(field: &'static str, url: &str) -> Result<reqwest::Url, AlertError> {
    let parsed = reqwest::Url::parse(url).map_err(|err| AlertError::InvalidConfig {
        field,
        reason: format!("not a valid URL: {err}"),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(AlertError::InvalidConfig {
            field,
            reason: format!("scheme {:?} is not http or https", parsed.scheme()),
        });
    }
    Ok(parsed)
}

/// Sends a prepared request and returns the body of a 2xx answer, or the matching error.
pub(crate) async fn execute(
    channel: &str,
    timeout: Duration,
    request: reqwest::RequestBuilder,
) -> Result<String, AlertError> {
    let response = request
        .send()
        .await
        .map_err(|err| AlertError::from_reqwest(channel, timeout, err))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|err| AlertError::from_reqwest(channel, timeout, err))?;
    if !status.is_success() {
        return Err(AlertError::Status {
            channel: channel.to_owned(),
            status: status.as_u16(),
            body: snippet(&body),
        });
    }
    Ok(body)
}

/// The start of `body`, cut on a character boundary.
pub(crate) fn snippet(body: &str) -> String {
    truncate_chars(body.trim(), BODY_SNIPPET)
}

/// `text` cut to at most `max` characters, with an ellipsis when cut.
pub(crate) fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abcd", 3), "abc…");
        assert_eq!(truncate_chars("任务失败了", 2), "任务…");
    }

    #[test]
    fn urls_are_checked() {
        assert!(check_url("url", "https://open.feishu.cn/open-apis/bot/v2/hook/x").is_ok());
        assert!(check_url("url", "ftp://example.com").is_err());
        assert!(check_url("url", "not a url").is_err());
        assert!(http_client(Duration::ZERO).is_err());
    }
}
