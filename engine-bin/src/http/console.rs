//! `/ui`: the web console, a static page built on `/api/v1` and nothing else.
//!
//! Every file is compiled into the binary (`include_str!`), so a replica serves its console
//! offline and `cargo build` needs no JavaScript toolchain: the files in `engine-bin/console/`
//! are plain ES modules and CSS, written to be served as they are. The files themselves hold
//! no data and are served without a token, like `/healthz`; everything the page shows comes
//! from `/api/v1` with the token the user enters, so a read-only token is enough to look and
//! the API refuses what the role does not allow.
//!
//! Every answer carries a strict Content-Security-Policy: scripts and styles only from this
//! origin (no inline script, no `eval`), fetches only to this origin, no framing. The page
//! builds its DOM with `textContent`, never `innerHTML`, so API data cannot become markup.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

/// Where the console is mounted.
pub const CONSOLE_PREFIX: &str = "/ui";

/// The policy every console answer carries.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The console's files: (name under `/ui/`, content type, content).
pub const ASSETS: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../console/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../console/style.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/api.js"),
    ),
    (
        "dom.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/dom.js"),
    ),
    (
        "views.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/views.js"),
    ),
    (
        "task.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/task.js"),
    ),
    (
        "execution.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/execution.js"),
    ),
    (
        "queue.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/queue.js"),
    ),
    (
        "editor.js",
        "text/javascript; charset=utf-8",
        include_str!("../../console/editor.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../../console/favicon.svg"),
    ),
];

/// The console routes: `/ui` (redirected to `/ui/`), `/ui/` and `/ui/{file}`.
pub fn router() -> Router {
    Router::new()
        .route(
            CONSOLE_PREFIX,
            get(|| async { Redirect::permanent("/ui/") }),
        )
        .route("/ui/", get(|| async { asset("index.html") }))
        .route(
            "/ui/{file}",
            get(|Path(file): Path<String>| async move { asset(&file) }),
        )
}

fn asset(name: &str) -> Response {
    let Some((_, content_type, body)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return (StatusCode::NOT_FOUND, "no such console file").into_response();
    };
    let mut response = (*body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // The files change with the binary; revalidating each load is cheap on loopback and
    // never serves a stale script beside a new API.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
