//! De-duplication, rate limiting and the deferred summary, as a pure state machine.
//!
//! Everything that decides *whether* an alert goes out lives here, without clocks, tasks or
//! I/O: the caller passes `now` to [`Policy::offer`] and [`Policy::flush`], so the rules are
//! unit-tested on virtual time and the async manager only has to drive it.
//!
//! Rules, in order:
//! 1. Alerts below `min_level` are dropped ([`Decision::Filtered`]).
//! 2. De-duplication: the first alert of a `(title, task)` key opens a window of
//!    `dedupe_window`; repeats inside it are suppressed ([`Decision::Duplicate`]) and counted.
//!    The first alert after the window is sent again and carries the number suppressed in
//!    field `duplicates_suppressed`.
//! 3. Rate limit: at most `rate_limit` alerts in any rolling `rate_window`. Alerts over the
//!    limit are deferred ([`Decision::Deferred`]); one `rate_window` after the first of them,
//!    [`Policy::flush`] yields a single summary alert listing what was deferred (counts by
//!    kind and by title, level = the highest deferred). The summary is not itself limited, so a
//!    flood costs at most `rate_limit + 1` messages per window.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use ax_scheduler_core::{TaskKey, UtcMillis};

use crate::alert::{Alert, AlertKind, Level};
use crate::error::AlertError;

/// How many distinct titles a summary itemises; the rest are counted per kind only.
const SUMMARY_MAX_TITLES: usize = 20;
/// Distinct titles tracked per deferred batch (bounds memory under a flood of unique titles).
const DEFERRED_MAX_TITLES: usize = 200;
/// How often expired de-duplication entries are swept.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// `t + d`, saturating (kept local so the policy depends only on `UtcMillis`'s field).
pub(crate) fn plus(t: UtcMillis, d: Duration) -> UtcMillis {
    UtcMillis(t.0.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
}

/// Tunables of the [`Policy`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyConfig {
    /// Repeats of the same `(title, task)` within this window are sent once. Default 5 min.
    pub dedupe_window: Duration,
    /// Alerts allowed per `rate_window`. Default 10.
    pub rate_limit: u32,
    /// The rolling window of the rate limit. Default 1 min.
    pub rate_window: Duration,
    /// Alerts below this level are ignored. Default [`Level::Info`] (nothing ignored).
    pub min_level: Level,
    /// Most de-duplication keys remembered at once; beyond it new keys are not de-duplicated
    /// (the rate limit still applies). Default 10 000.
    pub max_dedupe_keys: usize,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            dedupe_window: Duration::from_secs(5 * 60),
            rate_limit: 10,
            rate_window: Duration::from_secs(60),
            min_level: Level::Info,
            max_dedupe_keys: 10_000,
        }
    }
}

impl PolicyConfig {
    /// Rejects values that cannot work (zero rate limit or windows).
    pub fn validate(&self) -> Result<(), AlertError> {
        if self.rate_limit == 0 {
            return Err(AlertError::InvalidConfig {
                field: "rate_limit",
                reason: "must be at least 1 alert per window".into(),
            });
        }
        if self.rate_window.is_zero() {
            return Err(AlertError::InvalidConfig {
                field: "rate_window",
                reason: "must be longer than zero".into(),
            });
        }
        Ok(())
    }
}

/// What [`Policy::offer`] decided for one alert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Deliver this alert now (possibly with a `duplicates_suppressed` field added).
    Send(Alert),
    /// Suppressed: the same `(title, task)` was seen within the de-duplication window.
    Duplicate,
    /// Over the rate limit; it will be counted in the next summary.
    Deferred,
    /// Below the minimum level.
    Filtered,
}

type DedupeKey = (String, Option<TaskKey>);

#[derive(Debug)]
struct Seen {
    since: UtcMillis,
    suppressed: u64,
}

#[derive(Debug)]
struct DeferredEntry {
    count: u64,
    level: Level,
}

#[derive(Debug)]
struct DeferredBatch {
    since: UtcMillis,
    total: u64,
    highest: Level,
    by_kind: BTreeMap<AlertKind, u64>,
    by_title: BTreeMap<(AlertKind, String), DeferredEntry>,
    untracked: u64,
}

/// The de-duplication and rate-limit state. See the module docs for the rules.
#[derive(Debug)]
pub struct Policy {
    config: PolicyConfig,
    seen: HashMap<DedupeKey, Seen>,
    next_prune: UtcMillis,
    sent: VecDeque<UtcMillis>,
    deferred: Option<DeferredBatch>,
}

impl Policy {
    /// A policy with nothing seen yet.
    pub fn new(config: PolicyConfig) -> Result<Self, AlertError> {
        config.validate()?;
        Ok(Policy {
            config,
            seen: HashMap::new(),
            next_prune: UtcMillis(i64::MIN),
            sent: VecDeque::new(),
            deferred: None,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// Decides what happens to `alert` offered at `now`.
    pub fn offer(&mut self, mut alert: Alert, now: UtcMillis) -> Decision {
        if alert.level < self.config.min_level {
            return Decision::Filtered;
        }
        self.prune(now);

        let key = (alert.title.clone(), alert.task.clone());
        if let Some(seen) = self.seen.get_mut(&key) {
            if now.since(seen.since) < self.config.dedupe_window {
                seen.suppressed += 1;
                return Decision::Duplicate;
            }
            if seen.suppressed > 0 {
                alert
                    .fields
                    .insert("duplicates_suppressed".into(), seen.suppressed.to_string());
            }
            self.seen.remove(&key);
        }
        if self.seen.len() < self.config.max_dedupe_keys {
            self.seen.insert(
                key,
                Seen {
                    since: now,
                    suppressed: 0,
                },
            );
        }

        self.expire_sent(now);
        if self.sent.len() < self.config.rate_limit as usize {
            self.sent.push_back(now);
            return Decision::Send(alert);
        }
        self.defer(&alert, now);
        Decision::Deferred
    }

    /// When the pending summary is due, if alerts are deferred.
    pub fn next_deadline(&self) -> Option<UtcMillis> {
        self.deferred
            .as_ref()
            .map(|deferred| plus(deferred.since, self.config.rate_window))
    }

    /// Number of alerts currently deferred (waiting for the summary).
    pub fn deferred(&self) -> u64 {
        self.deferred.as_ref().map_or(0, |deferred| deferred.total)
    }

    /// The summary of deferred alerts once it is due at `now`, else `None`.
    pub fn flush(&mut self, now: UtcMillis) -> Option<Alert> {
        match self.next_deadline() {
            Some(due) if now >= due => self.flush_now(now),
            _ => None,
        }
    }

    /// The summary of deferred alerts regardless of the deadline (used on shutdown).
    pub fn flush_now(&mut self, now: UtcMillis) -> Option<Alert> {
        let deferred = self.deferred.take()?;
        self.expire_sent(now);
        self.sent.push_back(now);
        Some(self.summary(deferred, now))
    }

    fn prune(&mut self, now: UtcMillis) {
        if now < self.next_prune {
            return;
        }
        let window = self.config.dedupe_window;
        // Keys with suppressed repeats are kept one more window so the count reaches the next
        // alert of the key; the rest can go as soon as their window is over.
        self.seen.retain(|_, seen| {
            let age = now.since(seen.since);
            age < window || (seen.suppressed > 0 && age < window.saturating_mul(2))
        });
        self.next_prune = plus(now, PRUNE_EVERY);
    }

    fn expire_sent(&mut self, now: UtcMillis) {
        while let Some(&first) = self.sent.front() {
            if now.since(first) >= self.config.rate_window {
                self.sent.pop_front();
            } else {
                break;
            }
        }
    }

    fn defer(&mut self, alert: &Alert, now: UtcMillis) {
        let deferred = self.deferred.get_or_insert_with(|| DeferredBatch {
            since: now,
            total: 0,
            highest: alert.level,
            by_kind: BTreeMap::new(),
            by_title: BTreeMap::new(),
            untracked: 0,
        });
        deferred.total += 1;
        deferred.highest = deferred.highest.max(alert.level);
        *deferred.by_kind.entry(alert.kind).or_insert(0) += 1;
        let key = (alert.kind, alert.title.clone());
        let room = deferred.by_title.len() < DEFERRED_MAX_TITLES;
        match deferred.by_title.get_mut(&key) {
            Some(entry) => {
                entry.count += 1;
                entry.level = entry.level.max(alert.level);
            }
            None if room => {
                deferred.by_title.insert(
                    key,
                    DeferredEntry {
                        count: 1,
                        level: alert.level,
                    },
                );
            }
            None => deferred.untracked += 1,
        }
    }

    fn summary(&self, deferred: DeferredBatch, now: UtcMillis) -> Alert {
        let mut entries: Vec<_> = deferred.by_title.into_iter().collect();
        entries.sort_by(|((ka, ta), a), ((kb, tb), b)| {
            b.level
                .cmp(&a.level)
                .then(b.count.cmp(&a.count))
                .then(ka.cmp(kb))
                .then(ta.cmp(tb))
        });
        let mut message = format!(
            "{} alert(s) over the rate limit ({} per {} s) were held back since {}:",
            deferred.total,
            self.config.rate_limit,
            self.config.rate_window.as_secs(),
            deferred.since
        );
        let itemised = entries.len().min(SUMMARY_MAX_TITLES);
        for ((kind, title), entry) in &entries[..itemised] {
            message.push_str(&format!(
                "\n- {} × [{}] {}: {}",
                entry.count, entry.level, kind, title
            ));
        }
        let not_itemised: u64 = entries[itemised..]
            .iter()
            .map(|(_, e)| e.count)
            .sum::<u64>()
            + deferred.untracked;
        if not_itemised > 0 {
            message.push_str(&format!("\n- … and {not_itemised} more"));
        }

        let mut alert = Alert::new(
            deferred.highest,
            AlertKind::DeferredSummary,
            format!("{} alert(s) held back by the rate limit", deferred.total),
            message,
            now,
        )
        // The summary's title and field names are its wire form, read by alert routes.
        .with_field("held_back", deferred.total)
        .with_field("held_since", deferred.since);
        for (kind, count) in deferred.by_kind {
            alert = alert.with_field(format!("held.{kind}"), count);
        }
        alert
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000;

    fn at(secs: f64) -> UtcMillis {
        UtcMillis(T0 + (secs * 1000.0) as i64)
    }

    fn policy() -> Policy {
        Policy::new(PolicyConfig::default()).unwrap()
    }

    fn failed(id: &str, secs: f64) -> Alert {
        Alert::task_failed("ns", id, 1, "boom", at(secs))
    }

    fn is_send(d: &Decision) -> bool {
        matches!(d, Decision::Send(_))
    }

    #[test]
    fn duplicate_within_window_is_sent_once() {
        let mut p = policy();
        assert!(is_send(&p.offer(failed("a", 0.0), at(0.0))));
        assert_eq!(p.offer(failed("a", 10.0), at(10.0)), Decision::Duplicate);
        assert_eq!(p.offer(failed("a", 299.9), at(299.9)), Decision::Duplicate);
        // Another task or another title is another key.
        assert!(is_send(&p.offer(failed("b", 11.0), at(11.0))));
        let other_title = Alert::task_dead_lettered("ns", "a", 3, "boom", at(12.0));
        assert!(is_send(&p.offer(other_title, at(12.0))));
    }

    #[test]
    fn after_window_sent_again_with_suppressed_count() {
        let mut p = policy();
        assert!(is_send(&p.offer(failed("a", 0.0), at(0.0))));
        assert_eq!(p.offer(failed("a", 1.0), at(1.0)), Decision::Duplicate);
        assert_eq!(p.offer(failed("a", 2.0), at(2.0)), Decision::Duplicate);
        match p.offer(failed("a", 300.0), at(300.0)) {
            Decision::Send(alert) => assert_eq!(alert.fields["duplicates_suppressed"], "2"),
            other => panic!("expected send, got {other:?}"),
        }
        // The new window starts at the resend.
        assert_eq!(p.offer(failed("a", 599.0), at(599.0)), Decision::Duplicate);
        match p.offer(failed("a", 600.0), at(600.0)) {
            Decision::Send(alert) => assert_eq!(alert.fields["duplicates_suppressed"], "1"),
            other => panic!("expected send, got {other:?}"),
        }
        // No repeats in between: no field.
        match p.offer(failed("a", 1000.0), at(1000.0)) {
            Decision::Send(alert) => assert!(!alert.fields.contains_key("duplicates_suppressed")),
            other => panic!("expected send, got {other:?}"),
        }
    }

    #[test]
    fn suppressed_count_survives_pruning() {
        let mut p = policy();
        assert!(is_send(&p.offer(failed("a", 0.0), at(0.0))));
        assert_eq!(p.offer(failed("a", 1.0), at(1.0)), Decision::Duplicate);
        // Unrelated traffic after the window triggers a sweep before "a" returns.
        assert!(is_send(&p.offer(failed("b", 400.0), at(400.0))));
        match p.offer(failed("a", 401.0), at(401.0)) {
            Decision::Send(alert) => assert_eq!(alert.fields["duplicates_suppressed"], "1"),
            other => panic!("expected send, got {other:?}"),
        }
    }

    #[test]
    fn min_level_filters() {
        let mut p = Policy::new(PolicyConfig {
            min_level: Level::Critical,
            ..PolicyConfig::default()
        })
        .unwrap();
        assert_eq!(p.offer(failed("a", 0.0), at(0.0)), Decision::Filtered);
        let dead = Alert::task_dead_lettered("ns", "a", 3, "boom", at(0.0));
        assert!(is_send(&p.offer(dead, at(0.0))));
        let fatal = Alert::new(Level::Fatal, AlertKind::Other, "x", "y", at(0.0));
        assert!(is_send(&p.offer(fatal, at(0.0))));
    }

    #[test]
    fn rate_limit_then_one_summary() {
        let mut p = policy();
        for i in 0..10 {
            let d = p.offer(failed(&format!("t{i}"), i as f64), at(i as f64));
            assert!(is_send(&d), "alert {i}: {d:?}");
        }
        // Over the limit: four warnings with distinct titles and one dead-letter.
        for secs in [20.0, 21.0, 22.0, 23.0] {
            let alert = Alert::new(
                Level::Warn,
                AlertKind::TaskFailed,
                format!("Slow #{secs}"),
                "",
                at(secs),
            );
            assert_eq!(p.offer(alert, at(secs)), Decision::Deferred);
        }
        let dead = Alert::task_dead_lettered("ns", "x", 3, "boom", at(24.0));
        assert_eq!(p.offer(dead, at(24.0)), Decision::Deferred);
        assert_eq!(p.deferred(), 5);
        assert_eq!(p.next_deadline(), Some(at(80.0)));
        assert_eq!(p.flush(at(79.9)), None);

        let summary = p.flush(at(80.0)).expect("summary due");
        assert_eq!(p.flush(at(80.0)), None, "only one summary");
        assert_eq!(p.deferred(), 0);
        assert_eq!(summary.kind, AlertKind::DeferredSummary);
        assert_eq!(summary.level, Level::Critical, "highest deferred level");
        assert_eq!(summary.title, "5 alert(s) held back by the rate limit");
        assert_eq!(summary.at, at(80.0));
        assert_eq!(summary.fields["held_back"], "5");
        assert_eq!(summary.fields["held.task_failed"], "4");
        assert_eq!(summary.fields["held.task_dead_lettered"], "1");
        assert_eq!(summary.fields["held_since"], at(20.0).to_rfc3339());
        assert_eq!(
            summary.message,
            "5 alert(s) over the rate limit (10 per 60 s) were held back since \
             2023-11-14T22:13:40.000Z:\n\
             - 1 × [critical] task_dead_lettered: Task dead-lettered: ns/x\n\
             - 1 × [warn] task_failed: Slow #20\n\
             - 1 × [warn] task_failed: Slow #21\n\
             - 1 × [warn] task_failed: Slow #22\n\
             - 1 × [warn] task_failed: Slow #23"
        );
    }

    #[test]
    fn summary_counts_same_title_and_itemises_at_most_twenty() {
        let mut p = Policy::new(PolicyConfig {
            rate_limit: 1,
            dedupe_window: Duration::ZERO,
            ..PolicyConfig::default()
        })
        .unwrap();
        assert!(is_send(&p.offer(failed("first", 0.0), at(0.0))));
        // With de-duplication off, the same title repeats and is counted under one line.
        for _ in 0..3 {
            assert_eq!(p.offer(failed("same", 1.0), at(1.0)), Decision::Deferred);
        }
        for i in 0..25 {
            assert_eq!(
                p.offer(failed(&format!("u{i:02}"), 2.0), at(2.0)),
                Decision::Deferred
            );
        }
        let summary = p.flush(at(61.0)).unwrap();
        let lines: Vec<&str> = summary.message.lines().collect();
        assert_eq!(lines[1], "- 3 × [warn] task_failed: Task failed: ns/same");
        assert_eq!(lines.len(), 1 + 20 + 1);
        assert_eq!(lines[21], "- … and 6 more");
        assert_eq!(summary.fields["held_back"], "28");
    }

    #[test]
    fn rolling_window_frees_slots() {
        let mut p = Policy::new(PolicyConfig {
            rate_limit: 2,
            ..PolicyConfig::default()
        })
        .unwrap();
        assert!(is_send(&p.offer(failed("a", 0.0), at(0.0))));
        assert!(is_send(&p.offer(failed("b", 30.0), at(30.0))));
        assert_eq!(p.offer(failed("c", 59.9), at(59.9)), Decision::Deferred);
        // The slot of "a" frees at 60 s.
        assert!(is_send(&p.offer(failed("d", 60.0), at(60.0))));
        assert_eq!(p.offer(failed("e", 61.0), at(61.0)), Decision::Deferred);
        let summary = p.flush(at(119.9)).unwrap();
        assert_eq!(summary.fields["held_back"], "2");
        // The summary used a slot: with "d" (60 s) and the summary (119.9 s) the window is full.
        assert_eq!(p.offer(failed("f", 119.9), at(119.9)), Decision::Deferred);
        assert!(is_send(&p.offer(failed("g", 120.0), at(120.0))));
    }

    #[test]
    fn deferred_alerts_are_deduplicated_too() {
        let mut p = Policy::new(PolicyConfig {
            rate_limit: 1,
            ..PolicyConfig::default()
        })
        .unwrap();
        assert!(is_send(&p.offer(failed("a", 0.0), at(0.0))));
        assert_eq!(p.offer(failed("b", 1.0), at(1.0)), Decision::Deferred);
        assert_eq!(p.offer(failed("b", 2.0), at(2.0)), Decision::Duplicate);
        assert_eq!(p.flush_now(at(3.0)).unwrap().fields["held_back"], "1");
        assert_eq!(p.flush_now(at(3.0)), None);
    }

    #[test]
    fn dedupe_memory_is_bounded() {
        let mut p = Policy::new(PolicyConfig {
            max_dedupe_keys: 2,
            rate_limit: 100,
            ..PolicyConfig::default()
        })
        .unwrap();
        for id in ["a", "b", "c"] {
            assert!(is_send(&p.offer(failed(id, 0.0), at(0.0))));
        }
        assert_eq!(p.offer(failed("a", 1.0), at(1.0)), Decision::Duplicate);
        // "c" was not remembered, so it is not de-duplicated.
        assert!(is_send(&p.offer(failed("c", 1.0), at(1.0))));
        assert_eq!(p.seen.len(), 2);
        // Expired keys are swept; "a" had a suppressed repeat, so it lasts a second window.
        assert!(is_send(&p.offer(failed("d", 400.0), at(400.0))));
        assert_eq!(p.seen.len(), 2);
        assert!(is_send(&p.offer(failed("e", 700.0), at(700.0))));
        assert_eq!(p.seen.len(), 1);
    }

    #[test]
    fn invalid_config_rejected() {
        let zero = PolicyConfig {
            rate_limit: 0,
            ..PolicyConfig::default()
        };
        assert!(matches!(
            Policy::new(zero),
            Err(AlertError::InvalidConfig {
                field: "rate_limit",
                ..
            })
        ));
    }
}
