//! The one error type of the crate.
//!
//! Channel errors carry the channel name so a log line says which destination is broken, and
//! never the endpoint URL: Feishu and most webhook URLs embed their access token, so they must
//! not end up in logs (reqwest errors are stripped of their URL for the same reason).
//! [`AlertError::is_retryable`] drives the per-channel retry loop: transport failures, timeouts,
//! 5xx/429 answers and Feishu's rate-limit code are worth another attempt; a rejected signature
//! or a 4xx is not, because repeating the same request cannot change the answer.

use std::time::Duration;

/// Feishu's answer code for "request frequency limited"; the only Feishu rejection worth retrying.
pub const FEISHU_CODE_RATE_LIMITED: i64 = 11232;

/// What went wrong while configuring the alert manager or delivering an alert.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    /// A configuration value cannot work; fix the configuration.
    #[error("invalid alerting configuration: {field}: {reason}")]
    InvalidConfig {
        /// The offending field, e.g. `queue_capacity`.
        field: &'static str,
        /// Why the value is rejected.
        reason: String,
    },
    /// The request did not complete: connection refused, DNS, TLS, reset.
    #[error("alert channel {channel}: request failed: {source}")]
    Transport {
        /// The channel's name.
        channel: String,
        /// The underlying HTTP client error (URL removed).
        #[source]
        source: reqwest::Error,
    },
    /// No answer within the channel's timeout.
    #[error("alert channel {channel}: no answer within {timeout:?}")]
    Timeout {
        /// The channel's name.
        channel: String,
        /// The configured per-request timeout.
        timeout: Duration,
    },
    /// The endpoint answered with a non-success HTTP status.
    #[error("alert channel {channel}: HTTP {status}: {body}")]
    Status {
        /// The channel's name.
        channel: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the response body, for diagnosis.
        body: String,
    },
    /// Feishu answered HTTP 200 with a non-zero `code` (e.g. 19021: signature mismatch or
    /// timestamp more than an hour off; 19024: keyword check failed).
    #[error("alert channel {channel}: Feishu rejected the message: code {code}: {msg}")]
    Rejected {
        /// The channel's name.
        channel: String,
        /// Feishu's `code`.
        code: i64,
        /// Feishu's `msg`.
        msg: String,
    },
    /// The endpoint answered with something that is not the expected response.
    #[error("alert channel {channel}: unexpected response: {reason}")]
    InvalidResponse {
        /// The channel's name.
        channel: String,
        /// What was wrong with it.
        reason: String,
    },
}

impl AlertError {
    /// Whether sending the same alert again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            AlertError::Transport { .. } | AlertError::Timeout { .. } => true,
            AlertError::Status { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            AlertError::Rejected { code, .. } => *code == FEISHU_CODE_RATE_LIMITED,
            AlertError::InvalidConfig { .. } | AlertError::InvalidResponse { .. } => false,
        }
    }

    /// Maps a reqwest error, keeping timeouts apart and dropping the URL (it holds the token).
    pub(crate) fn from_reqwest(channel: &str, timeout: Duration, err: reqwest::Error) -> Self {
        if err.is_timeout() {
            AlertError::Timeout {
                channel: channel.to_owned(),
                timeout,
            }
        } else {
            AlertError::Transport {
                channel: channel.to_owned(),
                source: err.without_url(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16) -> AlertError {
        AlertError::Status {
            channel: "c".into(),
            status,
            body: String::new(),
        }
    }

    #[test]
    fn retryable_classification() {
        assert!(status(500).is_retryable());
        assert!(status(503).is_retryable());
        assert!(status(429).is_retryable());
        assert!(!status(400).is_retryable());
        assert!(!status(404).is_retryable());
        let rejected = |code| AlertError::Rejected {
            channel: "c".into(),
            code,
            msg: String::new(),
        };
        assert!(!rejected(19021).is_retryable());
        assert!(rejected(FEISHU_CODE_RATE_LIMITED).is_retryable());
        assert!(AlertError::Timeout {
            channel: "c".into(),
            timeout: Duration::from_secs(1)
        }
        .is_retryable());
        assert!(!AlertError::InvalidConfig {
            field: "x",
            reason: String::new()
        }
        .is_retryable());
    }
}
