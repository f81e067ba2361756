//! Who may call `/api/v1`, and what each caller may do.
//!
//! Callers present `Authorization: Bearer <token>`. Tokens are configured by name with a
//! [`TokenRole`], as the SHA-256 of the token, so a leaked configuration does not hand out access
//! and the name can be logged (and audited) in place of the token; the roles, the caller
//! ([`Principal`]) and the hashes are the API's own, in [`ax_control::api`]. The presented token
//! is hashed and compared with every configured hash in constant time (`subtle`), without
//! stopping at a match, so timing says nothing about which or how much of a token was
//! right.
//!
//! Closed by default: with no token configured, the API answers only when the operator set
//! `http.insecure_open_api`; any other replica refuses every API call with `403 api_closed`
//! and a message saying what to configure. Where a replica listens confers nothing: a
//! loopback port is reached by every process of the machine and, through the browser, by
//! every web page its user opens, so a caller is admin only by presenting a token. Probes
//! and `/metrics` are never behind this layer (the kubelet and Prometheus call them), and
//! hold no secrets.
//!
//! Which role a route needs is one table, [`ROUTE_ROLES`], read by the middleware through
//! the route's matched path: a route missing from it needs [`TokenRole::Admin`], so a new route
//! is closed until someone decides otherwise. `docs/security.md` prints the same table, and
//! a test sweeps every route with every kind of caller against it. The one route that takes
//! no API token ([`EXECUTION_TOKEN_ROUTES`]: a job reporting its end with the completion
//! token its request carried) is listed apart, and documented apart.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::config::TokenEntry;
use crate::http::metrics::Metrics;
use ax_control::api::{
    parse_sha256, sha256, ApiError, Principal, TokenRole, ANONYMOUS, API_TOKEN_NAME,
};

/// The role each route needs: (method, path under `/api/v1`, role). A route not listed
/// needs [`TokenRole::Admin`]. `HEAD` is checked as `GET`.
pub const ROUTE_ROLES: &[(&str, &str, TokenRole)] = &[
    ("GET", "/tasks", TokenRole::Read),
    ("POST", "/tasks", TokenRole::Admin),
    ("GET", "/tasks/{namespace}/{id}", TokenRole::Read),
    ("DELETE", "/tasks/{namespace}/{id}", TokenRole::Admin),
    ("POST", "/tasks/{namespace}/{id}/pause", TokenRole::Operate),
    ("POST", "/tasks/{namespace}/{id}/resume", TokenRole::Operate),
    (
        "POST",
        "/tasks/{namespace}/{id}/trigger",
        TokenRole::Operate,
    ),
    (
        "POST",
        "/tasks/{namespace}/{id}/backfill",
        TokenRole::Operate,
    ),
    ("GET", "/tasks/{namespace}/{id}/history", TokenRole::Read),
    ("GET", "/executions", TokenRole::Read),
    ("GET", "/executions/find", TokenRole::Read),
    ("GET", "/executions/{id}", TokenRole::Read),
    ("GET", "/dlq", TokenRole::Read),
    ("POST", "/dlq/requeue", TokenRole::Operate),
    ("POST", "/dlq/purge", TokenRole::Admin),
    ("POST", "/namespaces/{namespace}/pause", TokenRole::Operate),
    ("POST", "/namespaces/{namespace}/resume", TokenRole::Operate),
    ("GET", "/status", TokenRole::Read),
    ("GET", "/audit", TokenRole::Read),
    ("POST", "/tasks/{namespace}/{id}/kill", TokenRole::Operate),
    ("POST", "/executions/{id}/kill", TokenRole::Operate),
    ("GET", "/queues/{name}", TokenRole::Read),
    ("POST", "/queues/{name}/pause", TokenRole::Operate),
    ("POST", "/queues/{name}/resume", TokenRole::Operate),
    ("GET", "/queues/{name}/scheduled", TokenRole::Read),
    ("POST", "/scheduled", TokenRole::Operate),
    ("GET", "/scheduled/{queue}/{id}", TokenRole::Read),
    ("DELETE", "/scheduled/{queue}/{id}", TokenRole::Operate),
    ("POST", "/scheduled/{queue}/{id}/move", TokenRole::Operate),
    ("GET", "/whoami", TokenRole::Read),
];

/// Routes that take no API token: their own credential is in the request (the completion
/// token of `POST /executions/{id}/complete`, checked by the backend against the hash
/// stored for the execution's attempt). They answer even where the API is closed to
/// callers without a token, run no role check, and are not audited (a job's progress
/// reports would flood the log); the input limits apply as to any route.
pub const EXECUTION_TOKEN_ROUTES: &[(&str, &str)] = &[("POST", "/executions/{id}/complete")];

/// Whether a request to `matched_path` (with or without the `/api/v1` prefix) brings its own
/// credential ([`EXECUTION_TOKEN_ROUTES`]).
pub fn is_execution_token_route(method: &Method, matched_path: &str) -> bool {
    let path = matched_path
        .strip_prefix(super::API_PREFIX)
        .unwrap_or(matched_path);
    EXECUTION_TOKEN_ROUTES
        .iter()
        .any(|(m, p)| *m == method.as_str() && *p == path)
}

/// The role a request needs, from its method and matched path (with or without the
/// `/api/v1` prefix). Seeing secrets (`show_secrets=true`) is checked by the route itself.
pub fn required_role(method: &Method, matched_path: &str) -> TokenRole {
    let path = matched_path
        .strip_prefix(super::API_PREFIX)
        .unwrap_or(matched_path);
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    ROUTE_ROLES
        .iter()
        .find(|(m, p, _)| *m == method && *p == path)
        .map_or(TokenRole::Admin, |(_, _, role)| *role)
}

/// What callers without a token get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Anonymous {
    /// Everything: no token is configured and the operator opened the API on purpose.
    Admitted,
    /// Nothing, with 401: tokens are configured.
    NeedToken,
    /// Nothing, with 403 `api_closed`: no token is configured and the API is not opened on
    /// purpose. The message says what to configure.
    Closed(String),
}

/// The access settings of one replica, built once from the configuration.
#[derive(Clone, Debug)]
pub struct Access {
    tokens: Vec<(Arc<str>, TokenRole, [u8; 32])>,
    anonymous: Anonymous,
}

impl Access {
    /// Access from the configured tokens, the plain `http.api_token` (empty for none) and
    /// the opt-out. Hashes must have been validated ([`parse_sha256`] is what validation
    /// calls); one that does not parse matches nothing.
    pub fn new(tokens: &[TokenEntry], api_token: &str, insecure_open: bool) -> Self {
        let mut known: Vec<(Arc<str>, TokenRole, [u8; 32])> = tokens
            .iter()
            .filter_map(|t| Some((Arc::from(t.name.as_str()), t.role, parse_sha256(&t.sha256)?)))
            .collect();
        if !api_token.is_empty() {
            known.push((
                Arc::from(API_TOKEN_NAME),
                TokenRole::Admin,
                sha256(api_token),
            ));
        }
        let anonymous = if !known.is_empty() {
            Anonymous::NeedToken
        } else if insecure_open {
            Anonymous::Admitted
        } else {
            Anonymous::Closed(
                "the API is closed: this replica has no API token. Configure \
                 `[[http.tokens]]` (`ax token new` makes one) or `http.api_token` (at least 32 \
                 characters), or open it to anyone who reaches the port with \
                 `http.insecure_open_api = true`"
                    .into(),
            )
        };
        Access {
            tokens: known,
            anonymous,
        }
    }

    /// What callers without a token get.
    pub fn anonymous(&self) -> &Anonymous {
        &self.anonymous
    }

    /// The principal a presented token belongs to.
    pub fn identify(&self, presented: &str) -> Option<Principal> {
        let hash = sha256(presented);
        let mut found = None;
        // Every entry is compared, match or not, so the time taken does not say which one
        // matched.
        for (name, role, expected) in &self.tokens {
            if bool::from(hash.ct_eq(expected)) {
                found = Some(Principal {
                    name: Arc::clone(name),
                    role: *role,
                });
            }
        }
        found
    }
}

/// Counts a refused API request under `reason` (the label of
/// `scheduler_api_auth_failures_total`) and answers it with `error`; the caller logs what it
/// knows of the request.
pub(super) fn refused(metrics: &Metrics, reason: &'static str, error: ApiError) -> Response {
    metrics
        .process
        .api_auth_failures_total
        .with_label_values(&[reason])
        .inc();
    error.into_response()
}

/// What the middleware shares.
#[derive(Clone)]
pub struct AuthState {
    /// Tokens and the anonymous rule.
    pub access: Arc<Access>,
    /// Where refusals are counted.
    pub metrics: Arc<Metrics>,
}

/// Middleware: identifies the caller, checks the route's role, and hands the [`Principal`]
/// to the route; refusals are counted and logged with the token's name or none, never the
/// token.
pub async fn authorize(
    State(state): State<AuthState>,
    mut request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let method = request.method().clone();
    if route
        .as_deref()
        .is_some_and(|r| is_execution_token_route(&method, r))
    {
        return next.run(request).await;
    }
    let refuse = |reason: &'static str, who: &str, error: ApiError| {
        tracing::warn!(
            reason,
            %method,
            route = route.as_deref().unwrap_or("(none)"),
            principal = who,
            "api request refused"
        );
        refused(&state.metrics, reason, error)
    };
    let principal = match identify_caller(&state.access, bearer_token(&request)) {
        Ok(p) => p,
        Err((reason, error)) => return refuse(reason, "", error),
    };
    // An unknown route needs no particular role: any known caller gets the router's 404.
    if let Some(route) = route.as_deref() {
        if let Err(error) = check_role(&method, route, &principal) {
            return refuse("forbidden", &principal.name, error);
        }
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// The request's bearer token: `None` without an `Authorization` header, `Some(None)` when
/// the header is not `Bearer <token>`.
fn bearer_token(request: &Request) -> Option<Option<&str>> {
    request.headers().get(header::AUTHORIZATION).map(|v| {
        v.to_str().ok().and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
    })
}

/// Who the caller is, from its token (see [`bearer_token`]) or the anonymous rule; or the
/// refusal's reason label and answer.
fn identify_caller(
    access: &Access,
    presented: Option<Option<&str>>,
) -> Result<Principal, (&'static str, ApiError)> {
    match presented {
        Some(Some(token)) => access.identify(token).ok_or_else(|| {
            (
                "invalid",
                ApiError::Unauthorized("the bearer token matches no configured token".into()),
            )
        }),
        Some(None) => Err((
            "invalid",
            ApiError::Unauthorized("the Authorization header must be `Bearer <token>`".into()),
        )),
        None => match access.anonymous() {
            Anonymous::Admitted => Ok(Principal {
                name: Arc::from(ANONYMOUS),
                role: TokenRole::Admin,
            }),
            Anonymous::NeedToken => Err((
                "missing",
                ApiError::Unauthorized(
                    "this API needs an `Authorization: Bearer <token>` header".into(),
                ),
            )),
            Anonymous::Closed(why) => Err(("closed", ApiError::Closed(why.clone()))),
        },
    }
}

/// Whether `principal`'s role is enough for `method` on `route`.
fn check_role(method: &Method, route: &str, principal: &Principal) -> Result<(), ApiError> {
    let needed = required_role(method, route);
    if principal.role < needed {
        return Err(ApiError::Forbidden(format!(
            "{method} {route} needs the `{}` role; token `{}` has `{}`",
            needed.as_str(),
            principal.name,
            principal.role.as_str()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ax_control::api::to_hex;

    fn entry(name: &str, role: TokenRole, token: &str) -> TokenEntry {
        TokenEntry {
            name: name.into(),
            role,
            sha256: to_hex(&sha256(token)),
        }
    }

    #[test]
    fn tokens_are_found_by_their_hash_only() {
        let a = Access::new(
            &[
                entry("grafana", TokenRole::Read, "ax_read"),
                entry("ops", TokenRole::Operate, "ax_ops"),
            ],
            "plain-admin",
            false,
        );
        assert_eq!(a.identify("ax_read").unwrap().role, TokenRole::Read);
        assert_eq!(&*a.identify("ax_ops").unwrap().name, "ops");
        let admin = a.identify("plain-admin").unwrap();
        assert_eq!(
            (&*admin.name, admin.role),
            (API_TOKEN_NAME, TokenRole::Admin)
        );
        for wrong in ["", "ax_rea", "ax_readx", "AX_READ"] {
            assert!(a.identify(wrong).is_none(), "{wrong}");
        }
        assert_eq!(a.anonymous(), &Anonymous::NeedToken);
    }

    #[test]
    fn without_tokens_only_the_opt_out_admits_anonymous_wherever_the_replica_listens() {
        let closed = Access::new(&[], "", false);
        let Anonymous::Closed(why) = closed.anonymous() else {
            panic!("a replica without a token admitted anonymous callers")
        };
        assert!(
            why.contains("http.insecure_open_api") && why.contains("http.tokens"),
            "{why}"
        );
        assert_eq!(Access::new(&[], "", true).anonymous(), &Anonymous::Admitted);
    }

    #[test]
    fn routes_need_their_listed_role_and_unlisted_ones_admin() {
        assert_eq!(
            required_role(&Method::GET, "/api/v1/tasks"),
            TokenRole::Read
        );
        assert_eq!(
            required_role(&Method::HEAD, "/api/v1/tasks"),
            TokenRole::Read
        );
        assert_eq!(
            required_role(&Method::POST, "/api/v1/tasks"),
            TokenRole::Admin
        );
        assert_eq!(
            required_role(&Method::POST, "/api/v1/tasks/{namespace}/{id}/trigger"),
            TokenRole::Operate
        );
        assert_eq!(
            required_role(&Method::PUT, "/api/v1/tasks"),
            TokenRole::Admin
        );
        assert_eq!(
            required_role(&Method::GET, "/api/v1/new-thing"),
            TokenRole::Admin
        );
    }

    #[test]
    fn callers_are_identified_by_token_or_the_anonymous_rule_and_refused_with_a_reason() {
        let a = Access::new(&[entry("grafana", TokenRole::Read, "ax_read")], "", false);
        let reason = |presented| identify_caller(&a, presented).map(|p| p.name).err();
        assert_eq!(
            &*identify_caller(&a, Some(Some("ax_read"))).unwrap().name,
            "grafana"
        );
        assert!(matches!(reason(Some(Some("nope"))), Some(("invalid", _))));
        assert!(matches!(reason(Some(None)), Some(("invalid", _))));
        assert!(matches!(reason(None), Some(("missing", _))));
        let closed = Access::new(&[], "", false);
        assert!(matches!(
            identify_caller(&closed, None),
            Err(("closed", ApiError::Closed(_)))
        ));
        let open = Access::new(&[], "", true);
        let anonymous = identify_caller(&open, None).unwrap();
        assert_eq!(
            (&*anonymous.name, anonymous.role),
            (ANONYMOUS, TokenRole::Admin)
        );
    }

    #[test]
    fn a_role_below_the_route_s_is_forbidden() {
        let reader = Principal {
            name: Arc::from("grafana"),
            role: TokenRole::Read,
        };
        assert!(check_role(&Method::GET, "/api/v1/tasks", &reader).is_ok());
        let Err(ApiError::Forbidden(why)) = check_role(&Method::POST, "/api/v1/tasks", &reader)
        else {
            panic!("a reader may put tasks")
        };
        assert!(
            why.contains("`admin`") && why.contains("`grafana`"),
            "{why}"
        );
    }
}
