//! ax's Prometheus metrics as a contract: each family's name, help text, labels and buckets
//! defined once, for the service (`ax serve`, which exposes them on `/metrics`) and for the
//! embedded kernel (which registers them on a registry its user passes in).
//!
//! [`names`] holds the fixed names the alert rules and dashboards use, [`families`] their
//! registration by part of ax, and [`ExecutionMetrics`] the one recorder of fires and
//! attempts both faces use, so an embedded kernel's `scheduler_attempts_total` means
//! exactly what a cluster's does. Names that were renamed stay for one release as
//! deprecated aliases ([`DEPRECATED_ALIASES`]): views of the renamed family, never counted
//! on their own. This crate does no I/O: exposing a registry is its owner's business.

mod alias;
mod execution;
pub mod families;
mod label;
pub mod names;

pub use execution::ExecutionMetrics;
pub use label::{deprecated_outcome, metric_outcome, BoundedLabel};
pub use names::*;
