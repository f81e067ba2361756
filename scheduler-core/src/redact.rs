//! Redaction of secrets in what ax shows: URLs and header values.
//!
//! Task authors put credentials in URLs (`https://user:pw@host`, `?token=...`, a webhook's
//! path) and in HTTP headers, and operators put them in webhook URLs. Anything ax writes
//! where people or other systems read it (logs, errors, `last_error`, history, alerts, API
//! answers, a printed configuration) goes through here first.
//!
//! URLs are read with the WHATWG parser (the `url` crate), the one reqwest sends with: a
//! shown URL is the parser's own serialization of what it parsed, so the host shown is the
//! host a request goes to, whatever backslashes, `@` or percent-escapes the text holds. A
//! text that does not parse is shown as its scheme and [`MASK`] only.

mod webhook;

use url::Url;

/// What replaces a secret.
pub const MASK: &str = "***";

/// `url` with its password (if any) replaced by [`MASK`], the user name kept: for
/// connection URLs an operator wrote, where the user is worth seeing.
pub fn mask_url_password(url: &str) -> String {
    let Ok(mut parsed) = Url::parse(url) else {
        return unparsable(url);
    };
    if parsed.password().is_some_and(|p| !p.is_empty()) {
        // Cannot fail: a URL with a password has a host, which takes user info.
        let _ = parsed.set_password(Some(MASK));
    }
    parsed.into()
}

/// `url` fit to show anywhere: the whole user info, every query value and the token part of
/// a known webhook's path (Slack, Feishu/Lark, Discord, Teams) replaced by [`MASK`] (query
/// names kept, so a reader still sees which parameters were sent), and the fragment
/// dropped. Also masks the URLs inside a longer text, see [`mask_urls_in`].
pub fn mask_url(url: &str) -> String {
    let names = crate::secret_ref::names(url).unwrap_or_default();
    if names.is_empty() {
        return mask_plain_url(url);
    }
    // A reference is no secret and shows as written: a stand-in that every URL part takes
    // as it is goes through the parser in its place.
    let stand_in = |i: usize| format!("axsecretref{i}x");
    let mut i = 0;
    let text = crate::secret_ref::pieces(url)
        .unwrap_or_default()
        .into_iter()
        .map(|p| match p {
            crate::secret_ref::Piece::Text(t) => t.to_owned(),
            crate::secret_ref::Piece::Secret(_) => {
                i += 1;
                stand_in(i - 1)
            }
        })
        .collect::<String>();
    let mut shown = mask_plain_url(&text);
    for (i, name) in names.iter().enumerate() {
        shown = shown.replace(
            &stand_in(i),
            &format!("{}{name}}}", crate::secret_ref::OPEN),
        );
    }
    shown
}

fn mask_plain_url(url: &str) -> String {
    let Ok(mut parsed) = Url::parse(url) else {
        return unparsable(url);
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        // Cannot fail: a URL with user info has a host.
        let _ = parsed.set_password(None);
        let _ = parsed.set_username(MASK);
    }
    if let Some((shown, Some(_))) = webhook::split_path(&parsed) {
        parsed.set_path(&format!("{shown}/{MASK}"));
    }
    if parsed.path().split('/').any(webhook::is_bot_token) {
        let path: Vec<String> = parsed
            .path()
            .split('/')
            .map(|seg| match seg.strip_prefix("bot") {
                Some(_) if webhook::is_bot_token(seg) => format!("bot{MASK}"),
                None if webhook::is_bot_token(seg) => MASK.to_owned(),
                _ => seg.to_owned(),
            })
            .collect();
        parsed.set_path(&path.join("/"));
    }
    if let Some(query) = parsed.query() {
        let masked = mask_query(query);
        parsed.set_query(Some(&masked));
    }
    parsed.set_fragment(None);
    parsed.into()
}

/// A text that is no URL the sender would take: nothing of it but the scheme is shown,
/// since where its authority ends is anyone's guess.
fn unparsable(text: &str) -> String {
    match text.split_once("://") {
        Some((scheme, _)) => format!("{scheme}://{MASK}"),
        None => text.to_owned(),
    }
}

/// A raw query with every value (and every bare `?token`) replaced by [`MASK`].
fn mask_query(query: &str) -> String {
    let mut out = String::with_capacity(query.len());
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

/// A task spec (as JSON) fit to show: every `http.headers` and `command.env` value and the
/// `http.url`'s credentials, query values and webhook token masked. Everything else in a
/// spec is the author's plain data. A spec sent back with these masks is refused by
/// validation, so a copy taken from the API cannot overwrite a secret with `***`.
pub fn mask_spec(spec: &mut serde_json::Value) {
    if let Some(http) = spec.get_mut("http").and_then(|h| h.as_object_mut()) {
        if let Some(serde_json::Value::String(url)) = http.get_mut("url") {
            *url = mask_url(url);
        }
        mask_values(http.get_mut("headers"));
    }
    if let Some(command) = spec.get_mut("command").and_then(|c| c.as_object_mut()) {
        mask_values(command.get_mut("env"));
    }
}

/// Every value of an object (headers, environment) masked. A spec shown may be invalid
/// (held as written), with numbers, arrays or objects where strings belong: each is masked
/// whole, as a string would be.
fn mask_values(map: Option<&mut serde_json::Value>) {
    if let Some(serde_json::Value::Object(map)) = map {
        for value in map.values_mut() {
            *value = match value {
                serde_json::Value::String(v) => {
                    serde_json::Value::String(mask_header_value(v).to_owned())
                }
                serde_json::Value::Null | serde_json::Value::Bool(_) => continue,
                _ => serde_json::Value::String(MASK.to_owned()),
            };
        }
    }
}

/// Whether `value` holds a mask as [`mask_url`] or [`mask_header_value`] write it: what a
/// spec copied from a masked view carries in place of its secrets.
pub fn holds_mask(value: &str) -> bool {
    value.contains(MASK)
}

/// Shortest value [`redact_values`] looks for: shorter ones (`?page=1`) would mask ordinary
/// text and hide little.
pub const MIN_REDACTED_LEN: usize = 4;

/// The secrets `url` carries, as a text may quote them: its user name and password, its
/// query values and a known webhook's token path, each as written and percent-decoded.
/// Empty for a text that does not parse (nothing is sent to it).
pub fn url_secret_values(url: &str) -> Vec<String> {
    let Ok(parsed) = Url::parse(url) else {
        return Vec::new();
    };
    let mut raw: Vec<&str> = vec![parsed.username(), parsed.password().unwrap_or("")];
    if let Some(query) = parsed.query() {
        raw.extend(
            query
                .split('&')
                .map(|p| p.split_once('=').map_or(p, |(_, v)| v)),
        );
    }
    let path_secret = webhook::split_path(&parsed).and_then(|(_, rest)| rest);
    let mut out: Vec<String> = Vec::new();
    for value in raw.into_iter().chain(path_secret.as_deref()) {
        let decoded = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        out.push(value.to_owned());
        out.push(decoded.into_owned());
    }
    out.retain(|v| v.len() >= MIN_REDACTED_LEN);
    out.sort();
    out.dedup();
    out
}

/// The secrets of a task's target as a text may quote them: its header values, its URL's
/// (see [`url_secret_values`]) and its command's environment values.
pub fn target_secret_values(
    http: Option<&crate::task::HttpTarget>,
    command: Option<&crate::task::CommandCall>,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(http) = http {
        out.extend(url_secret_values(&http.url));
        out.extend(http.headers.values().cloned());
    }
    if let Some(command) = command {
        out.extend(command.env.values().cloned());
    }
    out
}

/// `text` with every occurrence of each of `values` (and of the forms a server echoes them
/// in, see [`derived_forms`]) replaced by [`MASK`], longest first (so a secret holding a
/// shorter one goes whole); values shorter than [`MIN_REDACTED_LEN`] are left alone. A text
/// is often an excerpt, cut at its ends or in its middle (a command's, at its
/// `[... N bytes cut ...]` line): a secret cut there leaves a part, so a part of
/// [`MIN_REDACTED_LEN`] bytes or more of a secret at an edge of the text or of a cut goes too.
pub fn redact_values(text: &str, values: &[String]) -> String {
    let mut all: Vec<String> = Vec::with_capacity(values.len());
    for v in values {
        all.push(v.clone());
        all.extend(derived_forms(v));
    }
    let mut sorted: Vec<&str> = all
        .iter()
        .map(String::as_str)
        .filter(|v| v.len() >= MIN_REDACTED_LEN && v != &MASK)
        .collect();
    sorted.sort_by_key(|v| std::cmp::Reverse(v.len()));
    sorted.dedup();
    let mut out = text.to_owned();
    for v in &sorted {
        if out.contains(v) {
            out = out.replace(v, MASK);
        }
    }
    // Each piece between cuts, redacted at its edges.
    out.split(CUT_LINE_START)
        .enumerate()
        .map(|(i, piece)| {
            if i == 0 {
                mask_edges(piece, &sorted)
            } else {
                // The cut line runs to its newline; the piece after it starts there.
                match piece.split_once('\n') {
                    Some((line, rest)) => {
                        format!("{CUT_LINE_START}{line}\n{}", mask_edges(rest, &sorted))
                    }
                    None => format!("{CUT_LINE_START}{piece}"),
                }
            }
        })
        .collect()
}

/// The longest part of a secret looked for at an edge.
const MAX_EDGE: usize = 1024;

/// How a command's excerpt marks the bytes it left out (`[... N bytes cut ...]`).
const CUT_LINE_START: &str = "\n[... ";

/// `piece` with a part of a secret at its start (the secret's end) or at its end (its
/// start) masked, when the part is [`MIN_REDACTED_LEN`] bytes or more.
fn mask_edges(piece: &str, secrets: &[&str]) -> String {
    let mut start = 0;
    let mut end = piece.len();
    for secret in secrets {
        // A part longer than this is a secret of kilobytes cut in its middle: its first
        // `MAX_EDGE` bytes are enough to mask, and the search stays bounded.
        let longest = secret.len().min(MAX_EDGE);
        for n in (MIN_REDACTED_LEN..longest).rev() {
            if !secret.is_char_boundary(secret.len() - n) {
                continue;
            }
            if piece.len() >= n
                && piece.is_char_boundary(n)
                && piece[..n] == secret[secret.len() - n..]
            {
                start = start.max(n);
                break;
            }
        }
        for n in (MIN_REDACTED_LEN..longest).rev() {
            if !secret.is_char_boundary(n) {
                continue;
            }
            let at = piece.len().saturating_sub(n);
            if piece.len() >= n && piece.is_char_boundary(at) && piece[at..] == secret[..n] {
                end = end.min(at);
                break;
            }
        }
    }
    if start == 0 && end == piece.len() {
        return piece.to_owned();
    }
    if start >= end {
        return MASK.to_owned();
    }
    let head = if start > 0 { MASK } else { "" };
    let tail = if end < piece.len() { MASK } else { "" };
    format!("{head}{}{tail}", &piece[start..end])
}

/// The forms a credential travels in besides itself, which a server may echo: the token of
/// `Bearer <token>`; for `Basic <base64>`, the base64 and the password it holds; for a URL's
/// `user:password`, the password and the `Basic` form of the pair.
pub fn derived_forms(value: &str) -> Vec<String> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = Vec::new();
    let trimmed = value.trim();
    if let Some((scheme, rest)) = trimmed.split_once(' ') {
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token") {
            out.push(rest.to_owned());
        } else if scheme.eq_ignore_ascii_case("basic") {
            out.push(rest.to_owned());
            if let Some(pair) = b64
                .decode(rest)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
            {
                if let Some((_, password)) = pair.split_once(':') {
                    out.push(password.to_owned());
                }
                out.push(pair);
            }
        }
    }
    if let Some((_, after)) = trimmed.split_once("://") {
        let authority = after.split(['/', '?', '#']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if let Some((_, password)) = userinfo.split_once(':') {
                out.push(password.to_owned());
            }
            out.push(b64.encode(userinfo));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_tokens_and_odd_values_of_invalid_specs_are_masked() {
        let url =
            "https://api.telegram.org/bot123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0/sendMessage";
        assert_eq!(mask_url(url), "https://api.telegram.org/bot***/sendMessage");
        let mut spec = serde_json::json!({"http": {"url": "https://h/x", "headers": {
            "X-Key": 12345678, "X-List": ["s3cret-a", "s3cret-b"], "X-Obj": {"k": "s3cret"}}}});
        mask_spec(&mut spec);
        assert!(!spec.to_string().contains("s3cret"), "{spec}");
        assert!(!spec.to_string().contains("12345678"), "{spec}");
    }

    #[test]
    fn derived_forms_and_parts_cut_at_an_edge_are_redacted() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let token = "tok-1234567890".to_owned();
        let bearer = format!("Bearer {token}");
        let basic = format!("Basic {}", b64.encode("svc:pa55word-x"));
        let echoed = format!(
            "auth was {token}; pair svc:pa55word-x; raw {}; url-auth {}",
            b64.encode("svc:pa55word-x"),
            b64.encode("u:hunter22")
        );
        let out = redact_values(
            &echoed,
            &[bearer, basic, "https://u:hunter22@h/x".to_owned()],
        );
        for leaked in [
            "tok-1234567890",
            "pa55word-x",
            "hunter22",
            &b64.encode("u:hunter22"),
        ] {
            assert!(!out.contains(leaked), "{leaked} in {out}");
        }
        // An answer cut in the middle of a secret keeps none of it.
        let cut = format!("... the key is {}", &token[..9]);
        let out = redact_values(&cut, std::slice::from_ref(&token));
        assert!(!out.contains("tok-12345"), "{out}");
        // A command's excerpt, cut around its middle line.
        let excerpt = format!(
            "head {}\n[... 9000 bytes cut ...]\n{} tail",
            &token[..6],
            &token[6..]
        );
        let out = redact_values(&excerpt, std::slice::from_ref(&token));
        assert!(!out.contains("tok-12") && !out.contains("567890"), "{out}");
        assert!(out.contains("[... 9000 bytes cut ...]"), "{out}");
        // Text that only shares a short start with a secret stays.
        assert_eq!(redact_values("to", std::slice::from_ref(&token)), "to");
        assert_eq!(
            redact_values("plain words", std::slice::from_ref(&token)),
            "plain words"
        );
    }

    #[test]
    fn url_passwords_are_masked() {
        for (url, want) in [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
            ("rediss://user:s3cret@host/0", "rediss://user:***@host/0"),
            ("redis://user@host/0", "redis://user@host/0"),
            ("redis://u:p@ss@host/0", "redis://u:***@host/0"),
            ("https://h/x?token=a@b", "https://h/x?token=a@b"),
            ("redis://:pw@[bad/0", "redis://***"),
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
            ("https://u:pw@[::1/x", "https://***"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(mask_url(url), want, "{url}");
        }
    }

    #[test]
    fn a_shown_url_names_the_host_a_request_goes_to() {
        // The sender's parser ends the authority at `\` too: this URL goes to evil.example,
        // with `@hooks.corp.com/` as its path, and is shown so.
        let tricky = r"https://evil.example\@hooks.corp.com/";
        assert_eq!(Url::parse(tricky).unwrap().host_str(), Some("evil.example"));
        assert_eq!(mask_url(tricky), "https://evil.example/@hooks.corp.com/");
        assert_eq!(
            mask_url("https://u:p@a.example%2F@b.example/x"),
            "https://***@b.example/x"
        );
        for url in [
            tricky,
            "https://a@b@c.example\\d@e/f",
            "http://x.example\\@y/",
        ] {
            let sent = Url::parse(url).unwrap();
            let shown = Url::parse(&mask_url(url)).unwrap();
            assert_eq!(shown.host_str(), sent.host_str(), "{url}");
        }
    }

    #[test]
    fn secret_references_show_as_written() {
        for (url, want) in [
            ("${secret:HOOK}", "${secret:HOOK}"),
            ("https://${secret:host}/x", "https://${secret:host}/x"),
            (
                "https://h.example/${secret:P}/x",
                "https://h.example/${secret:P}/x",
            ),
            (
                "https://h.example/x?t=${secret:T}",
                "https://h.example/x?t=***",
            ),
            ("https://${secret:U}@h.example/", "https://***@h.example/"),
        ] {
            assert_eq!(mask_url(url), want, "{url}");
        }
    }

    #[test]
    fn webhook_path_tokens_are_masked() {
        for (url, want) in [
            (
                "https://hooks.slack.com/services/T0/B0/s3cret",
                "https://hooks.slack.com/services/***",
            ),
            (
                "https://open.feishu.cn/open-apis/bot/v2/hook/s3cret",
                "https://open.feishu.cn/open-apis/bot/v2/hook/***",
            ),
            (
                "https://open.larksuite.com/open-apis/bot/v2/hook/s3cret",
                "https://open.larksuite.com/open-apis/bot/v2/hook/***",
            ),
            (
                "https://discord.com/api/webhooks/123/s3cret?wait=true",
                "https://discord.com/api/webhooks/***?wait=***",
            ),
            (
                "https://discordapp.com/api/webhooks/123/s3cret",
                "https://discordapp.com/api/webhooks/***",
            ),
            (
                "https://corp.webhook.office.com/webhookb2/a@b/IncomingWebhook/s3cret/c",
                "https://corp.webhook.office.com/webhookb2/***",
            ),
            (
                "https://outlook.office.com/webhook/a@b/IncomingWebhook/s3cret/c",
                "https://outlook.office.com/webhook/***",
            ),
            (
                "https://oapi.dingtalk.com/robot/send?access_token=s3cret",
                "https://oapi.dingtalk.com/robot/send?access_token=***",
            ),
            (
                "https://hooks.slack.com/s3cret",
                "https://hooks.slack.com/***",
            ),
            (
                "https://example.com/services/x",
                "https://example.com/services/x",
            ),
        ] {
            assert_eq!(mask_url(url), want, "{url}");
        }
        assert_eq!(
            mask_urls_in("POST https://hooks.slack.com/services/T/B/s3cret failed"),
            "POST https://hooks.slack.com/services/*** failed"
        );
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
            "http": {"url": "https://u:pw@h/x?k=v", "headers": {"Authorization": "Bearer t", "X-Empty": ""}},
            "command": {"name": "c", "args": ["kept"], "env": {"TOKEN": "t"}}
        });
        mask_spec(&mut spec);
        assert_eq!(
            spec,
            serde_json::json!({
                "handler": "http",
                "payload": {"token": "kept: payloads are plain data"},
                "http": {"url": "https://***@h/x?k=***", "headers": {"Authorization": "***", "X-Empty": ""}},
            "command": {"name": "c", "args": ["kept"], "env": {"TOKEN": "***"}}
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

    #[test]
    fn a_urls_secrets_are_found_as_written_and_decoded() {
        let got = url_secret_values("https://user1:p%40ss@h.example/x?token=ab%2Fcd&n=1&bare1#f");
        assert_eq!(
            got,
            ["ab%2Fcd", "ab/cd", "bare1", "p%40ss", "p@ss", "user1"]
        );
        assert_eq!(
            url_secret_values("https://hooks.slack.com/services/T0/B0/tok"),
            ["T0/B0/tok"]
        );
        assert!(url_secret_values("https://h.example/plain/path").is_empty());
        assert!(url_secret_values("not a url").is_empty());
    }

    #[test]
    fn values_are_redacted_longest_first_and_short_ones_kept() {
        let values = vec!["abcd".to_owned(), "abcdef".to_owned(), "x".to_owned()];
        assert_eq!(
            redact_values("got abcdef, abcd and x", &values),
            "got ***, *** and x"
        );
        assert_eq!(redact_values("nothing", &[]), "nothing");
    }
}
