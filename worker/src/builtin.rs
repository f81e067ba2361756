//! The built-in handlers: `http` posts the execution to the task's URL, `log` logs it.
//!
//! `http` keeps the start of each final answer (status, first KiB of the body) for the
//! execution history, reading no more of the body than that. It classifies answers for the
//! retry policy: 2xx is success; 408 and 429 (the server
//! asks to come back) and 5xx are retryable, as are connection errors and timeouts; any
//! other status is permanent, since sending the same request again gets the same answer.
//! The attempt's timeout bounds all its requests together, so a hung server cannot outlive
//! the attempt.
//!
//! Delivery is at least once (a worker that dies after the request and before settling has
//! its message run again), so every request names its execution and attempt, in headers
//! ([`EXECUTION_ID_HEADER`], [`ATTEMPT_HEADER`]) and in the body (`execution_id`,
//! `attempt`): a receiver drops a repeat by the execution id, which retries and redeliveries
//! keep.
//!
//! A task with `http.async` gets two more headers ([`COMPLETION_URL_HEADER`],
//! [`COMPLETION_TOKEN_HEADER`]) and body fields (`completion_url`, `completion_token`): the
//! receiver that answers `202 Accepted` takes the job on and reports its end there later
//! (see [`crate::awaiting`]); any other answer counts as it would for any task. The token is
//! never part of an error, the output or a log line.
//!
//! A task's `${secret:NAME}` references (in its URL or header values) are resolved here,
//! from the handler's [`SecretSource`], for this attempt only; the values are handed to the
//! [`OutputSlot`] so the pool redacts them from whatever the attempt records, and the URL an
//! error quotes is the task's own with its references.
//!
//! Requests go through the pool's [`EgressClient`]: what its policy refuses fails the
//! execution permanently (the same target is refused again). Redirects are followed only for
//! tasks that opt in (`http.follow_redirects`), by hand, up to [`MAX_REDIRECTS`] hops, each
//! through the same guarded client; the task's credentials (its `headers`, the URL's user
//! info, the completion URL and token, in headers and in the body) go only to the task URL's
//! origin, since a redirect may point anywhere; the body never repeats the target. Every URL in an error is masked (user info, query values):
//! errors end up in the state record, the history and alerts.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Instant;

use ax_queue::ExecutionMessage;
use ax_scheduler_core::redact::{mask_url, mask_urls_in, url_secret_values};
use ax_scheduler_core::secret_ref::{self, has_references};
use ax_scheduler_core::task::{is_reserved_http_header, HttpTarget};
use ax_scheduler_core::{AttemptOutput, MAX_OUTPUT_BYTES};
use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, LOCATION};
use reqwest::{Method, StatusCode, Url};

use crate::awaiting::Completion;
use crate::egress::EgressClient;
use crate::handler::{ClusterAttempt, Context, Handler, HandlerError, HandlerFuture, OutputSlot};
use crate::secrets::{Placement, SecretSource};

/// The header naming the execution (stable across retries and redeliveries).
pub const EXECUTION_ID_HEADER: &str = "x-ax-execution-id";
/// The header naming the attempt (1 for the first).
pub const ATTEMPT_HEADER: &str = "x-ax-attempt";
/// The header carrying the completion URL of an `http.async` attempt.
pub const COMPLETION_URL_HEADER: &str = "x-ax-completion-url";
/// The header carrying the completion token of an `http.async` attempt.
pub const COMPLETION_TOKEN_HEADER: &str = "x-ax-completion-token";
/// Most redirects an opted-in task follows in one attempt.
pub const MAX_REDIRECTS: usize = 10;

/// POSTs the execution as JSON to the task's `http.url` with its headers, its secret
/// references resolved from its [`SecretSource`] (none by default).
#[derive(Clone, Debug, Default)]
pub struct HttpHandler {
    secrets: SecretSource,
}

impl HttpHandler {
    /// A handler resolving `${secret:NAME}` references from `secrets`.
    pub fn new(secrets: SecretSource) -> Self {
        HttpHandler { secrets }
    }
}

/// Writes the execution to the log at info level.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogHandler;

/// Does nothing and succeeds: for trying ax out and for measuring the scheduling path alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopHandler;

impl Handler for NoopHandler {
    fn run(&self, _ctx: Context) -> HandlerFuture<'_> {
        Box::pin(async { Ok(()) })
    }
}

/// How a status code counts: `Ok` for 2xx, else the handler error.
pub fn classify_status(status: StatusCode) -> Result<(), HandlerError> {
    if status.is_success() {
        Ok(())
    } else if status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
    {
        Err(HandlerError::Retryable(format!("HTTP {status}")))
    } else {
        Err(HandlerError::Permanent(format!("HTTP {status}")))
    }
}

impl Handler for HttpHandler {
    fn run(&self, ctx: Context) -> HandlerFuture<'_> {
        Box::pin(async move {
            let ClusterAttempt {
                ctx, message: exec, ..
            } = ClusterAttempt::of(&ctx)?;
            let Some(target) = &exec.http else {
                return Err(HandlerError::Permanent(
                    "task has no `http` target for the http handler".into(),
                ));
            };
            let target = resolved(&self.secrets, target, &ctx.output).await?;
            post(
                &ctx.http,
                exec,
                &target,
                &ctx.output,
                ctx.completion.as_ref(),
            )
            .await
        })
    }
}

/// `target` with its secret references resolved. The values (and the secrets of the
/// resolved URL) go to `output`, to be redacted from what the attempt records; an error
/// names the task's URL as written, never a value.
async fn resolved<'t>(
    secrets: &SecretSource,
    target: &'t HttpTarget,
    output: &OutputSlot,
) -> Result<Cow<'t, HttpTarget>, HandlerError> {
    let url_refs = has_references(&target.url);
    if !url_refs && !target.headers.values().any(|v| has_references(v)) {
        return Ok(Cow::Borrowed(target));
    }
    let mut values = Vec::new();
    let result = resolve_target(secrets, target, &mut values).await;
    if let Ok(t) = &result {
        values.extend(url_secret_values(&t.url));
    }
    output.hide(values);
    let resolved = result?;
    let parsed = Url::parse(&resolved.url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
    let Some(host) = parsed.as_ref().and_then(Url::host_str) else {
        return Err(HandlerError::Permanent(format!(
            "http.url {} does not resolve to an http(s) URL with a host",
            mask_url(&target.url)
        )));
    };
    for (name, placement) in placements(target)? {
        secrets.check_destination(name, placement, host, !url_refs)?;
    }
    Ok(Cow::Owned(resolved))
}

/// Each secret the target names, with where it is placed.
fn placements(target: &HttpTarget) -> Result<Vec<(&str, Placement)>, HandlerError> {
    let mut out = Vec::new();
    let url = secret_ref::pieces(&target.url).map_err(HandlerError::Permanent)?;
    let whole = url.len() == 1;
    for piece in url {
        if let secret_ref::Piece::Secret(name) = piece {
            let at = if whole {
                Placement::WholeUrl
            } else {
                Placement::InUrl
            };
            out.push((name, at));
        }
    }
    for value in target.headers.values() {
        for piece in secret_ref::pieces(value).map_err(HandlerError::Permanent)? {
            if let secret_ref::Piece::Secret(name) = piece {
                out.push((name, Placement::Header));
            }
        }
    }
    Ok(out)
}

async fn resolve_target(
    secrets: &SecretSource,
    target: &HttpTarget,
    values: &mut Vec<String>,
) -> Result<HttpTarget, HandlerError> {
    let url = secrets.resolve(&target.url, values).await?;
    let mut headers = BTreeMap::new();
    for (name, value) in &target.headers {
        headers.insert(name.clone(), secrets.resolve(value, values).await?);
    }
    Ok(HttpTarget {
        url,
        headers,
        ..target.clone()
    })
}

/// POSTs `exec` to `target`, following redirects if the task opted in.
async fn post(
    http: &EgressClient,
    exec: &ExecutionMessage,
    target: &HttpTarget,
    output: &OutputSlot,
    completion: Option<&Completion>,
) -> Result<(), HandlerError> {
    let deadline = Instant::now() + exec.timeout();
    let task_url = Url::parse(&target.url).map_err(|e| {
        HandlerError::Permanent(format!(
            "http.url {} is not a valid URL: {e}",
            mask_url(&target.url)
        ))
    })?;
    let encoded = Bytes::from(body(exec, completion)?);
    // A 307 or 308 to another origin repeats the body: without the completion token, which,
    // like the task's headers, is for the task's own origin only. Encoded only then: most
    // requests are answered without a redirect.
    let mut encoded_foreign: Option<Bytes> = None;
    let mut url = task_url.clone();
    let mut method = Method::POST;
    let mut with_body = true;
    for _ in 0..=MAX_REDIRECTS {
        // Masked only for an error: the fire path should not parse the URL again.
        let shown = || mask_url(url.as_str());
        http.check_url(&url)
            .map_err(|e| HandlerError::Permanent(format!("{method} {} refused: {e}", shown())))?;
        let own_origin = url.origin() == task_url.origin();
        let mut req = http
            .client()
            .request(method.clone(), url.clone())
            .timeout(deadline.saturating_duration_since(Instant::now()))
            .header(EXECUTION_ID_HEADER, exec.execution_id.to_string())
            .header(ATTEMPT_HEADER, exec.attempt_number().to_string());
        if own_origin {
            req = with_credentials(req, target, completion);
        }
        if with_body {
            let bytes = match (own_origin, completion) {
                // Without a completion both bodies are the same.
                (true, _) | (false, None) => encoded.clone(),
                (false, Some(_)) => match &encoded_foreign {
                    Some(b) => b.clone(),
                    None => encoded_foreign
                        .insert(Bytes::from(body(exec, None)?))
                        .clone(),
                },
            };
            req = req.header(CONTENT_TYPE, "application/json").body(bytes);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| send_error(&method, &shown(), e))?;
        let status = resp.status();
        if !matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) {
            output.set(excerpt(resp, deadline).await);
            if let (Some(c), StatusCode::ACCEPTED) = (completion, status) {
                c.accept();
            }
            return classify_status(status);
        }
        let next = redirect_target(&resp, &url, &method, &shown(), target.follow_redirects)?;
        // 307 and 308 repeat the request as it was; the others turn it into a GET, as
        // browsers do.
        if !matches!(status.as_u16(), 307 | 308) {
            method = Method::GET;
            with_body = false;
        }
        url = with_task_userinfo(next, &task_url);
    }
    Err(HandlerError::Permanent(format!(
        "POST {} was redirected more than {MAX_REDIRECTS} times",
        mask_url(task_url.as_str())
    )))
}

/// The task's credentials on a request to the task URL's own origin: its headers and, for
/// an `http.async` task, the completion URL and token.
fn with_credentials(
    mut req: reqwest::RequestBuilder,
    target: &HttpTarget,
    completion: Option<&Completion>,
) -> reqwest::RequestBuilder {
    // Validation refuses these; a message ax did not write may still carry them.
    for (k, v) in target
        .headers
        .iter()
        .filter(|(k, _)| !is_reserved_http_header(k))
    {
        req = req.header(k, v);
    }
    // The token is a credential, like the task's headers: only for its own origin.
    if let Some(c) = completion {
        req = req
            .header(COMPLETION_URL_HEADER, c.url())
            .header(COMPLETION_TOKEN_HEADER, c.token());
    }
    req
}

/// Where a redirect answer to `method` `url` (`shown` masked) points, if the task follows
/// redirects and the answer names a usable place.
fn redirect_target(
    resp: &reqwest::Response,
    url: &Url,
    method: &Method,
    shown: &str,
    follow_redirects: bool,
) -> Result<Url, HandlerError> {
    let status = resp.status();
    let next = resp
        .headers()
        .get(LOCATION)
        .and_then(|l| l.to_str().ok())
        .and_then(|l| url.join(l).ok())
        .ok_or_else(|| {
            HandlerError::Permanent(format!(
                "{method} {shown} answered HTTP {status} without a usable Location"
            ))
        })?;
    if !follow_redirects {
        return Err(HandlerError::Permanent(format!(
            "{method} {shown} answered HTTP {status}, redirecting to {}: the http handler \
             follows redirects only for tasks with \"http\": {{\"follow_redirects\": true}}",
            mask_url(next.as_str())
        )));
    }
    Ok(next)
}

/// The response's status and the start of its body, for the history: at most
/// [`MAX_OUTPUT_BYTES`] are read (and one more to know whether it went on), whatever the
/// body's size, and no later than the attempt's deadline. A body not read to its end costs
/// the connection (it is not reused); bodies that fit are read whole, so the usual short
/// answer keeps it.
async fn excerpt(mut resp: reqwest::Response, deadline: Instant) -> AttemptOutput {
    let status = Some(resp.status().as_u16());
    let mut bytes: Vec<u8> = Vec::new();
    let mut more = false;
    let read = async {
        while bytes.len() <= MAX_OUTPUT_BYTES {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_OUTPUT_BYTES + 1 - bytes.len();
                    bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    more |= chunk.len() > room;
                }
                // A body cut off by the server or the network: what came is still the
                // answer's start.
                Ok(None) | Err(_) => break,
            }
        }
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if tokio::time::timeout(left, read).await.is_err() {
        more = true;
    }
    AttemptOutput::new(status, &bytes, more)
}

/// The request body: the execution without its `http` target. The receiver gets the
/// task's headers as headers; a copy in the body would only spread the credentials they
/// carry to wherever the receiver stores or forwards bodies, and to another origin after a
/// redirect.
fn body(exec: &ExecutionMessage, completion: Option<&Completion>) -> Result<Vec<u8>, HandlerError> {
    let fail =
        |e: serde_json::Error| HandlerError::Permanent(format!("cannot encode the execution: {e}"));
    let mut value = serde_json::to_value(ExecutionMessage {
        http: None,
        ..exec.clone()
    })
    .map_err(fail)?;
    if let Some(obj) = value.as_object_mut() {
        // The receiver reads attempts as people do, from 1, like `X-Ax-Attempt`.
        obj.insert("attempt".into(), exec.attempt_number().into());
        if let Some(serde_json::Value::Array(errors)) = obj.get_mut("previous_errors") {
            for (e, previous) in errors.iter_mut().zip(&exec.previous_errors) {
                e["attempt"] = previous.attempt.saturating_add(1).into();
            }
        }
    }
    if let (Some(c), Some(obj)) = (completion, value.as_object_mut()) {
        obj.insert("completion_url".into(), c.url().into());
        obj.insert("completion_token".into(), c.token().into());
    }
    serde_json::to_vec(&value).map_err(fail)
}

/// `next` with the task URL's user info when it goes to the task's origin without its own,
/// so a redirect within the origin keeps its credentials (and one to another origin never
/// gets them).
fn with_task_userinfo(mut next: Url, task_url: &Url) -> Url {
    let bare = |u: &Url| u.username().is_empty() && u.password().is_none();
    if bare(&next) && !bare(task_url) && next.origin() == task_url.origin() {
        // Cannot fail: an http(s) URL with a host takes user info.
        let _ = next.set_username(task_url.username());
        let _ = next.set_password(task_url.password());
    }
    next
}

/// A failed request as a handler error: a refusal of the guard is permanent (with its
/// reason), other failures retryable. reqwest's text quotes the URL, so it is left out and
/// the masked one shown instead.
fn send_error(method: &Method, shown: &str, e: reqwest::Error) -> HandlerError {
    if let Some(refusal) = EgressClient::refusal(&e) {
        return HandlerError::Permanent(format!("{method} {shown} refused: {refusal}"));
    }
    let builder = e.is_builder();
    let text = mask_urls_in(&ax_scheduler_core::error::error_chain(&e.without_url()));
    if builder {
        HandlerError::Permanent(format!("cannot build the {method} to {shown}: {text}"))
    } else {
        HandlerError::Retryable(format!("{method} {shown} failed: {text}"))
    }
}

impl Handler for LogHandler {
    fn run(&self, ctx: Context) -> HandlerFuture<'_> {
        Box::pin(async move {
            tracing::info!(
                task_id = %ctx.task_id(),
                namespace = %ctx.namespace(),
                execution_id = %ctx.execution_id(),
                fire_at = %ctx.fire_at(),
                attempt = ctx.attempt(),
                payload = %ctx.payload(),
                "log handler ran an execution"
            );
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified() {
        assert!(classify_status(StatusCode::OK).is_ok());
        assert!(classify_status(StatusCode::NO_CONTENT).is_ok());
        for s in [408u16, 429, 500, 502, 503] {
            let e = classify_status(StatusCode::from_u16(s).unwrap()).unwrap_err();
            assert!(e.is_retryable(), "{s}");
        }
        for s in [400u16, 401, 404, 422] {
            let e = classify_status(StatusCode::from_u16(s).unwrap()).unwrap_err();
            assert!(!e.is_retryable(), "{s}");
        }
    }
}
