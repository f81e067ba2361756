//! The scheduler's clock edge: wall-clock targets as tokio deadlines, and the check of this
//! host's clock against etcd's.
//!
//! The scheduling core works on [`UtcMillis`] handed to it; the leader reads the wall clock
//! with [`UtcMillis::now`] and sleeps on tokio deadlines computed here.

use std::time::Duration;

use anyhow::Context;
use ax_scheduler_core::UtcMillis;
use tokio::time::Instant;

/// The tokio instant at which the wall clock will read `target` (now, if it is past).
pub fn instant_at(target: UtcMillis) -> Instant {
    let wait = target.since(UtcMillis::now());
    Instant::now() + wait
}

/// How far this host's clock is ahead of etcd's (negative: behind), in seconds.
///
/// etcd has no time API, but its HTTP listener stamps every response with a `Date` header
/// from its host's clock. The header has whole seconds, so the estimate takes the middle of
/// that second and of the request's round trip: good to about half a second plus half the
/// round trip, enough for a threshold of seconds.
pub async fn skew_against(endpoint: &str) -> anyhow::Result<f64> {
    let url = format!("{}/version", endpoint.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .context("cannot build the HTTP client for the clock check")?;
    let before = UtcMillis::now();
    let response = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    let after = UtcMillis::now();
    let date = response
        .headers()
        .get(reqwest::header::DATE)
        .and_then(|v| v.to_str().ok())
        .context("etcd's response has no Date header")?;
    let remote = chrono::DateTime::parse_from_rfc2822(date)
        .with_context(|| format!("cannot read etcd's Date header `{date}`"))?;
    let remote_mid_ms = remote.timestamp_millis() + 500;
    let local_mid_ms = (before.0 + after.0) / 2;
    Ok((local_mid_ms - remote_mid_ms) as f64 / 1000.0)
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

    #[tokio::test]
    async fn skew_is_read_from_etcds_date_header() {
        let behind = skew_against(&fake_etcd(-30).await).await.unwrap();
        assert!((29.0..=31.0).contains(&behind), "{behind}");
        let same = skew_against(&fake_etcd(0).await).await.unwrap();
        assert!(same.abs() <= 1.0, "{same}");
        assert!(skew_against("http://127.0.0.1:1").await.is_err());
    }

    #[test]
    fn instant_at_the_past_is_now() {
        let start = Instant::now();
        let at = instant_at(UtcMillis(0));
        assert!(at >= start && at <= Instant::now());
        let later = instant_at(UtcMillis::now().add(Duration::from_secs(10)));
        assert!(later >= start + Duration::from_secs(9));
    }
}
