//! The check of this host's clock against etcd's, which the scheduler role runs before it
//! schedules (the `ax` binary hands it to the scheduler role as its clock probe) and `ax
//! status` shows.
//!
//! The clock check talks HTTP to etcd's client port, beside the gRPC client, so it needs the
//! same TLS settings. It asks the members in the order of `etcd.endpoints` and takes the first
//! answer, each member under `CHECK_TIMEOUT` (1 s): a dead or hung first member delays the check
//! by at most that, and does not make it fail while another member answers. Its TLS:
//! [`ClockCheck`] is built from the same [`EtcdTls`] as the etcd client (the CA alone, never the built-in web roots, and the client certificate for
//! `--client-cert-auth`). A check that fails says why and which setting to look at; the
//! caller decides what a failed check means.

use std::time::Duration;

use ax_scheduler_core::error::error_chain;
use ax_scheduler_core::UtcMillis;

use crate::connect::{tls_hint, EtcdTls};
use crate::endpoints::endpoint_url;
use crate::error::ControlError;

/// Limit on asking one member, connection included.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Compares this host's clock with the first etcd member's that answers. Cheap to clone (one
/// shared HTTP client, built once with etcd's TLS settings).
#[derive(Clone, Debug)]
pub struct ClockCheck {
    client: reqwest::Client,
    urls: Vec<String>,
    tls: bool,
}

impl ClockCheck {
    /// A check against `endpoints` (`etcd.endpoints`, at least one), over TLS with `tls`
    /// when given. A bare `host:port` gets the scheme the etcd client gives it: `https://`
    /// with TLS, else `http://`.
    pub fn new(endpoints: &[String], tls: Option<&EtcdTls>) -> Result<ClockCheck, ControlError> {
        if endpoints.is_empty() {
            return Err(ControlError::Config(
                "no etcd endpoint to check the clock against (etcd.endpoints)".into(),
            ));
        }
        let urls = endpoints
            .iter()
            .map(|e| {
                format!(
                    "{}/version",
                    endpoint_url(e, tls.is_some()).trim_end_matches('/')
                )
            })
            .collect();
        let mut builder = reqwest::Client::builder().timeout(CHECK_TIMEOUT);
        if let Some(tls) = tls {
            let roots = reqwest::Certificate::from_pem_bundle(&tls.ca).map_err(|e| {
                ControlError::Config(format!("etcd.ca_file is not a PEM certificate bundle: {e}"))
            })?;
            if roots.is_empty() {
                return Err(ControlError::Config(
                    "etcd.ca_file holds no PEM certificate".into(),
                ));
            }
            // Like the etcd client: the configured CA only.
            builder = builder.tls_built_in_root_certs(false);
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
            if let Some(id) = &tls.identity {
                let mut pem = id.cert.clone();
                pem.push(b'\n');
                pem.extend_from_slice(&id.key);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    ControlError::Config(format!(
                        "etcd.cert_file and etcd.key_file are not a PEM certificate and key: {e}"
                    ))
                })?;
                builder = builder.identity(identity);
            }
        }
        let client = builder.build().map_err(|e| {
            ControlError::Config(format!(
                "cannot build the HTTP client for the clock check: {}",
                error_chain(&e)
            ))
        })?;
        Ok(ClockCheck {
            client,
            urls,
            tls: tls.is_some(),
        })
    }

    /// How far this host's clock is ahead of etcd's (negative: behind), in seconds.
    ///
    /// etcd has no time API, but its HTTP listener stamps every response with a `Date`
    /// header from its host's clock. The header has whole seconds, so the estimate takes the
    /// middle of that second and of the request's round trip: good to about half a second
    /// plus half the round trip, enough for a threshold of seconds.
    pub async fn skew(&self) -> Result<f64, ControlError> {
        self.skew_of(&UtcMillis::now).await
    }

    /// How far the clock `now` reads is ahead of etcd's (negative: behind), in seconds: a
    /// clock of the caller's own (the scheduler's, which absorbs steps back) rather than
    /// the host's, as [`ClockCheck::skew`] measures.
    pub async fn skew_of(
        &self,
        now: &(dyn Fn() -> UtcMillis + Send + Sync),
    ) -> Result<f64, ControlError> {
        let mut failure = None;
        for url in &self.urls {
            match self.skew_at(url, now).await {
                Ok(skew) => return Ok(skew),
                Err(e) => failure = Some(e),
            }
        }
        // `new` refuses an empty list, so a failure was recorded.
        Err(failure.unwrap_or_else(|| ControlError::Config("no etcd endpoint".into())))
    }

    async fn skew_at(
        &self,
        url: &str,
        now: &(dyn Fn() -> UtcMillis + Send + Sync),
    ) -> Result<f64, ControlError> {
        let before = now();
        let response = match self.client.get(url).send().await {
            Ok(response) => response,
            Err(e) => {
                let e = error_chain(&e);
                let hint = tls_hint(&e, "etcd", self.tls);
                return Err(ControlError::Connect(format!(
                    "cannot reach {url}{hint}: {e}"
                )));
            }
        };
        let after = now();
        let date = response
            .headers()
            .get(reqwest::header::DATE)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| ControlError::Connect("etcd's response has no Date header".into()))?;
        let remote = chrono::DateTime::parse_from_rfc2822(date).map_err(|e| {
            ControlError::Connect(format!("cannot read etcd's Date header `{date}`: {e}"))
        })?;
        let remote_mid_ms = remote.timestamp_millis() + 500;
        let local_mid_ms = (before.0 + after.0) / 2;
        Ok((local_mid_ms - remote_mid_ms) as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for etcd's `/version` whose `Date` header is `offset_secs` off this host.
    async fn fake_etcd(offset_secs: i64) -> String {
        let app = axum::Router::new().route(
            "/version",
            axum::routing::get(move || async move {
                let at = chrono::Utc::now() + chrono::Duration::seconds(offset_secs);
                (
                    [(
                        reqwest::header::DATE,
                        at.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
                    )],
                    "{}",
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    async fn skew_against(endpoint: &str) -> Result<f64, ControlError> {
        ClockCheck::new(&[endpoint.to_owned()], None)?.skew().await
    }

    #[tokio::test]
    async fn skew_is_read_from_etcds_date_header() {
        let behind = skew_against(&fake_etcd(-30).await).await.unwrap();
        assert!((29.0..=31.0).contains(&behind), "{behind}");
        let same = skew_against(&fake_etcd(0).await).await.unwrap();
        assert!(same.abs() <= 1.0, "{same}");
        assert!(skew_against("http://127.0.0.1:1").await.is_err());
        // A bare host:port, as etcd.endpoints allows, is checked over http without TLS.
        let bare = fake_etcd(0).await.replace("http://", "");
        assert!(skew_against(&bare).await.unwrap().abs() <= 1.0);
    }

    #[tokio::test]
    async fn a_dead_or_hung_first_member_leaves_the_check_to_the_next() {
        let dead = format!("http://127.0.0.1:{}", ax_testkit::free_port());
        // Accepts connections and never answers, as a stopped process's kernel does.
        let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hung_url = format!("http://{}", hung.local_addr().unwrap());
        let live = fake_etcd(0).await;
        let check = ClockCheck::new(&[dead, hung_url, live], None).unwrap();
        let skew = check.skew().await.unwrap();
        assert!(skew.abs() <= 1.0, "{skew}");
        drop(hung);
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let tls = EtcdTls {
            ca: b"not PEM".to_vec(),
            identity: None,
        };
        let e = ClockCheck::new(&["https://etcd:2379".to_owned()], Some(&tls)).unwrap_err();
        assert!(e.to_string().contains("etcd.ca_file"), "{e}");
    }
}
