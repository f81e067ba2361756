//! The kernel's Prometheus metrics: the cluster's execution families, under its names, on a
//! registry the program passes in (`KernelBuilder::metrics`, feature `metrics`).
//!
//! The families and the recorder are `ax-metrics`'s, so a kernel's
//! `scheduler_attempts_total` counts exactly what a cluster worker's does; the kernel
//! only says when. Its one queue is the cluster's default queue, and its handler label is
//! the named handler's name, or `closure` for a closure job. Without the feature, or
//! without a registry, every call here is a no-op the optimizer removes, so the fire path
//! pays nothing for metrics nobody reads.

#[cfg(feature = "metrics")]
mod on {
    use ax_metrics::families::{dead_letter_family, deadline_miss_family};
    use ax_metrics::ExecutionMetrics;
    use ax_scheduler_core::deadline::MissReason;
    use ax_scheduler_core::AttemptEnd;
    use prometheus::{IntCounterVec, IntGauge, Registry};

    /// The families a kernel exports.
    #[derive(Clone, Debug)]
    pub(crate) struct KernelMetrics {
        execution: ExecutionMetrics,
        dead_letters: IntGauge,
        deadline_misses: IntCounterVec,
    }

    impl KernelMetrics {
        /// Registers the families on `registry`, with series at zero for `queue` and each
        /// of `handlers`.
        pub(crate) fn register(
            registry: &Registry,
            queue: &str,
            handlers: &[&str],
        ) -> Result<Self, prometheus::Error> {
            let execution = ExecutionMetrics::register(registry)?;
            execution.touch(queue, handlers);
            let deadline_misses = deadline_miss_family(registry)?;
            for reason in MissReason::ALL {
                deadline_misses.with_label_values(&[reason]);
            }
            Ok(KernelMetrics {
                execution,
                dead_letters: dead_letter_family(registry)?,
                deadline_misses,
            })
        }

        pub(crate) fn scheduled(&self, queue: &str) {
            self.execution.record_scheduled(queue);
        }

        pub(crate) fn started_late(&self, queue: &str, lateness_ms: i64) {
            let seconds = lateness_ms.max(0) as f64 / 1000.0;
            self.execution.record_start_lateness(queue, seconds);
        }

        pub(crate) fn attempt(&self, queue: &str, handler: &str, end: &AttemptEnd, ms: i64) {
            let seconds = ms.max(0) as f64 / 1000.0;
            self.execution.record_attempt(queue, handler, end, seconds);
        }

        pub(crate) fn deadline_missed(&self, reason: &str, missed: u64) {
            self.deadline_misses
                .with_label_values(&[reason])
                .inc_by(missed);
        }

        pub(crate) fn gauges(&self, running: usize, limit: usize, dead: usize) {
            let w = &self.execution.worker;
            w.executions_running.set(as_i64(running));
            w.worker_concurrency_limit.set(as_i64(limit));
            self.dead_letters.set(as_i64(dead));
        }
    }

    /// What the engine records: into the families when a registry was given, else nothing.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Recorder(pub(crate) Option<KernelMetrics>);

    impl Recorder {
        /// Records nothing until a registry is given.
        pub(crate) fn none() -> Self {
            Recorder(None)
        }

        pub(crate) fn scheduled(&self, queue: &str) {
            if let Some(m) = &self.0 {
                m.scheduled(queue);
            }
        }

        pub(crate) fn started_late(&self, queue: &str, lateness_ms: i64) {
            if let Some(m) = &self.0 {
                m.started_late(queue, lateness_ms);
            }
        }

        pub(crate) fn attempt(&self, queue: &str, handler: &str, end: &AttemptEnd, ms: i64) {
            if let Some(m) = &self.0 {
                m.attempt(queue, handler, end, ms);
            }
        }

        pub(crate) fn deadline_missed(&self, reason: &str, missed: u64) {
            if let Some(m) = &self.0 {
                m.deadline_missed(reason, missed);
            }
        }

        pub(crate) fn gauges(&self, running: usize, limit: usize, dead: usize) {
            if let Some(m) = &self.0 {
                m.gauges(running, limit, dead);
            }
        }
    }

    fn as_i64(n: usize) -> i64 {
        i64::try_from(n).unwrap_or(i64::MAX)
    }
}

#[cfg(feature = "metrics")]
pub(crate) use on::{KernelMetrics, Recorder};

#[cfg(not(feature = "metrics"))]
pub(crate) use off::Recorder;

#[cfg(not(feature = "metrics"))]
mod off {
    use ax_scheduler_core::AttemptEnd;

    /// Records nothing: the crate was built without the `metrics` feature.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct Recorder;

    impl Recorder {
        pub(crate) fn none() -> Self {
            Recorder
        }
        pub(crate) fn scheduled(&self, _queue: &str) {}
        pub(crate) fn started_late(&self, _queue: &str, _lateness_ms: i64) {}
        pub(crate) fn attempt(&self, _queue: &str, _handler: &str, _end: &AttemptEnd, _ms: i64) {}
        pub(crate) fn deadline_missed(&self, _reason: &str, _missed: u64) {}
        pub(crate) fn gauges(&self, _running: usize, _limit: usize, _dead: usize) {}
    }
}
