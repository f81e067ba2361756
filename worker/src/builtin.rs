//! The built-in handlers: `http` posts the execution to the task's URL, `log` logs it.
//!
//! `http` classifies answers for the retry policy: 2xx is success; 408 and 429 (the server
//! asks to come back) and 5xx are retryable, as are connection errors and timeouts; any
//! other status is permanent, since sending the same request again gets the same answer.
//! The request timeout is the attempt's timeout, so a hung server cannot outlive the attempt.
//!
//! Delivery is at least once (a worker that dies after the request and before settling has
//! its message run again), so every request names its execution and attempt, in headers
//! ([`EXECUTION_ID_HEADER`], [`ATTEMPT_HEADER`]) and in the body (`execution_id`,
//! `attempt`): a receiver drops a repeat by the execution id, which retries and redeliveries
//! keep.

use ax_queue::ExecutionMessage;
use reqwest::StatusCode;

use crate::handler::{Handler, HandlerContext, HandlerError, HandlerFuture};

/// The header naming the execution (stable across retries and redeliveries).
pub const EXECUTION_ID_HEADER: &str = "x-ax-execution-id";
/// The header naming the attempt (0 for the first).
pub const ATTEMPT_HEADER: &str = "x-ax-attempt";

/// POSTs the execution as JSON to the task's `http.url` with its headers.
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpHandler;

/// Writes the execution to the log at info level.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogHandler;

/// Does nothing and succeeds: for trying ax out and for measuring the scheduling path alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopHandler;

impl Handler for NoopHandler {
    fn run<'a>(&'a self, _ctx: HandlerContext, _exec: &'a ExecutionMessage) -> HandlerFuture<'a> {
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
    fn run<'a>(&'a self, ctx: HandlerContext, exec: &'a ExecutionMessage) -> HandlerFuture<'a> {
        Box::pin(async move {
            let Some(target) = &exec.http else {
                return Err(HandlerError::Permanent(
                    "task has no `http` target for the http handler".into(),
                ));
            };
            let mut req = ctx
                .http
                .post(&target.url)
                .timeout(exec.timeout())
                .header(EXECUTION_ID_HEADER, exec.execution_id.to_string())
                .header(ATTEMPT_HEADER, exec.attempt.to_string())
                .json(exec);
            for (k, v) in &target.headers {
                req = req.header(k, v);
            }
            match req.send().await {
                Ok(resp) => classify_status(resp.status()),
                Err(e) if e.is_builder() => Err(HandlerError::Permanent(format!(
                    "cannot build a request to {}: {e}",
                    target.url
                ))),
                Err(e) => Err(HandlerError::Retryable(format!(
                    "POST {} failed: {e}",
                    target.url
                ))),
            }
        })
    }
}

impl Handler for LogHandler {
    fn run<'a>(&'a self, _ctx: HandlerContext, exec: &'a ExecutionMessage) -> HandlerFuture<'a> {
        Box::pin(async move {
            tracing::info!(
                task_id = %exec.task_id,
                namespace = %exec.namespace,
                execution_id = %exec.execution_id,
                fire_at = %exec.fire_at,
                attempt = exec.attempt,
                payload = %exec.payload,
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
