//! The worker's HTTP client, held to an [`EgressPolicy`] where connections are made.
//!
//! reqwest resolves every host name through [`GuardedResolver`], which keeps only the
//! addresses the policy allows (refusing with [`EgressError::Refused`] when none are left), and
//! its connector connects to exactly the addresses the resolver returned: the addresses
//! checked are the ones connected to, so a name that resolves differently between a check
//! and the connect (DNS rebinding) cannot slip through. A URL that names an address skips the
//! resolver, so [`EgressClient::check_url`] checks it (and the scheme) before a request goes
//! out. Proxies are off: through a proxy the proxy resolves and connects, and the guard
//! would see the proxy's address instead of the target's. Redirects are off too: following
//! one is a new request the caller makes through this same client (checked again), choosing
//! which headers go along.

use std::error::Error as StdError;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

use super::{EgressError, EgressPolicy};
use crate::error::WorkerError;

/// A `reqwest::Client` that calls only what its [`EgressPolicy`] allows and follows no
/// redirects. Cheap to clone (the connection pool is shared).
#[derive(Clone, Debug)]
pub struct EgressClient {
    client: reqwest::Client,
    policy: Arc<EgressPolicy>,
}

impl EgressClient {
    /// A client held to `policy`.
    pub fn new(policy: EgressPolicy) -> Result<Self, WorkerError> {
        let policy = Arc::new(policy);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver {
                policy: Arc::clone(&policy),
            }))
            .build()
            .map_err(WorkerError::HttpClient)?;
        Ok(EgressClient { client, policy })
    }

    /// The client, for building requests. Requests to host names are guarded by it;
    /// pass the URL of every request through [`EgressClient::check_url`] first, since one
    /// that names an address is not resolved.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The policy.
    pub fn policy(&self) -> &EgressPolicy {
        &self.policy
    }

    /// `Ok` when `url` may be requested as far as can be told before resolving: an `http` or
    /// `https` URL whose host, if it is an address, is allowed.
    pub fn check_url(&self, url: &Url) -> Result<(), EgressError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(EgressError::Scheme {
                scheme: url.scheme().to_owned(),
            });
        }
        // The URL parser writes every address form as the plain address (`0x7f.1` is
        // `127.0.0.1`), which is also what the connector recognises and connects to unresolved.
        let Some(host) = url.host_str() else {
            return Ok(());
        };
        let Ok(addr) = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        else {
            return Ok(());
        };
        self.policy
            .check_addr(addr)
            .map_err(|why| EgressError::Refused {
                host: host.to_owned(),
                addr,
                why,
            })
    }

    /// The refusal inside a failed request's error, if the guard refused it.
    pub fn refusal(err: &reqwest::Error) -> Option<&EgressError> {
        let mut next: Option<&(dyn StdError + 'static)> = Some(err);
        while let Some(e) = next {
            if let Some(refusal) = e.downcast_ref::<EgressError>() {
                return Some(refusal);
            }
            next = e.source();
        }
        None
    }
}

impl EgressPolicy {
    /// What the connector may connect to of the addresses `host` resolved to: all of them
    /// when a host pattern allows `host`, else the allowed ones, refusing when none is left.
    pub fn admit(
        &self,
        host: &str,
        addrs: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, EgressError> {
        let addrs = addrs.into_iter();
        if self.allows_host(host) {
            return Ok(addrs.collect());
        }
        let mut refused = None;
        let kept: Vec<SocketAddr> = addrs
            .filter(|a| match self.check_addr(a.ip()) {
                Ok(()) => true,
                Err(why) => {
                    refused.get_or_insert((a.ip(), why));
                    false
                }
            })
            .collect();
        match refused {
            Some((addr, why)) if kept.is_empty() => Err(EgressError::Refused {
                host: host.to_owned(),
                addr,
                why,
            }),
            _ => Ok(kept),
        }
    }
}

/// Resolves with the system resolver, then keeps what the policy admits.
#[derive(Debug)]
struct GuardedResolver {
    policy: Arc<EgressPolicy>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts in the URL's port. No timeout here: the request's own
            // (the attempt's) bounds the lookup with the rest of the request.
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let admitted = policy.admit(&host, found)?;
            Ok(Box::new(admitted.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(url: &str) -> Result<(), EgressError> {
        let client = EgressClient::new(EgressPolicy::default()).unwrap();
        client.check_url(&Url::parse(url).unwrap())
    }

    #[test]
    fn only_http_and_https_are_called() {
        for url in [
            "ftp://example.com/x",
            "file:///etc/passwd",
            "gopher://example.com/",
        ] {
            assert!(
                matches!(check(url), Err(EgressError::Scheme { .. })),
                "{url}"
            );
        }
        assert_eq!(check("https://example.com/x"), Ok(()));
    }

    #[test]
    fn every_spelling_of_an_address_in_a_url_is_checked() {
        for url in [
            "http://127.0.0.1/",
            "http://0x7f.1/",
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://[::1]/",
            "http://[::ffff:7f00:1]/",
            "http://[0:0:0:0:0:ffff:127.0.0.1]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[fd00:ec2::254]/",
            "http://100.100.100.200/",
            "https://u:p@10.0.0.1:8443/x",
        ] {
            assert!(
                matches!(check(url), Err(EgressError::Refused { .. })),
                "{url}: {:?}",
                check(url)
            );
        }
        // Names are left to the resolver.
        assert_eq!(check("http://localhost/"), Ok(()));
        assert_eq!(check("http://8.8.8.8/"), Ok(()));
    }
}
