//! The `http` section: the target the `http` handler POSTs to.
//!
//! The URL and header values are the places a spec carries secrets (tokens, basic auth), and
//! ax shows them masked as `***`. A spec read back from ax and stored again would then hold
//! the mask instead of the secret, so a masked value is refused here rather than sent.
//! Both may name secrets instead (`${secret:NAME}`, see [`crate::secret_ref`]): their
//! syntax is checked here, and a URL is checked with each reference standing for a plain
//! word, unless it starts with one (its scheme and host are then only known at run time).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::checker::{field, join, kind, Checker};
use crate::redact::holds_mask;
use crate::secret_ref;
use crate::task::{
    is_reserved_http_header, HttpTarget, MAX_HTTP_HEADERS, MAX_HTTP_HEADER_BYTES, MAX_URL_BYTES,
};

const HTTP_FIELDS: &[&str] = &["url", "headers", "follow_redirects", "async"];

/// Why a spec holding `***` in a secret is refused.
pub(super) const MASKED_SECRET: &str =
    "holds `***`, a secret masked as ax shows it: give the real \
     value (an admin sees it with `ax task get --show-secrets`)";

/// The top-level `http`, which the `http` handler needs and no other handler reads.
pub(super) fn read_http(
    c: &mut Checker,
    obj: &Map<String, Value>,
    handler: Option<&str>,
) -> Option<HttpTarget> {
    let http = field(obj, "http").and_then(|v| parse_http(c, v));
    match (handler, field(obj, "http")) {
        (Some("http"), None) => c.err(
            "http.url",
            "missing; the http handler needs {\"http\": {\"url\": \"https://...\"}}",
        ),
        (Some(h), Some(_)) if h != "http" => c.err(
            "http",
            format!("is only read by the `http` handler, not `{h}`; remove it"),
        ),
        _ => {}
    }
    http
}

fn parse_http(c: &mut Checker, v: &Value) -> Option<HttpTarget> {
    let Value::Object(obj) = v else {
        c.err(
            "http",
            format!(
                "must be an object like {{\"url\": \"https://...\"}}, found {}",
                kind(v)
            ),
        );
        return None;
    };
    c.unknown_fields(obj, "http", HTTP_FIELDS);
    let url = match field(obj, "url") {
        None => {
            c.err(
                "http.url",
                "missing; give the http(s) URL that receives the POST",
            );
            None
        }
        Some(u) => c
            .string(u, "http.url")
            .and_then(|u| match check_url_with_refs(&u) {
                Ok(()) => Some(u),
                Err(e) => {
                    c.err("http.url", e);
                    None
                }
            }),
    };
    if let Some(u) = &url {
        if u.len() > MAX_URL_BYTES {
            c.err(
                "http.url",
                format!(
                    "is {} bytes long; at most {MAX_URL_BYTES} are allowed",
                    u.len()
                ),
            );
        } else if holds_mask(u) {
            c.err("http.url", MASKED_SECRET.to_owned());
        }
    }
    let headers =
        field(obj, "headers").map_or(Some(BTreeMap::new()), |h| c.string_map(h, "http.headers"));
    if let Some(headers) = &headers {
        check_headers(c, headers);
    }
    let follow_redirects =
        field(obj, "follow_redirects").map_or(Some(false), |v| c.bool(v, "http.follow_redirects"));
    let await_completion = field(obj, "async").map_or(Some(false), |v| c.bool(v, "http.async"));
    Some(HttpTarget {
        url: url?,
        headers: headers?,
        follow_redirects: follow_redirects?,
        await_completion: await_completion?,
    })
}

/// Header count and sizes, and no masked value.
fn check_headers(c: &mut Checker, headers: &BTreeMap<String, String>) {
    if headers.len() > MAX_HTTP_HEADERS {
        c.err(
            "http.headers",
            format!(
                "has {} headers; at most {MAX_HTTP_HEADERS} are allowed",
                headers.len()
            ),
        );
    }
    for (k, v) in headers {
        let path = join("http.headers", k);
        if is_reserved_http_header(k) {
            c.err(
                &path,
                "is set by ax or by the HTTP client itself (Host, Content-Length, Transfer-Encoding, Connection, TE, Upgrade, X-Ax-*); a task may not set it",
            );
        } else if k.is_empty() || !k.bytes().all(is_token_byte) {
            c.err(
                &path,
                "is not a header name: letters, digits and !#$%&'*+-.^_`|~ only",
            );
        } else if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            c.err(
                &path,
                "has a line break or NUL byte; a header value is one line",
            );
        } else if k.len() + v.len() > MAX_HTTP_HEADER_BYTES {
            c.err(
                &path,
                format!(
                    "is {} bytes with its name; at most {MAX_HTTP_HEADER_BYTES} are allowed",
                    k.len() + v.len()
                ),
            );
        } else if holds_mask(v) {
            c.err(&path, MASKED_SECRET.to_owned());
        } else if let Err(e) = secret_ref::pieces(v) {
            c.err(&path, e);
        }
    }
}

/// A byte of an RFC 9110 token (a header name).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// [`check_url`] for a URL that may name secrets.
fn check_url_with_refs(url: &str) -> Result<(), String> {
    if !secret_ref::has_references(url) {
        return check_url(url);
    }
    let plain = secret_ref::substitute(url, "secret")?;
    if url.starts_with(secret_ref::OPEN) {
        return Ok(());
    }
    check_url(&plain).map_err(|e| {
        e.replace(
            &crate::redact::mask_url(&plain),
            &crate::redact::mask_url(url),
        )
    })
}

/// An `http://` or `https://` URL with a host, read by the parser the `http` handler sends
/// with, so the host checked and shown is the one a request goes to.
fn check_url(url: &str) -> Result<(), String> {
    // Errors quote the URL as ax shows URLs everywhere: without credentials or query values.
    let shown = crate::redact::mask_url(url);
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!("`{shown}` must start with http:// or https://"));
    }
    // The parser drops tabs and newlines silently; a URL holding them is a mistake.
    if url.chars().any(char::is_whitespace) {
        return Err(format!("`{shown}` contains whitespace"));
    }
    let parsed = url::Url::parse(url).map_err(|e| format!("`{shown}` is not a valid URL: {e}"))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{shown}` has no host"));
    }
    Ok(())
}
