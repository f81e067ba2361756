//! Counters of the alert pipeline, for the engine to export as metrics.
//!
//! Plain relaxed atomics: each counter is independent and only ever grows, so a snapshot need
//! not be consistent across counters, and the hot path (the engine's `send`) stays lock-free.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) filtered: AtomicU64,
    pub(crate) deduplicated: AtomicU64,
    pub(crate) rate_limited: AtomicU64,
    pub(crate) summaries: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

#[derive(Debug, Default)]
pub(crate) struct ChannelCounters {
    pub(crate) sent: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// A snapshot of the manager's counters (all totals since start).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlertStats {
    /// Alerts taken from the intake queue.
    pub received: u64,
    /// Alerts below `min_level`.
    pub filtered: u64,
    /// Alerts suppressed as duplicates.
    pub deduplicated: u64,
    /// Alerts the rate limit deferred (reported in a summary instead).
    pub rate_limited: u64,
    /// Summary alerts produced.
    pub summaries: u64,
    /// Alerts lost because the intake queue or a channel queue was full (or the manager had
    /// stopped). Per-channel losses are also in [`ChannelStats::dropped`].
    pub dropped: u64,
    /// Deliveries that succeeded, over all channels.
    pub sent: u64,
    /// Deliveries abandoned after the last retry or a permanent error, over all channels.
    pub failed: u64,
    /// Per-channel counters, in the order the channels were given.
    pub channels: Vec<ChannelStats>,
}

/// Counters of one channel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// The channel's name.
    pub name: String,
    /// Alerts delivered.
    pub sent: u64,
    /// Alerts given up on.
    pub failed: u64,
    /// Extra attempts made after a retryable failure.
    pub retries: u64,
    /// Alerts not queued for this channel because its queue was full.
    pub dropped: u64,
}

pub(crate) fn snapshot(
    counters: &Counters,
    channels: &[(String, std::sync::Arc<ChannelCounters>)],
) -> AlertStats {
    let channels: Vec<ChannelStats> = channels
        .iter()
        .map(|(name, c)| ChannelStats {
            name: name.clone(),
            sent: read(&c.sent),
            failed: read(&c.failed),
            retries: read(&c.retries),
            dropped: read(&c.dropped),
        })
        .collect();
    AlertStats {
        received: read(&counters.received),
        filtered: read(&counters.filtered),
        deduplicated: read(&counters.deduplicated),
        rate_limited: read(&counters.rate_limited),
        summaries: read(&counters.summaries),
        dropped: read(&counters.dropped),
        sent: channels.iter().map(|c| c.sent).sum(),
        failed: channels.iter().map(|c| c.failed).sum(),
        channels,
    }
}
