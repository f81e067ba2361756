//! Bearer token authentication for `/api/v1`.
//!
//! Only the API is protected: probes and `/metrics` must answer the kubelet and Prometheus
//! without credentials. The comparison is constant-time (`subtle`) so response timing does
//! not reveal how much of a guessed token was right; only the token's length can leak.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// The expected token, shared by every request.
#[derive(Clone, Debug)]
pub struct ApiToken(pub Arc<str>);

/// Middleware: passes the request on only with `Authorization: Bearer <token>`.
pub async fn require_bearer(
    State(token): State<ApiToken>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    match presented {
        Some(p) if token_matches(p, &token.0) => next.run(request).await,
        Some(_) => ApiError::Unauthorized("the bearer token is not valid".into()).into_response(),
        None => ApiError::Unauthorized(
            "this API needs an `Authorization: Bearer <token>` header".into(),
        )
        .into_response(),
    }
}

fn token_matches(presented: &str, expected: &str) -> bool {
    bool::from(presented.as_bytes().ct_eq(expected.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_exactly() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abd", "abc"));
        assert!(!token_matches("ab", "abc"));
        assert!(!token_matches("", "abc"));
    }
}
