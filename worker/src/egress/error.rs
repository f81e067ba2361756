//! The egress guard's error: why the `http` handler does not call a URL, or why an egress
//! setting cannot be used.
//!
//! It lives with the guard rather than with the pool's error because it names the guard's
//! address ranges, and it travels on its own: a refusal made inside reqwest's resolver comes
//! back wrapped in reqwest's error, and the handler finds it there by type (see
//! [`super::EgressClient::refusal`]).

use std::net::IpAddr;

use super::NonPublic;

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
