//! The worker's error types: the pool's, and the `http` handler's egress guard's.
//!
//! Handler failures are not errors of the pool (they are outcomes, see `reporter.rs`); what is
//! left is configuration the pool cannot run with and queue errors it could not ride out.
//! [`EgressError`] travels on its own: a refusal made inside reqwest's resolver comes back
//! wrapped in reqwest's error, and the handler finds it there by type (see
//! [`crate::egress::EgressClient::refusal`]).

use std::net::IpAddr;

use ax_queue::QueueError;

use crate::egress::NonPublic;

/// Errors of the worker pool.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A setting cannot be used.
    #[error("invalid worker configuration: {0}")]
    InvalidConfig(String),
    /// Another live process works under this worker id: two processes under one id would
    /// take each other's messages for a dead worker's.
    #[error(
        "worker id `{worker_id}` is in use by a live process (its heartbeat on queue `{queue}` \
         advanced while this one waited): give each replica its own instance id"
    )]
    IdInUse {
        /// The worker id.
        worker_id: String,
        /// The queue whose heartbeat showed it.
        queue: String,
    },
    /// The HTTP client could not be built (its TLS set-up failed).
    #[error("cannot build the http handler's client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// A queue operation failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl WorkerError {
    /// Whether trying again later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            WorkerError::InvalidConfig(_)
            | WorkerError::IdInUse { .. }
            | WorkerError::HttpClient(_) => false,
            WorkerError::Queue(e) => e.is_retryable(),
        }
    }
}

/// Why the `http` handler does not call a URL, or why an egress setting cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// The target is, or resolves only to, addresses the policy refuses.
    #[error("{}", refused(host, addr, why))]
    Refused {
        /// The URL's host (a name, or the address itself).
        host: String,
        /// The address refused (the first, when a name resolved to several).
        addr: IpAddr,
        /// Its range.
        why: NonPublic,
    },
    /// The URL is not `http` or `https`.
    #[error("only http:// and https:// URLs are called, not {scheme}://")]
    Scheme {
        /// The URL's scheme.
        scheme: String,
    },
    /// An entry of `worker.http_allow_cidrs` is not an address block.
    #[error("`{cidr}` is not an address block (like `10.0.0.0/8`, `fd00::/8` or one address)")]
    Cidr {
        /// The entry.
        cidr: String,
    },
    /// An entry of `worker.http_allow_hosts` is not a host pattern.
    #[error("`{pattern}` {reason}")]
    HostPattern {
        /// The entry.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
}

fn refused(host: &str, addr: &IpAddr, why: &NonPublic) -> String {
    // A URL naming the address itself cannot be opened by a host pattern.
    if host.trim_matches(['[', ']']).parse::<IpAddr>().ok() == Some(*addr) {
        format!(
            "{addr} is {why}: the http handler calls only public addresses unless \
             worker.http_allow_cidrs lists the address"
        )
    } else {
        format!(
            "{host} resolves to {addr}, which is {why}: the http handler calls only public \
             addresses unless worker.http_allow_cidrs lists the address or \
             worker.http_allow_hosts the host"
        )
    }
}

/// Result alias of this crate.
pub type Result<T, E = WorkerError> = std::result::Result<T, E>;
