//! The `continue` token of the task listing, which can only continue the listing it came
//! from.
//!
//! A token holds the revision of the listing's first page (so that every page is one
//! snapshot), the last key read RELATIVE to the task prefix (`{namespace}/{id}`, never a
//! whole etcd key), and a fingerprint of the filter (namespace, status, label, search).
//! Decoding refuses with `bad_cursor` a token that is malformed, whose key is not a task
//! key of the listing's range, or whose fingerprint is not the filter's. The server joins
//! the key to its own task prefix, so no token can name a range outside `{prefix}/tasks/`
//! (the registry refuses one too, as a second line).
//!
//! The fingerprint is a hash, not a signature: a caller able to list may read whatever a
//! token reaches anyway. It binds a token to its filter so that paging on with another
//! filter is refused instead of silently skipping or repeating tasks. Being unkeyed, a token
//! stays valid across replicas and restarts.
//!
//! Format: `1.{revision}.{hex of the relative key}.{16 hex of the fingerprint}`.

use ax_registry::PageCursor;
use sha2::{Digest, Sha256};

use crate::api::{ApiError, TaskQuery};

/// The token format's version, its first field.
const VERSION: &str = "1";

/// Hex digits of the filter fingerprint in a token.
const FINGERPRINT_HEX: usize = 16;

/// The fingerprint of the filter of `query`, in the form the filter is applied (status in
/// any case, search trimmed and in any case), so equal filters spelled differently match.
pub(super) fn fingerprint(query: &TaskQuery) -> String {
    let mut h = Sha256::new();
    let status = query.status.as_deref().map(str::to_ascii_uppercase);
    let search = query
        .search
        .as_deref()
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty());
    for field in [
        query.namespace.as_deref(),
        status.as_deref(),
        query.label.as_deref(),
        search.as_deref(),
    ] {
        // Length-prefixed, so that no two filters hash the same input.
        match field {
            Some(v) => {
                h.update([1]);
                h.update((v.len() as u64).to_be_bytes());
                h.update(v.as_bytes());
            }
            None => h.update([0]),
        }
    }
    hex(&h.finalize()[..FINGERPRINT_HEX / 2])
}

/// The token continuing after `cursor` (a key of the listing under `tasks_prefix`), for the
/// filter whose [`fingerprint`] is `filter`. `None` if the key is not under the prefix,
/// which a listing's own keys always are.
pub(super) fn encode(cursor: &PageCursor, tasks_prefix: &str, filter: &str) -> Option<String> {
    let relative = cursor.after.strip_prefix(tasks_prefix)?;
    Some(format!(
        "{VERSION}.{}.{}.{filter}",
        cursor.revision,
        hex(relative.as_bytes())
    ))
}

/// The cursor a token stands for, checked against the listing it is used with: the filter
/// whose [`fingerprint`] is `filter`, of `namespace` (or all), under `tasks_prefix`.
pub(super) fn decode(
    token: &str,
    tasks_prefix: &str,
    namespace: Option<&str>,
    filter: &str,
) -> Result<PageCursor, ApiError> {
    let refuse = |why: &str| {
        ApiError::BadCursor(format!(
            "continue: {why}; pass the token of the previous page of this same listing, or \
             list again from the start"
        ))
    };
    let mut fields = token.split('.');
    let (Some(VERSION), Some(revision), Some(key), Some(print), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(refuse("not a token this server issued"));
    };
    let revision = revision
        .parse::<i64>()
        .ok()
        .filter(|r| *r > 0)
        .ok_or_else(|| refuse("not a token this server issued (bad revision)"))?;
    let relative = unhex(key)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| refuse("not a token this server issued (bad key)"))?;
    if print != filter {
        return Err(refuse(
            "the token belongs to a listing with another filter (namespace, status, label or \
             search)",
        ));
    }
    let in_range = match relative.split_once('/') {
        Some((ns, id)) => !id.is_empty() && namespace.is_none_or(|want| want == ns),
        None => false,
    };
    if !in_range || relative.contains('\0') {
        return Err(refuse("the token's position is not a task of this listing"));
    }
    Ok(PageCursor {
        revision,
        after: format!("{tasks_prefix}{relative}"),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "/ax/tasks/";

    fn query(namespace: Option<&str>, status: Option<&str>) -> TaskQuery {
        TaskQuery {
            namespace: namespace.map(Into::into),
            status: status.map(Into::into),
            ..TaskQuery::default()
        }
    }

    fn cursor(after: &str) -> PageCursor {
        PageCursor {
            revision: 42,
            after: after.into(),
        }
    }

    #[test]
    fn a_token_continues_its_own_listing() {
        let q = query(Some("ops"), Some("failed"));
        let f = fingerprint(&q);
        let token = encode(&cursor("/ax/tasks/ops/nightly"), PREFIX, &f).unwrap();
        assert!(!token.contains("/ax/"), "{token}");
        let back = decode(&token, PREFIX, Some("ops"), &f).unwrap();
        assert_eq!(back, cursor("/ax/tasks/ops/nightly"));
        // The same filter spelled another way is the same listing.
        assert_eq!(f, fingerprint(&query(Some("ops"), Some("FAILED"))));
        assert!(encode(&cursor("/other-app/secret"), PREFIX, &f).is_none());
    }

    #[test]
    fn a_token_of_another_filter_or_range_is_refused() {
        let all = fingerprint(&query(None, None));
        let ops = fingerprint(&query(Some("ops"), None));
        assert_ne!(all, ops);
        let token = encode(&cursor("/ax/tasks/ops/a"), PREFIX, &all).unwrap();
        let e = decode(&token, PREFIX, Some("ops"), &ops).unwrap_err();
        assert_eq!(e.code(), "bad_cursor");
        assert!(e.to_string().contains("another filter"), "{e}");
        // A token with the right fingerprint naming another namespace's task.
        let token = encode(&cursor("/ax/tasks/dev/a"), PREFIX, &ops).unwrap();
        let e = decode(&token, PREFIX, Some("ops"), &ops).unwrap_err();
        assert!(e.to_string().contains("not a task of this listing"), "{e}");
    }

    #[test]
    fn forged_and_garbled_tokens_are_refused() {
        let f = fingerprint(&query(None, None));
        let key = |k: &str| hex(k.as_bytes());
        for token in [
            "".to_owned(),
            "nonsense".to_owned(),
            // The raw etcd range start of old: a revision and an empty key.
            "12.".to_owned(),
            format!("1.12..{f}"),
            format!("1.0.{}.{f}", key("a/b")),
            format!("1.-3.{}.{f}", key("a/b")),
            format!("1.12.zz.{f}"),
            format!("1.12.{}.{f}", key("no-slash")),
            format!("1.12.{}.{f}", key("ns/")),
            format!("1.12.{}.{f}", key("ns/a\0")),
            format!("2.12.{}.{f}", key("a/b")),
            format!("1.12.{}.{f}.x", key("a/b")),
            format!("1.12.{}.0000000000000000", key("a/b")),
        ] {
            let e = decode(&token, PREFIX, None, &f).unwrap_err();
            assert_eq!(e.code(), "bad_cursor", "{token}");
        }
        // A key that climbs out of the prefix stays a key under it: the prefix is the
        // server's, joined in front.
        let c = decode(
            &format!("1.12.{}.{f}", key("../other-app/x")),
            PREFIX,
            None,
            &f,
        )
        .unwrap();
        assert!(c.after.starts_with(PREFIX));
    }
}
