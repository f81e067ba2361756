//! Who calls the API and what each caller may do, as the API's data: roles, the caller of
//! a request, and the bearer tokens' hashes.
//!
//! These are not HTTP's: the configuration checks its tokens with them, the CLI makes new
//! tokens with them and `/whoami` answers with them, while the middleware that reads the
//! `Authorization` header and refuses requests is in the `ax` binary's `http::auth`. Tokens are kept
//! as SHA-256 hashes: tokens are random and long (256 bits from [`new_token`]), so a plain
//! hash is enough and a slow password hash would only cost every request.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a caller may do; each role includes the ones below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenRole {
    /// Look: list and get tasks, history, executions, dead letters, status. For dashboards.
    Read,
    /// Run the system: pause, resume, trigger, requeue dead letters.
    Operate,
    /// Change it: register and delete tasks, purge dead letters, see secrets.
    Admin,
}

impl TokenRole {
    /// Every role, lowest first.
    pub const ALL: [TokenRole; 3] = [TokenRole::Read, TokenRole::Operate, TokenRole::Admin];

    /// The name used in the configuration and the docs.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Read => "read",
            TokenRole::Operate => "operate",
            TokenRole::Admin => "admin",
        }
    }
}

impl std::str::FromStr for TokenRole {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TokenRole::ALL
            .into_iter()
            .find(|r| r.as_str() == s.trim())
            .ok_or_else(|| format!("unknown role `{s}`, expected `read`, `operate` or `admin`"))
    }
}

/// Who made a request, put in the request's extensions for the routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The token's name, or [`ANONYMOUS`].
    pub name: Arc<str>,
    /// What it may do.
    pub role: TokenRole,
}

/// The name of a caller without a token, where the API lets one in.
pub const ANONYMOUS: &str = "anonymous";

/// The plain-token admin name: `http.api_token` (from a secret, like `AX_API_TOKEN`) is an
/// admin token under this name.
pub const API_TOKEN_NAME: &str = "api_token";

/// Why a request was refused, the `reason` label of the metric.
pub const REFUSAL_REASONS: &[&str] = &[
    "missing",
    "invalid",
    "forbidden",
    "closed",
    "cross_origin",
    "unknown_host",
    "media_type",
];

/// SHA-256 of a token.
pub fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// 64 hex digits as a hash; `None` otherwise.
pub fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A hash as 64 lowercase hex digits.
pub fn to_hex(hash: &[u8; 32]) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new random token: 32 bytes from the OS's generator, as 64 hex digits prefixed `ax_`
/// (so secret scanners and people can tell what it is).
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("ax_{}", to_hex(&bytes))
}

/// Who is calling: the body of `GET /whoami`, so a client (the console) can offer only what
/// the caller's role allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    /// The token's name, or `anonymous` where the API admits callers without one.
    pub name: String,
    /// What it may do.
    pub role: TokenRole,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_parse_from_hex_only() {
        let h = sha256("abc");
        assert_eq!(
            to_hex(&h),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(parse_sha256(&to_hex(&h)), Some(h));
        assert_eq!(parse_sha256(&to_hex(&h).to_uppercase()), Some(h));
        assert_eq!(parse_sha256("abc"), None);
        assert_eq!(parse_sha256(&"g".repeat(64)), None);
        assert_eq!(parse_sha256(&"é".repeat(32)), None);
    }

    #[test]
    fn new_tokens_are_long_and_distinct() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 3 + 64);
        assert!(a.starts_with("ax_"));
    }
}
