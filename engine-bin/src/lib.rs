//! The `ax` binary's code, as a library so that integration tests reach every part.
//!
//! `main.rs` only reads the edge (environment, host name), parses the command line and calls
//! [`commands::run`]. The layout follows what a replica is made of: configuration
//! ([`config`]), the API as data and one trait, free of any transport ([`api`], [`audit`]),
//! command line ([`cli`], [`commands`], [`output`]), the etcd and Redis clients ([`connect`],
//! [`endpoints`]) and the backend behind the CLI and the API ([`backend`]), observability
//! ([`logging`], [`metrics`], [`readiness`]), the HTTP port ([`http`]), process lifetime
//! ([`shutdown`], [`hardening`]) and the server that ties them together ([`serve`]), which composes the
//! scheduler role ([`ax_scheduler`]) through [`scheduler_role`] and the clock check
//! ([`clock_check`]), and the worker role ([`ax_worker`]) through [`worker_role`].

pub mod cli;
pub mod commands;
pub mod config;
pub mod edge;
pub mod hardening;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod output;
pub mod readiness;
pub mod scheduler_role;
pub mod serve;
pub mod shutdown;
pub mod task_file;
pub mod worker_role;
