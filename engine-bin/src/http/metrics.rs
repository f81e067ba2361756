//! Prometheus metrics of one replica, under the fixed names the alert rules use.
//!
//! The names, help texts, labels and buckets are defined once in `ax-metrics`, which the
//! embedded kernel shares (re-exported here); a test checks every fixed name appears in the
//! exposition and every HELP text matches docs/metrics.md.
//!
//! `queue` and `handler` values come from users' specs, so each is bounded: a replica exports
//! at most [`MAX_LABEL_VALUES`] distinct values of each (configured queues and built-in
//! handlers first) and counts the rest under [`OTHER_LABEL`], so a loop registering tasks
//! with generated queue names cannot create series without end.
//!
//! Counters are created at zero for every configured queue, built-in handler, alert channel
//! and every other label value known at start, so that `rate()` sees the first increment and
//! every series the dashboard and the alert rules use shows up before anything happens.
//! Renamed families are also exported under their old names for one release
//! ([`DEPRECATED_ALIASES`]). Gauges
//! of shared state (queue depth, dead letters) may be reported by every replica; the rules
//! combine them with `max`.
//!
//! On Linux the registry also carries the Prometheus client's process collector
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...), whose names are the
//! client's and not constants here.

use ax_metrics::families::{
    alerting_family, dead_letter_family, ProcessFamilies, QueueFamilies, SchedulerFamilies,
};
use ax_metrics::ExecutionMetrics;
use ax_scheduler_core::AttemptEnd;
use prometheus::{Encoder, IntCounterVec, IntGauge, Registry, TextEncoder};

pub use ax_metrics::metric_outcome;
pub use ax_metrics::names::*;

/// Handlers built into ax, whose series exist from the start.
pub const BUILTIN_HANDLERS: &[&str] = &["http", "log"];

/// The metrics of one replica and the registry that exposes them.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// The fires and executions, as the embedded kernel records them too.
    pub execution: ExecutionMetrics,
    /// Leadership and what the leader holds.
    pub scheduler: SchedulerFamilies,
    /// The shared queue state in Redis.
    pub queues: QueueFamilies,
    /// The replica itself and its backends.
    pub process: ProcessFamilies,
    /// [`DLQ_SIZE`].
    pub dlq_size: IntGauge,
    /// [`ALERTS_TOTAL`] by `channel`, `outcome`.
    pub alerts_total: IntCounterVec,
}

impl Metrics {
    /// Creates and registers every metric, with series at zero for each of `queues`, the
    /// built-in handlers and the alert `channels` (such as `feishu`, `webhook`).
    pub fn new(queues: &[String], channels: &[&str]) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let m = Metrics {
            execution: ExecutionMetrics::register(&registry)?,
            scheduler: SchedulerFamilies::register(&registry)?,
            queues: QueueFamilies::register(&registry)?,
            process: ProcessFamilies::register(&registry)?,
            dlq_size: dead_letter_family(&registry)?,
            alerts_total: alerting_family(&registry)?,
            registry,
        };
        m.seed(queues, channels)?;
        Ok(m)
    }

    /// Sets what is known from the start: the build info, the process collector, and the
    /// series at zero of every bounded label value known now.
    fn seed(&self, queues: &[String], channels: &[&str]) -> Result<(), prometheus::Error> {
        self.process
            .build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        // CPU and memory per replica, for the dashboard and capacity planning: the kubelet's
        // container metrics are not always scraped, and these need no extra exporter.
        #[cfg(target_os = "linux")]
        self.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        for backend in [BACKEND_ETCD, BACKEND_REDIS] {
            self.process
                .backend_errors_total
                .with_label_values(&[backend]);
        }
        for reason in ax_control::api::REFUSAL_REASONS {
            self.process
                .api_auth_failures_total
                .with_label_values(&[*reason]);
        }
        for reason in ax_scheduler_core::deadline::MissReason::ALL {
            self.scheduler
                .deadline_misses_total
                .with_label_values(&[reason]);
        }
        for how in [REPAIR_HISTORY, REPAIR_LOST] {
            self.scheduler.state_repairs_total.with_label_values(&[how]);
        }
        for reason in STEP_DOWN_REASONS {
            self.scheduler
                .leader_step_downs_total
                .with_label_values(&[reason]);
        }
        for name in WORKER_LOOPS.iter().chain(LEADER_LOOPS) {
            self.process.loop_panics_total.with_label_values(&[name]);
        }
        for queue in queues {
            self.touch_queue(queue);
        }
        // What the alert export counts: deliveries by channel, suppressions before any
        // channel (so there is a series at 0 with no channel configured, too).
        for channel in channels {
            for outcome in [ALERT_SENT, ALERT_FAILED] {
                self.alerts_total.with_label_values(&[*channel, outcome]);
            }
        }
        self.alerts_total
            .with_label_values(&[ALERT_CHANNEL_ALL, ALERT_SUPPRESSED]);
        Ok(())
    }

    /// The `queue` label value for `queue` (see [`MAX_LABEL_VALUES`]). A partition's
    /// physical name (`hot#p3`) counts as its queue's, so a partitioned queue has one series
    /// as the gauges (summed over its partitions) do.
    pub fn queue_label<'a>(&self, queue: &'a str) -> &'a str {
        self.execution.queue_label(logical_queue(queue))
    }

    /// Creates the zero series of `queue` (done for configured queues by [`Metrics::new`]).
    pub fn touch_queue(&self, queue: &str) {
        self.execution.touch(logical_queue(queue), BUILTIN_HANDLERS);
        let queue = self.queue_label(queue);
        self.queues.queue_depth.with_label_values(&[queue]);
        self.queues.queue_paused.with_label_values(&[queue]);
        self.queues
            .oldest_queued_age_seconds
            .with_label_values(&[queue]);
        self.queues
            .attempts_abandoned_total
            .with_label_values(&[queue]);
    }

    /// Counts an attempt given up unsettled on `queue`, Redis unreachable.
    pub fn attempt_abandoned(&self, queue: &str) {
        self.queues
            .attempts_abandoned_total
            .with_label_values(&[self.queue_label(queue)])
            .inc();
    }

    /// Records one ended attempt (see [`ExecutionMetrics::record_attempt`]).
    pub fn record_attempt(&self, queue: &str, handler: &str, end: &AttemptEnd, seconds: f64) {
        self.execution
            .record_attempt(logical_queue(queue), handler, end, seconds);
    }

    /// Records the lateness of a fire's first start, in `queue`.
    pub fn record_start_lateness(&self, queue: &str, seconds: f64) {
        self.execution
            .record_start_lateness(logical_queue(queue), seconds);
    }

    /// Records how long an execution of `queue` waited for a slot of its concurrency key.
    pub fn record_concurrency_wait(&self, queue: &str, seconds: f64) {
        self.execution
            .record_concurrency_wait(logical_queue(queue), seconds);
    }

    /// Counts a fire enqueued to `queue`.
    pub fn record_scheduled(&self, queue: &str) {
        self.execution.record_scheduled(logical_queue(queue));
    }

    /// Records a leadership change and sets [`IS_LEADER`].
    pub fn set_leader(&self, leading: bool) {
        // Only gains count: a handover is one change, as the flapping alert assumes.
        if leading && self.scheduler.is_leader.get() != 1 {
            self.scheduler.leader_changes_total.inc();
        }
        self.scheduler.is_leader.set(i64::from(leading));
    }

    /// Sets how many shards this replica schedules, and [`IS_LEADER`] to whether it
    /// schedules any. Not a leadership change: shards move at every join and leave, which
    /// the flapping alert must not count.
    pub fn set_shards_owned(&self, owned: usize) {
        self.scheduler
            .shards_owned
            .set(i64::try_from(owned).unwrap_or(i64::MAX));
        self.scheduler.is_leader.set(i64::from(owned > 0));
    }

    /// Counts a panic of the background loop `name`, which starts again.
    pub fn loop_panicked(&self, name: &str) {
        self.process
            .loop_panics_total
            .with_label_values(&[name])
            .inc();
    }

    /// Counts a failed call to `backend` ([`BACKEND_ETCD`], [`BACKEND_REDIS`]).
    pub fn backend_error(&self, backend: &str) {
        self.process
            .backend_errors_total
            .with_label_values(&[backend])
            .inc();
    }

    /// Counts `missed` fires whose deadline passed, for `reason`.
    pub fn record_deadline_misses(&self, reason: &str, missed: u64) {
        self.scheduler
            .deadline_misses_total
            .with_label_values(&[reason])
            .inc_by(missed);
    }

    /// Executions running on this replica ([`EXECUTIONS_RUNNING`], and its deprecated alias
    /// [`ACTIVE_WORKERS`]).
    pub fn executions_running(&self) -> &IntGauge {
        &self.execution.worker.executions_running
    }

    /// What the pool lets run at once now ([`WORKER_CONCURRENCY_LIMIT`]).
    pub fn worker_concurrency_limit(&self) -> &IntGauge {
        &self.execution.worker.worker_concurrency_limit
    }

    /// The registry, for callers that add metrics of their own.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Everything registered, in the Prometheus text format.
    pub fn gather_text(&self) -> Result<String, prometheus::Error> {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf)?;
        String::from_utf8(buf).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

/// The queue a physical queue name belongs to: a partition (`hot#p3`) counts as its queue.
fn logical_queue(queue: &str) -> &str {
    ax_queue::split_partition(queue).map_or(queue, |(logical, _)| logical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Metrics {
        Metrics::new(&["default".to_owned()], &["webhook"]).unwrap()
    }

    #[test]
    fn every_fixed_name_is_exposed_from_the_start() {
        let text = metrics().gather_text().unwrap();
        for name in ALL_NAMES {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} missing from:\n{text}"
            );
        }
        assert!(
            text.contains("scheduler_queue_depth{queue=\"default\"} 0"),
            "{text}"
        );
        assert!(text.contains(&format!(
            "ax_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
    }

    /// Every family the chart's dashboard and the alert rules name has a series (at 0) on a
    /// replica that has done nothing yet, with no alert channel configured, so a panel
    /// shows 0 rather than "No data" and `increase()` sees the first event. They name the
    /// current families, not the deprecated aliases.
    #[test]
    fn every_series_the_dashboard_and_the_rules_use_exists_from_the_start() {
        let text = Metrics::new(&["default".to_owned()], &[])
            .unwrap()
            .gather_text()
            .unwrap();
        let sources = [
            (
                "charts/ax/dashboards/ax.json",
                include_str!("../../../charts/ax/dashboards/ax.json"),
            ),
            (
                "alert-rules/ax-rules.yaml",
                include_str!("../../../alert-rules/ax-rules.yaml"),
            ),
        ];
        let mut checked = 0;
        for (file, source) in sources {
            let names: std::collections::BTreeSet<&str> = source
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("scheduler_") || w.starts_with("ax_"))
                .collect();
            for name in names {
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .filter(|f| text.contains(&format!("# TYPE {f} histogram")))
                    .unwrap_or(name);
                assert!(
                    !DEPRECATED_ALIASES.iter().any(|(old, _)| *old == family),
                    "{file} uses the deprecated name {family}"
                );
                assert!(
                    text.lines().any(|l| l
                        .strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))),
                    "{file} uses {name}, which has no series at start:\n{text}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 25, "{checked} names checked");
        for series in [
            "scheduler_alerts_total{channel=\"all\",outcome=\"suppressed\"} 0",
            "scheduler_loop_panics_total{loop=\"deadline\"} 0",
            "scheduler_attempts_total{handler=\"http\",outcome=\"succeeded\",queue=\"default\"} 0",
            "scheduler_attempts_total{handler=\"http\",outcome=\"killed\",queue=\"default\"} 0",
            "scheduler_tasks_executed_total{handler=\"http\",outcome=\"success\",queue=\"default\"} 0",
        ] {
            assert!(text.contains(series), "{series} missing");
        }
        let with_channel = Metrics::new(&[], &["webhook"])
            .unwrap()
            .gather_text()
            .unwrap();
        for outcome in [ALERT_SENT, ALERT_FAILED] {
            let series =
                format!("scheduler_alerts_total{{channel=\"webhook\",outcome=\"{outcome}\"}} 0");
            assert!(with_channel.contains(&series), "{series} missing");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_metrics_are_exposed_on_linux() {
        let text = metrics().gather_text().unwrap();
        for name in ["process_cpu_seconds_total", "process_resident_memory_bytes"] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
    }

    /// docs/metrics.md is what users read: each family has its row there, of its type, and
    /// its HELP text is the start of the row's description (which may go on with details),
    /// so the two can never say different things.
    #[test]
    fn help_texts_and_types_are_the_documented_ones() {
        let doc = include_str!("../../../docs/metrics.md");
        let rows: std::collections::HashMap<&str, (&str, String)> = doc
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l
                    .strip_prefix("| `")?
                    .trim_end_matches('|')
                    .split('|')
                    .map(str::trim)
                    .collect();
                let name = cells.first()?.strip_suffix('`')?;
                Some((name, (*cells.get(1)?, plain(cells.last()?))))
            })
            .collect();
        let text = metrics().gather_text().unwrap();
        let mut checked = 0;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("# HELP ") else {
                continue;
            };
            let (name, help) = rest.split_once(' ').unwrap();
            if !name.starts_with("scheduler_") && !name.starts_with("ax_") {
                continue;
            }
            let (kind, described) = rows
                .get(name)
                .unwrap_or_else(|| panic!("{name} has no row in docs/metrics.md"));
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "{name} is not a {kind} as documented"
            );
            let said = plain(help.trim_end_matches('.').trim_end_matches(')'));
            assert!(
                described.starts_with(&said),
                "{name}: HELP says `{help}`, docs/metrics.md says `{described}`"
            );
            checked += 1;
        }
        assert!(checked >= 25, "{checked} families checked");
    }

    /// Lower case at the start, markdown links as their text, HELP escapes undone.
    fn plain(s: &str) -> String {
        let mut out = String::new();
        let mut rest = s.replace("\\\\", "\\");
        while let Some(open) = rest.find('[') {
            let Some(mid) = rest[open..].find("](").map(|i| open + i) else {
                break;
            };
            let Some(close) = rest[mid..].find(')').map(|i| mid + i) else {
                break;
            };
            out.push_str(&rest[..open]);
            out.push_str(&rest[open + 1..mid]);
            rest = rest[close + 1..].to_owned();
        }
        out.push_str(&rest);
        let mut chars = out.chars();
        chars.next().map_or_else(String::new, |c| {
            c.to_lowercase().collect::<String>() + chars.as_str()
        })
    }

    #[test]
    fn a_partition_counts_as_its_queue() {
        let m = metrics();
        assert_eq!(m.queue_label("hot#p3"), "hot");
        assert_eq!(m.queue_label("default"), "default");
        m.record_attempt("default#p1", "http", &AttemptEnd::succeeded(), 0.2);
        assert_eq!(
            m.execution
                .worker
                .attempts_total
                .with_label_values(&["default", "http", OUTCOME_SUCCEEDED])
                .get(),
            1
        );
    }

    #[test]
    fn histogram_buckets_span_the_documented_ranges() {
        let text = metrics().gather_text().unwrap();
        for needle in [
            "scheduler_schedule_latency_seconds_bucket{queue=\"default\",le=\"0.001\"}",
            "scheduler_schedule_latency_seconds_bucket{queue=\"default\",le=\"60\"}",
            "scheduler_concurrency_wait_seconds_bucket{queue=\"default\",le=\"0.01\"}",
            "scheduler_concurrency_wait_seconds_bucket{queue=\"default\",le=\"3600\"}",
            "scheduler_attempt_duration_seconds_bucket{handler=\"http\",outcome=\"succeeded\",queue=\"default\",le=\"0.005\"}",
            "scheduler_attempt_duration_seconds_bucket{handler=\"http\",outcome=\"succeeded\",queue=\"default\",le=\"600\"}",
        ] {
            assert!(text.contains(needle), "{needle} missing");
        }
    }

    #[test]
    fn leader_changes_count_gains_only() {
        let m = metrics();
        m.set_leader(false);
        assert_eq!(m.scheduler.leader_changes_total.get(), 0);
        m.set_leader(true);
        m.set_leader(true);
        m.set_leader(false);
        assert_eq!(
            (
                m.scheduler.leader_changes_total.get(),
                m.scheduler.is_leader.get()
            ),
            (1, 0)
        );
        m.set_leader(true);
        assert_eq!(m.scheduler.leader_changes_total.get(), 2);
    }

    #[test]
    fn metrics_are_per_instance() {
        // Two instances (as in tests running servers side by side) do not collide.
        let a = metrics();
        let b = metrics();
        a.dlq_size.set(3);
        assert_eq!(b.dlq_size.get(), 0);
    }
}
