//! Turning the configuration into connected etcd and Redis clients, and into the settings of
//! the libraries that use them.
//!
//! etcd-client connects lazily: `Client::connect` returns before any byte has crossed the
//! network (unless a user is configured), and the first request would then fail with a
//! transport error that does not say which endpoint was meant. So [`connect_etcd`] makes one
//! cheap read under the configured timeout and reports an unreachable cluster by its
//! endpoints. TLS is rustls; a CA bundle is required for `https://` endpoints because no
//! system roots are built in (etcd clusters are almost always signed by a private CA).

use std::time::Duration;

use anyhow::{bail, Context};
use ax_election::ElectionConfig;
use ax_queue::{Queue, QueueConfig};
use ax_registry::RegistryConfig;
use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};

use crate::config::Config;

/// HTTP/2 keep-alive ping interval on etcd connections: a dead peer (or a NAT that dropped
/// the flow) is noticed within interval + timeout instead of at the next request.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Connects to the configured etcd cluster (endpoints, user and password, TLS) and checks it
/// answers within `etcd.timeout`; the error names the endpoints when it does not.
pub async fn connect_etcd(config: &Config) -> anyhow::Result<Client> {
    let etcd = &config.etcd;
    let endpoints = etcd.endpoints.join(",");
    let mut options = ConnectOptions::new()
        .with_connect_timeout(etcd.timeout)
        .with_keep_alive(KEEP_ALIVE_INTERVAL, etcd.timeout)
        .with_keep_alive_while_idle(true);
    if !etcd.username.is_empty() {
        options = options.with_user(etcd.username.clone(), etcd.password.clone());
    }
    if let Some(tls) = tls_options(config)? {
        options = options.with_tls(tls);
    }
    // With a user, `connect` authenticates, which is a request: bound it too.
    let client = match tokio::time::timeout(
        etcd.timeout,
        Client::connect(&etcd.endpoints, Some(options)),
    )
    .await
    {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => bail!("cannot connect to etcd at {endpoints} (etcd.endpoints): {e}"),
        Err(_) => bail!(
            "etcd at {endpoints} (etcd.endpoints) did not answer within {} (etcd.timeout)",
            humantime::format_duration(etcd.timeout)
        ),
    };
    // A count-only read of the leader key: cheap, and it exercises the connection, the
    // authentication token and read permission on the prefix.
    let mut kv = client.kv_client();
    let probe = kv.get(
        ax_scheduler_core::etcd_keys::leader(&config.etcd.prefix),
        Some(GetOptions::new().with_count_only()),
    );
    match tokio::time::timeout(etcd.timeout, probe).await {
        Ok(Ok(_)) => Ok(client),
        Ok(Err(e)) => bail!("cannot reach etcd at {endpoints} (etcd.endpoints): {e}"),
        Err(_) => bail!(
            "etcd at {endpoints} (etcd.endpoints) did not answer within {} (etcd.timeout)",
            humantime::format_duration(etcd.timeout)
        ),
    }
}

/// The TLS settings for etcd: `None` without `etcd.ca_file`.
fn tls_options(config: &Config) -> anyhow::Result<Option<TlsOptions>> {
    let etcd = &config.etcd;
    if etcd.ca_file.is_empty() {
        if let Some(e) = etcd.endpoints.iter().find(|e| e.starts_with("https://")) {
            bail!(
                "etcd endpoint {e} uses https:// but etcd.ca_file is not set: give the CA \
                 bundle that signed the etcd server certificate"
            );
        }
        return Ok(None);
    }
    if let Some(e) = etcd.endpoints.iter().find(|e| e.starts_with("http://")) {
        bail!("etcd.ca_file is set, so connections use TLS, but endpoint {e} is http://: use https://");
    }
    let ca = std::fs::read(&etcd.ca_file)
        .with_context(|| format!("cannot read etcd.ca_file {}", etcd.ca_file))?;
    let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
    if !etcd.cert_file.is_empty() {
        let cert = std::fs::read(&etcd.cert_file)
            .with_context(|| format!("cannot read etcd.cert_file {}", etcd.cert_file))?;
        let key = std::fs::read(&etcd.key_file)
            .with_context(|| format!("cannot read etcd.key_file {}", etcd.key_file))?;
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(Some(tls))
}

/// Connects the Redis queue client (`redis.url` with `redis.password`, `redis.key_prefix`).
pub async fn connect_queue(config: &Config) -> anyhow::Result<Queue> {
    let shown = config.masked().redis.url;
    Queue::connect(&config.redis_connection_url(), queue_config(config))
        .await
        .with_context(|| format!("cannot connect to Redis at {shown} (redis.url)"))
}

/// The registry settings of `config`.
pub fn registry_config(config: &Config) -> RegistryConfig {
    RegistryConfig {
        prefix: config.etcd.prefix.clone(),
        request_timeout: config.etcd.timeout,
        ..RegistryConfig::default()
    }
}

/// The election settings of `config`.
pub fn election_config(config: &Config) -> ElectionConfig {
    ElectionConfig {
        prefix: config.etcd.prefix.clone(),
        ttl: config.election.lease_ttl,
        request_timeout: config.etcd.timeout,
    }
}

/// The queue client settings of `config`.
pub fn queue_config(config: &Config) -> QueueConfig {
    QueueConfig {
        prefix: config.redis.key_prefix.clone(),
        history_cap: config.redis.history_cap,
        history_retention: config.redis.history_retention,
        dlq_retention: config.redis.dlq_retention,
        dlq_max_entries: config.redis.dlq_max_entries,
        ..QueueConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_needs_a_ca_and_a_ca_needs_https() {
        let mut c = Config::default();
        c.etcd.endpoints = vec!["https://etcd:2379".into()];
        let e = tls_options(&c).unwrap_err().to_string();
        assert!(e.contains("etcd.ca_file is not set"), "{e}");

        c.etcd.endpoints = vec!["http://etcd:2379".into()];
        c.etcd.ca_file = "/nonexistent/ca.pem".into();
        let e = tls_options(&c).unwrap_err().to_string();
        assert!(e.contains("is http://"), "{e}");

        c.etcd.endpoints = vec!["https://etcd:2379".into()];
        let e = format!("{:#}", tls_options(&c).unwrap_err());
        assert!(e.contains("cannot read etcd.ca_file"), "{e}");

        c.etcd.ca_file.clear();
        c.etcd.endpoints = vec!["http://etcd:2379".into()];
        assert!(tls_options(&c).unwrap().is_none());
    }

    #[tokio::test]
    async fn an_unreachable_cluster_is_named_in_the_error() {
        let mut c = Config::default();
        let port = ax_testkit::free_port();
        c.etcd.endpoints = vec![format!("http://127.0.0.1:{port}")];
        c.etcd.timeout = Duration::from_secs(2);
        let Err(e) = connect_etcd(&c).await else {
            panic!("connected to nothing")
        };
        let e = format!("{e:#}");
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
        assert!(e.contains("etcd.endpoints"), "{e}");
    }
}
