//! What keeps other web pages out of `/api/v1`, whatever the API's tokens: checks on the
//! `Origin`, `Host` and `Content-Type` of every API request, before authorization.
//!
//! A browser lets any page it shows send some requests to any address, the developer's
//! loopback included: a "simple" request (a form post, a `text/plain` fetch) goes out
//! without asking the server first, and DNS rebinding makes a loopback server look like the
//! attacker's own origin. Tokens stop both (a page has none to send), and these checks stop
//! them again where tokens are absent (`http.insecure_open_api`) or leak into a browser:
//!
//! - **Origin**: a request whose `Origin` header is neither the API's own origin (the
//!   request's `Host`, with the scheme a TLS proxy announces in `X-Forwarded-Proto`), nor
//!   `http.public_url`'s, nor in `http.allowed_origins` is refused `403 cross_origin`. A
//!   request without `Origin` comes from no web page (curl, the CLI, a job) or from the
//!   API's own page reading.
//! - **Host**: on a loopback-only listener, and on any listener whose API admits callers
//!   without a token (`http.insecure_open_api`), the `Host` must be an address, a loopback
//!   name (`localhost`), `http.public_url`'s host or in `http.allowed_hosts`, else
//!   `421 unknown_host`: a page whose name was rebound to the replica's address sends its
//!   own name, and without a token nothing else would stop it.
//! - **Content-Type**: a request body must be declared `application/json`, and a request
//!   that is not a `GET` or `HEAD` may declare no other type, else
//!   `415 unsupported_media_type`: the only bodies a page may send without the server's
//!   consent (a preflight, which this API never grants) are form and text types.
//!
//! Each refusal is counted in `scheduler_api_auth_failures_total` under its reason.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::Response;

use super::auth::refused;
use crate::config::origin::{host_name, normal_host, normal_origin};
use crate::http::metrics::Metrics;
use ax_control::api::ApiError;

/// The one media type a request body may have.
const JSON: &str = "application/json";

/// The origins and hosts one replica's API answers, built once from the configuration.
#[derive(Clone, Debug, Default)]
pub struct BrowserGuard {
    /// Normal origins besides the request's own: `http.allowed_origins` and
    /// `http.public_url`'s.
    origins: Vec<String>,
    /// Normal `http.allowed_hosts`; a host without a port matches any port.
    hosts: Vec<String>,
    /// Whether the listener is loopback-only, where the `Host` is checked.
    loopback: bool,
    /// Whether the API admits callers without a token, where the `Host` is checked too.
    anonymous: bool,
    /// `http.public_url`'s host, normal.
    public_host: Option<String>,
}

impl BrowserGuard {
    /// A guard from the settings (validated; an entry that does not parse matches nothing).
    pub fn new(
        allowed_origins: &[String],
        public_url: &str,
        allowed_hosts: &[String],
        listen: &str,
    ) -> Self {
        let public = public_url
            .split_once("://")
            .map(|(scheme, rest)| format!("{scheme}://{}", rest.split('/').next().unwrap_or("")));
        BrowserGuard {
            origins: allowed_origins
                .iter()
                .map(String::as_str)
                .chain(public.as_deref())
                .filter_map(|o| normal_origin(o).ok())
                .collect(),
            hosts: allowed_hosts
                .iter()
                .filter_map(|h| normal_host(h).ok())
                .collect(),
            loopback: is_loopback_listen(listen),
            anonymous: false,
            public_host: public
                .as_deref()
                .and_then(|p| p.split_once("://"))
                .and_then(|(_, authority)| normal_host(authority).ok()),
        }
    }

    /// The same guard for an API that admits callers without a token (or not): then the
    /// `Host` is checked on every listener.
    pub fn admitting_anonymous(mut self, anonymous: bool) -> Self {
        self.anonymous = anonymous;
        self
    }

    /// The guard of `[http]`.
    pub fn from_config(http: &crate::config::Http) -> Self {
        BrowserGuard::new(
            &http.allowed_origins,
            &http.public_url,
            &http.allowed_hosts,
            &http.listen,
        )
    }

    /// Why `request` is refused, as the metric's reason and the answer, if it is.
    fn refusal(&self, request: &Request) -> Option<(&'static str, ApiError)> {
        let headers = request.headers();
        let host = request_host(request);
        if let Some(e) = self.host_error(host) {
            return Some(("unknown_host", e));
        }
        if let Some(e) = self.origin_error(headers, host) {
            return Some(("cross_origin", e));
        }
        media_type_error(request.method(), headers).map(|e| ("media_type", e))
    }

    fn host_error(&self, host: Option<&str>) -> Option<ApiError> {
        // Without a Host the request names no other server (browsers always send one).
        let host = host.filter(|_| self.loopback || self.anonymous)?;
        let normal = normal_host(host).ok();
        let known = normal.as_deref().is_some_and(|h| {
            let name = host_name(h);
            is_loopback_host(name)
                || self.hosts.iter().any(|a| a == h || a == name)
                // A rebound page sends its own name, never an address.
                || (self.anonymous && is_address(name))
                || (self.anonymous
                    && self
                        .public_host
                        .as_deref()
                        .is_some_and(|p| p == h || host_name(p) == name))
        });
        (!known).then(|| {
            let why = if self.loopback {
                "this replica listens on loopback only"
            } else {
                "this replica's API admits callers without a token (http.insecure_open_api)"
            };
            ApiError::UnknownHost(format!(
                "{why} and does not answer for the host `{host}`; a port-forward, tunnel or \
                 name under that name needs it in http.allowed_hosts"
            ))
        })
    }

    fn origin_error(&self, headers: &HeaderMap, host: Option<&str>) -> Option<ApiError> {
        let origin = headers.get(header::ORIGIN)?;
        let text = String::from_utf8_lossy(origin.as_bytes());
        let own = host.and_then(|h| normal_origin(&format!("{}://{h}", own_scheme(headers))).ok());
        let allowed = normal_origin(&text)
            .ok()
            .is_some_and(|o| own.as_ref() == Some(&o) || self.origins.contains(&o));
        (!allowed).then(|| {
            ApiError::CrossOrigin(format!(
                "a web page of `{text}` may not call this API (its own origin is `{}`); list \
                 that origin in http.allowed_origins if its pages are meant to",
                own.as_deref().unwrap_or("unknown")
            ))
        })
    }
}

/// The host a request names: its `Host` header, or the URI's authority (HTTP/2).
fn request_host(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
}

/// The scheme the client used: `X-Forwarded-Proto` of a TLS proxy in front, else `http`
/// (the port serves plain HTTP). A page cannot set that header without a preflight.
fn own_scheme(headers: &HeaderMap) -> &str {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(str::trim)
        .filter(|v| v.eq_ignore_ascii_case("https") || v.eq_ignore_ascii_case("http"))
        .unwrap_or("http")
}

/// Whether `listen` (`host:port`) only accepts connections from this machine.
pub fn is_loopback_listen(listen: &str) -> bool {
    normal_host(listen).is_ok_and(|h| is_loopback_host(host_name(&h)))
}

/// Whether a normal host name (no port) names this machine's loopback.
fn is_loopback_host(name: &str) -> bool {
    if name == "localhost" {
        return true;
    }
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback());
    }
    name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a host name is an address (`10.0.0.5`, `[fd00::1]`): what a person types, never
/// what a rebound page sends.
fn is_address(name: &str) -> bool {
    let bare = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    bare.parse::<IpAddr>().is_ok()
}

/// Why a request's body or declared type is refused, if it is.
fn media_type_error(method: &Method, headers: &HeaderMap) -> Option<ApiError> {
    if method == Method::GET || method == Method::HEAD {
        return None;
    }
    let declared = headers.get(header::CONTENT_TYPE).map(|v| {
        let text = String::from_utf8_lossy(v.as_bytes()).into_owned();
        let essence = text
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        (text, essence)
    });
    match declared {
        Some((_, essence)) if essence == JSON => None,
        Some((text, _)) => Some(ApiError::UnsupportedMediaType(format!(
            "the request body is declared `{text}`; this API takes `Content-Type: {JSON}` only"
        ))),
        None if has_body(headers) => Some(ApiError::UnsupportedMediaType(format!(
            "the request has a body and no Content-Type; send it as `Content-Type: {JSON}`"
        ))),
        None => None,
    }
}

/// Whether the request announces a body.
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// What the middleware shares.
#[derive(Clone)]
pub struct BrowserState {
    /// The rules.
    pub guard: Arc<BrowserGuard>,
    /// Where refusals are counted.
    pub metrics: Arc<Metrics>,
}

/// Middleware: refuses a request from another web page, to a foreign host name or with a
/// body that is not JSON.
pub async fn check_request(
    State(state): State<BrowserState>,
    request: Request,
    next: Next,
) -> Response {
    let Some((reason, error)) = state.guard.refusal(&request) else {
        return next.run(request).await;
    };
    tracing::warn!(
        reason,
        method = %request.method(),
        path = request.uri().path(),
        origin = ?request.headers().get(header::ORIGIN),
        host = ?request_host(&request),
        "api request refused"
    );
    refused(&state.metrics, reason, error)
}

#[cfg(test)]
mod tests;
