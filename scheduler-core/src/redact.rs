//! Redaction of secrets in what ax shows: URLs and header values.
//!
//! Task authors put credentials in URLs (`https://user:pw@host`, `?token=...`) and in HTTP
//! headers, and operators put them in webhook URLs. Anything ax writes where people or other
//! systems read it (logs, errors, `last_error`, history, alerts, API answers, a printed
//! configuration) goes through here first. URLs are taken apart by hand at the
//! `scheme://userinfo@host/path?query#fragment` level only: that is all masking needs, and a
//! malformed URL stays printable (validation reports it elsewhere).

/// What replaces a secret.
pub const MASK: &str = "***";

/// The parts of `scheme://user:password@host/rest`.
#[derive(Debug, PartialEq, Eq)]
pub struct UrlParts<'a> {
    /// Up to and including `://`.
    pub scheme: &'a str,
    /// The user name of the user info (empty without one).
    pub user: &'a str,
    /// The password of the user info, when it has a `:`.
    pub password: Option<&'a str>,
    /// Whether the URL has a user info part (`...@`).
    pub has_userinfo: bool,
    /// Host, port, path, query, fragment: everything after the user info.
    pub rest: &'a str,
}

/// Splits `url` at its user info; `None` when it has no `://`.
pub fn split_url(url: &str) -> Option<UrlParts<'_>> {
    let scheme_end = url.find("://")? + 3;
    let (scheme, after) = url.split_at(scheme_end);
    let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let authority = &after[..authority_end];
    Some(match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            UrlParts {
                scheme,
                user,
                password,
                has_userinfo: true,
                rest: &after[at + 1..],
            }
        }
        None => UrlParts {
            scheme,
            user: "",
            password: None,
            has_userinfo: false,
            rest: after,
        },
    })
}

/// `url` with its password (if any) replaced by [`MASK`], the user name kept: for
/// connection URLs an operator wrote, where the user is worth seeing.
pub fn mask_url_password(url: &str) -> String {
    match split_url(url) {
        Some(UrlParts {
            scheme,
            user,
            password: Some(p),
            rest,
            ..
        }) if !p.is_empty() => format!("{scheme}{user}:{MASK}@{rest}"),
        _ => url.to_owned(),
    }
}

/// `url` fit to show anywhere: the whole user info and every query value replaced by
/// [`MASK`] (query names kept, so a reader still sees which parameters were sent), and the
/// fragment dropped. Also masks the URLs inside a longer text, see [`mask_urls_in`].
pub fn mask_url(url: &str) -> String {
    let Some(parts) = split_url(url) else {
        return url.to_owned();
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.scheme);
    if parts.has_userinfo {
        out.push_str(MASK);
        out.push('@');
    }
    let rest = match parts.rest.find('#') {
        Some(i) => &parts.rest[..i],
        None => parts.rest,
    };
    match rest.split_once('?') {
        Some((before, query)) => {
            out.push_str(before);
            out.push('?');
            for (i, pair) in query.split('&').enumerate() {
                if i > 0 {
                    out.push('&');
                }
                match pair.split_once('=') {
                    Some((name, _)) => {
                        out.push_str(name);
                        out.push('=');
                        out.push_str(MASK);
                    }
                    // A bare `?token` may be the secret itself.
                    None if !pair.is_empty() => out.push_str(MASK),
                    None => {}
                }
            }
        }
        None => out.push_str(rest),
    }
    out
}

/// `text` with every `http://`, `https://`, `redis://` or `rediss://` URL in it passed through
/// [`mask_url`]: for error messages of libraries that quote the URL they failed on. A URL
/// ends at whitespace or at a quote or bracket that closes it.
pub fn mask_urls_in(text: &str) -> String {
    const SCHEMES: [&str; 4] = ["https://", "http://", "rediss://", "redis://"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let next = SCHEMES.iter().filter_map(|s| rest.find(s)).min();
        let Some(start) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let mut end = tail
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | ')' | ']' | '`')
            })
            .unwrap_or(tail.len());
        // Punctuation closing a sentence ("... failed for https://h/x: refused") is the
        // text's, not the URL's.
        while end > 0 && tail[..end].ends_with(['.', ',', ';', ':', '!', '?']) {
            end -= 1;
        }
        out.push_str(&mask_url(&tail[..end]));
        rest = &tail[end..];
    }
}

/// A header value fit to show: [`MASK`] for a non-empty value. Header values are masked
/// whatever their name, since people put credentials under any name (`X-Api-Key`,
/// `X-Auth`, ...).
pub fn mask_header_value(value: &str) -> &'static str {
    if value.is_empty() {
        ""
    } else {
        MASK
    }
}

/// A task spec (as JSON) fit to show: every `http.headers` value and the `http.url`'s
/// credentials and query values masked. Everything else in a spec is the author's plain
/// data. A spec sent back with these masks is refused by validation, so a copy taken from
/// the API cannot overwrite a secret with `***`.
pub fn mask_spec(spec: &mut serde_json::Value) {
    let Some(http) = spec.get_mut("http").and_then(|h| h.as_object_mut()) else {
        return;
    };
    if let Some(serde_json::Value::String(url)) = http.get_mut("url") {
        *url = mask_url(url);
    }
    if let Some(serde_json::Value::Object(headers)) = http.get_mut("headers") {
        for value in headers.values_mut() {
            if let serde_json::Value::String(v) = value {
                *v = mask_header_value(v).to_owned();
            }
        }
    }
}

/// Whether `value` holds a mask as [`mask_url`] or [`mask_header_value`] write it: what a
/// spec copied from a masked view carries in place of its secrets.
pub fn holds_mask(value: &str) -> bool {
    value.contains(MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_passwords_are_masked() {
        for (url, want) in [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
            ("rediss://user:s3cret@host/0", "rediss://user:***@host/0"),
            ("redis://user@host/0", "redis://user@host/0"),
            ("redis://u:p@ss@host/0", "redis://u:***@host/0"),
            ("https://h/x?token=a@b", "https://h/x?token=a@b"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(mask_url_password(url), want, "{url}");
        }
    }

    #[test]
    fn shown_urls_lose_user_info_query_values_and_fragment() {
        for (url, want) in [
            ("https://example.com/hook", "https://example.com/hook"),
            ("https://u:pw@example.com/x", "https://***@example.com/x"),
            ("https://tok@example.com/x", "https://***@example.com/x"),
            (
                "https://example.com/h?token=abc&x=1",
                "https://example.com/h?token=***&x=***",
            ),
            ("https://example.com/h?abc", "https://example.com/h?***"),
            (
                "https://example.com/h?a=1#frag",
                "https://example.com/h?a=***",
            ),
            ("https://example.com/h#k=secret", "https://example.com/h"),
            ("https://example.com/h?", "https://example.com/h?"),
            (
                "https://example.com/h?a=1&&b",
                "https://example.com/h?a=***&&***",
            ),
            ("https://h/x?t=a@b", "https://h/x?t=***"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(mask_url(url), want, "{url}");
        }
    }

    #[test]
    fn urls_inside_text_are_masked() {
        assert_eq!(
            mask_urls_in(
                "error sending request for url (https://u:p@h/x?k=v): connection refused, \
                 then \"http://h2/?t=1\" and rediss://:pw@r:6380/0."
            ),
            "error sending request for url (https://***@h/x?k=***): connection refused, \
             then \"http://h2/?t=***\" and rediss://***@r:6380/0."
        );
        assert_eq!(mask_urls_in("no url here"), "no url here");
        assert_eq!(mask_urls_in(""), "");
    }

    #[test]
    fn specs_lose_header_values_and_url_secrets_only() {
        let mut spec = serde_json::json!({
            "handler": "http",
            "payload": {"token": "kept: payloads are plain data"},
            "http": {"url": "https://u:pw@h/x?k=v", "headers": {"Authorization": "Bearer t", "X-Empty": ""}}
        });
        mask_spec(&mut spec);
        assert_eq!(
            spec,
            serde_json::json!({
                "handler": "http",
                "payload": {"token": "kept: payloads are plain data"},
                "http": {"url": "https://***@h/x?k=***", "headers": {"Authorization": "***", "X-Empty": ""}}
            })
        );
        let mut odd = serde_json::json!({"http": "not an object"});
        mask_spec(&mut odd);
        assert_eq!(odd, serde_json::json!({"http": "not an object"}));
        assert!(holds_mask("https://***@h/x"));
        assert!(!holds_mask("https://h/x?q=*"));
    }

    #[test]
    fn header_values_are_masked_when_set() {
        assert_eq!(mask_header_value("Bearer x"), MASK);
        assert_eq!(mask_header_value(""), "");
    }
}
