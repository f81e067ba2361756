//! Registry settings with their documented defaults.

use std::time::Duration;

/// Settings of a [`crate::Registry`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryConfig {
    /// Key prefix; default `/scheduler`.
    pub prefix: String,
    /// Deadline of every single etcd request; default 5 s.
    pub request_timeout: Duration,
    /// First wait before the watch reconnects; default 100 ms, doubling per failure (each
    /// wait jittered into the upper half of its step).
    pub watch_backoff_initial: Duration,
    /// Longest wait between reconnect attempts; default 5 s.
    pub watch_backoff_max: Duration,
    /// Keys per page when listing; default 1000 (pages are read at one revision).
    pub list_page_size: i64,
    /// How long the watch may go without a message before it asks etcd for progress;
    /// default 2 s.
    pub watch_progress_interval: Duration,
    /// How long that request may go unanswered before the watch is opened anew (through
    /// another member, when one hangs); default 1 s.
    pub watch_answer_timeout: Duration,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            prefix: "/scheduler".to_string(),
            request_timeout: Duration::from_secs(5),
            watch_backoff_initial: Duration::from_millis(100),
            watch_backoff_max: Duration::from_secs(5),
            list_page_size: 1000,
            watch_progress_interval: Duration::from_secs(2),
            watch_answer_timeout: Duration::from_secs(1),
        }
    }
}
