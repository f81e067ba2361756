//! The `ax` binary's code, as a library so that integration tests reach every part.
//!
//! `main.rs` only reads the edge (environment, host name), parses the command line and calls
//! [`cli::commands::run`]. The binary assembles; the operations it runs are
//! [`ax_control`]'s. Four layers, a folder each: the command line ([`cli`]: parse, call an
//! operation, print), the replica's process and roles ([`serve`]), the HTTP port ([`http`]:
//! extract, call an operation, answer; authentication, limits, browser checks, the console)
//! and the replica's configuration ([`config`]: the cluster's sections of
//! [`ax_control::ClusterConfig`] and its own).

pub mod cli;
pub mod config;
pub mod http;
pub mod serve;
