//! Operating an ax cluster: the operations every front end shares, and their contract.
//!
//! The `ax` CLI, the HTTP API of every replica and the Rust SDK's client all operate a
//! cluster through the one trait of [`api`] ([`api::ApiBackend`]): put, get, list, pause,
//! resume, trigger, kill, backfill, history, dead letters, status and the audit log. Two
//! implementations stand behind it: [`backend::Backend`] over etcd and Redis, the one a
//! replica serves and the CLI uses, and [`http_client::HttpApi`] over a replica's `/api/v1`
//! with a token. Where the cluster is comes from a [`config::ClusterConfig`] (the
//! replica's configuration embeds its sections); [`connect`] turns it into clients, and
//! [`endpoints`] and [`clock_check`] keep watch on etcd's members and clock.
//!
//! Every change goes through [`operations::Operations`], which makes it for an
//! [`audit::Actor`] and writes its audit record, so each front end records the same change
//! the same way.
//!
//! Layout: the contract ([`api`], [`audit`]), the changes with their records
//! ([`operations`]), the implementations ([`backend`],
//! [`http_client`], [`late_api`] for a replica still connecting), the way in ([`config`],
//! [`connect`], [`endpoints`], [`clock_check`]) and this crate's errors ([`error`]).

pub mod api;
pub mod audit;
pub mod backend;
pub mod clock_check;
pub mod config;
pub mod connect;
pub mod endpoints;
pub mod error;
pub mod http_client;
pub mod late_api;
pub mod operations;

pub use config::ClusterConfig;
pub use error::ControlError;
