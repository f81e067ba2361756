//! Turning the configuration into connected etcd and Redis clients, and into the settings of
//! the libraries that use them.
//!
//! etcd-client connects lazily: `Client::connect` returns before any byte has crossed the
//! network (unless a user is configured), and the first request would then fail with a
//! transport error that does not say which endpoint was meant. So [`connect_etcd`] makes one
//! cheap read under the configured timeout and reports an unreachable cluster by its
//! endpoints. TLS is rustls; a CA bundle is required for `https://` endpoints because no
//! system roots are built in (etcd clusters are almost always signed by a private CA).
//!
//! Redis with `rediss://` trusts the system's roots unless `redis.ca_file` names a CA. The
//! certificate files of both backends are read here, at each connect, and handed to the
//! libraries as bytes: the libraries never read files, and a replica that reconnects picks
//! up renewed certificates. A failed TLS handshake is reported with the setting to look at,
//! since the TLS library's words ("UnknownIssuer") do not name one.
//!
//! Everything that talks to etcd or Redis connects through here (the API backend, the
//! server's roles, the clock check, the SDK), so this module depends on the configuration
//! alone.

use std::sync::Arc;
use std::time::Duration;

use ax_election::ElectionConfig;
use ax_queue::{ClientIdentity, Queue, RedisTls};
use ax_registry::RegistryConfig;
use ax_scheduler_core::redact::mask_url_password;
use ax_scheduler_core::Clock;
use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};

use crate::config::ClusterConfig;
use crate::error::ControlError;

/// HTTP/2 keep-alive ping interval on etcd connections: a dead peer (or a NAT that dropped
/// the flow) is noticed within interval + timeout instead of at the next request.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Connects to the configured etcd cluster (endpoints, user and password, TLS) and checks it
/// answers within `etcd.timeout`; the error names the endpoints when it does not.
pub async fn connect_etcd(config: &ClusterConfig) -> Result<Client, ControlError> {
    let etcd = &config.etcd;
    let endpoints = etcd.endpoints.join(",");
    let options = etcd_connect_options(config)?;
    // With a user, `connect` authenticates, which is a request: bound it too.
    let client = match tokio::time::timeout(
        etcd.timeout,
        Client::connect(&etcd.endpoints, Some(options)),
    )
    .await
    {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => {
            return Err(ControlError::Connect(format!(
                "cannot connect to etcd at {endpoints} (etcd.endpoints): {e}{}",
                tls_hint(&format!("{e:?}"), "etcd", !etcd.ca_file.is_empty())
            )))
        }
        Err(_) => return Err(not_answered(&endpoints, etcd.timeout)),
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
        Ok(Err(e)) => Err(ControlError::Connect(format!(
            "cannot reach etcd at {endpoints} (etcd.endpoints): {e}{}",
            tls_hint(&format!("{e:?}"), "etcd", !etcd.ca_file.is_empty())
        ))),
        Err(_) => Err(not_answered(&endpoints, etcd.timeout)),
    }
}

fn not_answered(endpoints: &str, timeout: Duration) -> ControlError {
    ControlError::Connect(format!(
        "etcd at {endpoints} (etcd.endpoints) did not answer within {} (etcd.timeout)",
        humantime::format_duration(timeout)
    ))
}

/// The etcd client's settings from `[etcd]`: timeouts, HTTP/2 keep-alive, user, TLS. Every
/// etcd client of a replica (the shared one, the member probes) is made with these.
pub fn etcd_connect_options(config: &ClusterConfig) -> Result<ConnectOptions, ControlError> {
    let etcd = &config.etcd;
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
    Ok(options)
}

/// etcd's TLS material as PEM bytes, for every client that talks to etcd (the gRPC client,
/// the clock check over HTTP), so that they trust and present the same certificates.
#[derive(Clone)]
pub struct EtcdTls {
    /// `etcd.ca_file`.
    pub ca: Vec<u8>,
    /// `etcd.cert_file` and `etcd.key_file`, when set.
    pub identity: Option<ClientIdentity>,
}

/// Reads etcd's TLS files: `None` without `etcd.ca_file`. An `https://` endpoint needs the
/// CA (no system roots are used) and the CA needs `https://` endpoints.
pub fn etcd_tls(config: &ClusterConfig) -> Result<Option<EtcdTls>, ControlError> {
    let etcd = &config.etcd;
    if etcd.ca_file.is_empty() {
        if let Some(e) = etcd.endpoints.iter().find(|e| e.starts_with("https://")) {
            return Err(ControlError::Config(format!(
                "etcd endpoint {e} uses https:// but etcd.ca_file is not set: give the CA \
                 bundle that signed the etcd server certificate"
            )));
        }
        return Ok(None);
    }
    if let Some(e) = etcd.endpoints.iter().find(|e| e.starts_with("http://")) {
        return Err(ControlError::Config(format!(
            "etcd.ca_file is set, so connections use TLS, but endpoint {e} is http://: use https://"
        )));
    }
    Ok(Some(EtcdTls {
        ca: read_setting("etcd.ca_file", &etcd.ca_file)?,
        identity: identity("etcd", &etcd.cert_file, &etcd.key_file)?,
    }))
}

/// The TLS settings of the etcd client: `None` without `etcd.ca_file`.
fn tls_options(config: &ClusterConfig) -> Result<Option<TlsOptions>, ControlError> {
    Ok(etcd_tls(config)?.map(|tls| {
        let options = TlsOptions::new().ca_certificate(Certificate::from_pem(tls.ca));
        match tls.identity {
            Some(id) => options.identity(Identity::from_pem(id.cert, id.key)),
            None => options,
        }
    }))
}

/// Reads Redis's TLS files: `None` when neither `redis.ca_file` nor `redis.cert_file` is set
/// (a `rediss://` URL then trusts the system's roots).
pub fn redis_tls(config: &ClusterConfig) -> Result<Option<RedisTls>, ControlError> {
    let redis = &config.redis;
    if redis.ca_file.is_empty() && redis.cert_file.is_empty() {
        return Ok(None);
    }
    let ca = if redis.ca_file.is_empty() {
        None
    } else {
        Some(read_setting("redis.ca_file", &redis.ca_file)?)
    };
    Ok(Some(RedisTls {
        ca,
        client: identity("redis", &redis.cert_file, &redis.key_file)?,
    }))
}

/// The client certificate and key of `backend` (`etcd`, `redis`), when `cert_file` is set.
fn identity(
    backend: &str,
    cert_file: &str,
    key_file: &str,
) -> Result<Option<ClientIdentity>, ControlError> {
    if cert_file.is_empty() {
        return Ok(None);
    }
    Ok(Some(ClientIdentity {
        cert: read_setting(&format!("{backend}.cert_file"), cert_file)?,
        key: read_setting(&format!("{backend}.key_file"), key_file)?,
    }))
}

fn read_setting(key: &str, path: &str) -> Result<Vec<u8>, ControlError> {
    std::fs::read(path).map_err(|e| ControlError::Config(format!("cannot read {key} {path}: {e}")))
}

/// What to check after a TLS failure of `backend` (`etcd`, `redis`), as words to append to
/// the error; empty for other errors. `error` is the error with its causes (the `{:?}` of a
/// client error whose display alone hides the TLS cause).
pub(crate) fn tls_hint(error: &str, backend: &str, ca_set: bool) -> String {
    // rustls's words: the server's certificate did not verify, or the server sent an alert
    // about ours.
    if error.contains("invalid peer certificate") {
        if ca_set {
            format!(
                " (the server's certificate is not signed by the CA in {backend}.ca_file, or \
                 does not name this host: check {backend}.ca_file)"
            )
        } else {
            format!(
                " (the server's certificate is not signed by a CA this host trusts: set \
                 {backend}.ca_file to the CA that signed it)"
            )
        }
    } else if error.contains("CertificateRequired") {
        format!(
            " (the server asks for a client certificate: set {backend}.cert_file and \
             {backend}.key_file)"
        )
    } else if error.contains("BadCertificate") || error.contains("UnknownCA") {
        format!(
            " (the server refused this client's certificate, or wanted one: check \
             {backend}.cert_file and {backend}.key_file against the CA the server trusts)"
        )
    } else if ca_set
        && [
            "connection closed",
            "broken pipe",
            "BrokenPipe",
            "ConnectionReset",
        ]
        .iter()
        .any(|words| error.contains(words))
    {
        // Under TLS 1.3 a client learns only after its handshake that the server refused its
        // certificate (etcd's gRPC client sees no more than the connection closing, or, when
        // it wrote first, a broken pipe).
        format!(
            " (the server closed the TLS connection: if it asks for client certificates, \
             check {backend}.cert_file and {backend}.key_file)"
        )
    } else {
        String::new()
    }
}

/// Connects the Redis queue client (`redis.url`, or the cluster of `redis.cluster_nodes`,
/// with `redis.password`, `redis.key_prefix`, the TLS files), reading the wall clock
/// through `clock`: the one way ax connects to Redis.
pub async fn connect_queue(
    config: &ClusterConfig,
    clock: Arc<dyn Clock>,
) -> Result<Queue, ControlError> {
    let mut settings = config.queue_config();
    settings.tls = redis_tls(config)?;
    settings.clock = clock;
    let (connected, shown, key) = if config.redis.cluster_nodes.is_empty() {
        let connected = Queue::connect(&config.redis.connection_url(), settings).await;
        (connected, mask_url_password(&config.redis.url), "redis.url")
    } else {
        let connected = Queue::connect_cluster(&config.redis.cluster_urls(), settings).await;
        let nodes: Vec<String> = config
            .redis
            .cluster_nodes
            .iter()
            .map(|n| mask_url_password(n))
            .collect();
        let shown = format!("the cluster of {}", nodes.join(", "));
        (connected, shown, "redis.cluster_nodes")
    };
    match connected {
        Ok(queue) => Ok(queue),
        Err(e) => Err(ControlError::Connect(format!(
            "cannot connect to Redis at {shown} ({key}): {e}{}",
            tls_hint(&e.to_string(), "redis", !config.redis.ca_file.is_empty())
        ))),
    }
}

/// The registry settings of `config`.
pub fn registry_config(config: &ClusterConfig) -> RegistryConfig {
    RegistryConfig {
        prefix: config.etcd.prefix.clone(),
        request_timeout: config.etcd.timeout,
        ..RegistryConfig::default()
    }
}

/// The election settings of `config`.
pub fn election_config(config: &ClusterConfig) -> ElectionConfig {
    ElectionConfig {
        prefix: config.etcd.prefix.clone(),
        ttl: config.election.lease_ttl,
        request_timeout: config.etcd.timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_needs_a_ca_and_a_ca_needs_https() {
        let mut c = ClusterConfig::default();
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

    #[test]
    fn tls_files_are_read_and_named_when_missing() {
        let mut c = ClusterConfig::default();
        assert!(redis_tls(&c).unwrap().is_none());
        c.redis.url = "rediss://redis:6380".into();
        c.redis.ca_file = "/nonexistent/ca.pem".into();
        let e = format!("{:#}", redis_tls(&c).unwrap_err());
        assert!(
            e.contains("cannot read redis.ca_file /nonexistent/ca.pem"),
            "{e}"
        );

        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "CA").unwrap();
        c.redis.ca_file = ca.display().to_string();
        c.redis.cert_file = ca.display().to_string();
        c.redis.key_file = "/nonexistent/key.pem".into();
        let e = format!("{:#}", redis_tls(&c).unwrap_err());
        assert!(e.contains("cannot read redis.key_file"), "{e}");
        c.redis.key_file = ca.display().to_string();
        let tls = redis_tls(&c).unwrap().unwrap();
        assert_eq!(tls.ca.as_deref(), Some(&b"CA"[..]));
        assert!(tls.client.is_some());
    }

    #[test]
    fn tls_failures_name_the_setting_to_check() {
        let hint = tls_hint("invalid peer certificate: UnknownIssuer", "redis", false);
        assert!(hint.contains("set redis.ca_file"), "{hint}");
        let hint = tls_hint("invalid peer certificate: UnknownIssuer", "etcd", true);
        assert!(hint.contains("check etcd.ca_file"), "{hint}");
        let hint = tls_hint("received fatal alert: CertificateRequired", "redis", true);
        assert!(
            hint.contains("set redis.cert_file and redis.key_file"),
            "{hint}"
        );
        let hint = tls_hint("received fatal alert: UnknownCA", "redis", true);
        assert!(hint.contains("check redis.cert_file"), "{hint}");
        // The server closing a TLS 1.3 connection after the handshake, as gRPC words it.
        let closed = r#"transport error: hyper::Error(Io, Custom { kind: BrokenPipe, error: "stream closed because of a broken pipe" })"#;
        assert!(
            tls_hint(closed, "etcd", true).contains("check etcd.cert_file and etcd.key_file"),
            "{closed}"
        );
        assert!(
            tls_hint(closed, "etcd", false).is_empty(),
            "no TLS: no hint"
        );
        assert!(tls_hint("connection refused", "etcd", true).is_empty());
    }

    #[tokio::test]
    async fn an_unreachable_cluster_is_named_in_the_error() {
        let mut c = ClusterConfig::default();
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
