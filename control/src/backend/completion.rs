//! A job's report on its execution (`POST /executions/{id}/complete`), for tasks with
//! `http.async`.
//!
//! The token is the credential: its claim names the attempt and the queue, its hash must be
//! the one stored for that attempt (compared in constant time), and nothing else is needed,
//! so any replica answers. The end itself is the worker crate's [`end_waiting`] (the retry
//! policy, one script that writes the end with its retry or dead letter); this replica then
//! publishes the attempt's report through the same stream and history as a worker's end, and
//! the leader settles the task from it. A report is published by the call that ended the
//! attempt only, so a repeat, or a completion that lost to the deadline or a kill, publishes
//! nothing.

use std::time::Duration;

use ax_queue::{
    token_hash, AwaitingRecord, EndBy, EndResult, Progress, ProgressResult, Queue, ReportedEnd,
    ReportedStatus, TokenClaim,
};
use ax_scheduler_core::redact::{redact_values, target_secret_values};
use ax_scheduler_core::secret_ref::has_references;
use ax_scheduler_core::{AttemptOutput, ExecutionId, UtcMillis};
use ax_worker::awaiting::{end_waiting, Ended, WaitingEnd};

use super::{errors, Backend};
use crate::api::{ApiError, CompletionReply, CompletionRequest, CompletionStatus};

/// How often a completion that found its attempt moving to awaiting reads it again.
const MOVED_ROUNDS: usize = 3;

fn conflict(id: ExecutionId, what: &str) -> ApiError {
    ApiError::Conflict(format!(
        "execution {id}: {what}; this report changes nothing"
    ))
}

fn stale(id: ExecutionId, attempt: u32, current: u32, end: &str) -> ApiError {
    let how = if end.is_empty() {
        "ended".to_owned()
    } else {
        format!("ended `{end}`")
    };
    conflict(
        id,
        // Attempts are told as people count them, from 1.
        &format!(
            "attempt {} {how} and attempt {} runs now, with a token of its own",
            attempt.saturating_add(1),
            current.saturating_add(1)
        ),
    )
}

fn forbidden(id: ExecutionId) -> ApiError {
    ApiError::Forbidden(format!(
        "the token is not the one issued for execution {id}"
    ))
}

/// The claim of a report's token, or why there is none.
fn parse_claim(request: &CompletionRequest) -> Result<TokenClaim, ApiError> {
    TokenClaim::parse(request.token.trim()).ok_or_else(|| {
        ApiError::Unauthorized(
            "a report needs `token`: the completion token the job's request carried \
             (header x-ax-completion-token, body field completion_token)"
                .into(),
        )
    })
}

/// One reading of the attempt a report names: what the report is checked and applied
/// against until the attempt moves.
struct Round<'a> {
    id: ExecutionId,
    claim: &'a TokenClaim,
    rec: &'a AwaitingRecord,
    /// The SHA-256 of the report's token.
    hash: &'a str,
    now: UtcMillis,
}

impl Round<'_> {
    fn reply(&self, state: &str, repeated: bool, deadline: Option<UtcMillis>) -> CompletionReply {
        reply(self.id, self.claim.attempt, state, repeated, deadline)
    }

    /// Records a progress report: it pushes the attempt's deadline a timeout further.
    async fn progress(
        &self,
        q: &Queue,
        request: &CompletionRequest,
    ) -> Result<CompletionReply, ApiError> {
        let (id, attempt) = (self.id, self.claim.attempt);
        let timeout = self
            .rec
            .message
            .as_ref()
            .map_or(Duration::ZERO, |(_, m)| m.timeout());
        let deadline = self.now.add(timeout);
        let progress = progress(request, self.now)?;
        match q
            .progress_awaiting(
                &self.claim.queue,
                id,
                attempt,
                self.hash,
                deadline,
                &progress,
            )
            .await
            .map_err(errors::queue)?
        {
            ProgressResult::Recorded => Ok(self.reply("waiting", false, Some(deadline))),
            ProgressResult::Stale { current, end } => Err(stale(id, attempt, current, &end)),
            ProgressResult::Done(end) => Err(conflict(id, &format!("the attempt ended `{end}`"))),
            ProgressResult::Forbidden | ProgressResult::Gone => Err(forbidden(id)),
        }
    }
}

fn reply(
    id: ExecutionId,
    attempt: u32,
    state: &str,
    repeated: bool,
    deadline: Option<UtcMillis>,
) -> CompletionReply {
    CompletionReply {
        execution_id: id,
        attempt: attempt.saturating_add(1),
        state: state.to_owned(),
        repeated,
        deadline,
    }
}

/// The answer to an end report (`label`) of `attempt` from what ending the attempt did;
/// `None` when the attempt moved meanwhile and must be read again.
fn end_reply(
    id: ExecutionId,
    attempt: u32,
    label: &str,
    result: EndResult,
) -> Option<Result<CompletionReply, ApiError>> {
    Some(match result {
        // `Early`: kept for the worker, which has not seen the 202 yet and settles it.
        EndResult::Ended | EndResult::Early => Ok(reply(id, attempt, label, false, None)),
        EndResult::Done(end) if end == label => Ok(reply(id, attempt, label, true, None)),
        EndResult::Done(end) => Err(conflict(
            id,
            &format!("the attempt ended `{end}` before this `{label}`"),
        )),
        EndResult::Stale { end, .. } if end == label => Ok(reply(id, attempt, label, true, None)),
        EndResult::Stale { current, end } => Err(stale(id, attempt, current, &end)),
        EndResult::Moved => return None,
        EndResult::Forbidden | EndResult::Gone | EndResult::Alive => Err(forbidden(id)),
    })
}

impl Backend {
    pub(super) async fn complete(
        &self,
        id: ExecutionId,
        request: CompletionRequest,
    ) -> Result<CompletionReply, ApiError> {
        let claim = parse_claim(&request)?;
        let token = request.token.trim();
        let q = self.queue().await?;
        // Masked once, when a record first names the task (its secrets are read from files):
        // a round that found the attempt moving reads the record again, not the secrets.
        let mut masked: Option<CompletionRequest> = None;
        for _ in 0..MOVED_ROUNDS {
            let rec = q
                .awaiting_record(&claim.queue, id)
                .await
                .map_err(errors::queue)?
                .ok_or_else(|| forbidden(id))?;
            if !rec.token_matches(claim.attempt, token) {
                return Err(forbidden(id));
            }
            let hash = token_hash(token);
            let round = Round {
                id,
                claim: &claim,
                rec: &rec,
                hash: &hash,
                now: self.wall.now(),
            };
            // What the job sends goes to the history: its task's credentials (inline, and the
            // secrets its target names, read as the worker read them) are masked first, as
            // the worker masks a synchronous answer.
            let request = match (&masked, &rec.message) {
                (Some(done), _) => done.clone(),
                (None, Some(_)) => masked
                    .insert(self.redacted(&rec, request.clone()).await)
                    .clone(),
                (None, None) => request.clone(),
            };
            let status = match request.status {
                CompletionStatus::Progress => return round.progress(q, &request).await,
                CompletionStatus::Succeeded => ReportedStatus::Succeeded,
                CompletionStatus::Failed => ReportedStatus::Failed,
            };
            if let Some(reply) = self.end(q, &round, &request, status).await? {
                return Ok(reply);
            }
        }
        Err(ApiError::Unavailable(format!(
            "execution {id} is being handed from its worker to the completion queue; report again"
        )))
    }

    /// `request` with the credentials of the execution's task masked in its message and
    /// output.
    async fn redacted(
        &self,
        rec: &AwaitingRecord,
        mut request: CompletionRequest,
    ) -> CompletionRequest {
        let Some((_, message)) = &rec.message else {
            return request;
        };
        let mut values = target_secret_values(message.http.as_ref(), message.command.as_ref());
        if let Some(http) = &message.http {
            // A secret this replica cannot read was not sent by it either; what it can read
            // is masked.
            let mut resolved = Vec::new();
            let texts = std::iter::once(&http.url).chain(http.headers.values());
            for text in texts.filter(|t| has_references(t)) {
                let _ = self.secrets.resolve(text, &mut resolved).await;
            }
            values.extend(resolved);
        }
        if values.is_empty() {
            return request;
        }
        request.message = request.message.map(|m| redact_values(&m, &values));
        request.output = request.output.map(|o| match o {
            serde_json::Value::String(s) => serde_json::Value::String(redact_values(&s, &values)),
            other => serde_json::from_str(&redact_values(&other.to_string(), &values))
                .unwrap_or(serde_json::Value::Null),
        });
        request
    }

    /// Ends the attempt as the report says and publishes its end if this call ended it;
    /// `None` when the attempt moved meanwhile.
    async fn end(
        &self,
        q: &Queue,
        round: &Round<'_>,
        request: &CompletionRequest,
        status: ReportedStatus,
    ) -> Result<Option<CompletionReply>, ApiError> {
        let ended = reported(request, status, round.now);
        let (result, report) = end_waiting(
            q,
            round.rec,
            round.claim.attempt,
            EndBy::Completion(round.hash),
            WaitingEnd::Reported(ended),
            round.now,
            true,
        )
        .await
        .map_err(errors::queue)?;
        if let (EndResult::Ended, Some(ended)) = (&result, report) {
            self.publish(q, ended).await;
        }
        end_reply(round.id, round.claim.attempt, status.label(), result).transpose()
    }

    /// Relays an attempt's end for the leader and the history, as a worker's end goes. The
    /// script that ended it put its record in the queue's end log: if this relay fails, the
    /// sweeper of the log (any worker of the queue) relays it a few seconds later.
    async fn publish(&self, q: &Queue, ended: Ended) {
        let report = &ended.report;
        match q.relay_ends(&[ended.end]).await {
            Ok(()) => tracing::info!(
                task_id = %format!("{}/{}", report.namespace, report.task_id),
                execution_id = %report.execution_id,
                attempt = report.attempt.saturating_add(1),
                outcome = report.end.label(),
                "finished (reported by its job)"
            ),
            Err(e) => tracing::warn!(
                execution_id = %report.execution_id,
                error = %e,
                "the end is recorded in the queue's end log; its sweeper tells the leader"
            ),
        }
    }
}

fn reported(request: &CompletionRequest, status: ReportedStatus, now: UtcMillis) -> ReportedEnd {
    ReportedEnd {
        status,
        message: request
            .message
            .clone()
            .map(ax_scheduler_core::execution::shown_error),
        output: request.output.as_ref().map(|o| {
            let text = match o {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            AttemptOutput::new(None, text.as_bytes(), false)
        }),
        retryable: request.retryable.unwrap_or(true),
        at: now,
    }
}

fn progress(request: &CompletionRequest, now: UtcMillis) -> Result<Progress, ApiError> {
    if let Some(p) = request.percent {
        if !(0.0..=100.0).contains(&p) {
            return Err(ApiError::invalid(format!(
                "percent: {p} is outside 0 to 100"
            )));
        }
    }
    Ok(Progress {
        percent: request.percent,
        message: request
            .message
            .clone()
            .map(ax_scheduler_core::execution::shown_error),
        at: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(result: EndResult) -> Option<Result<CompletionReply, ApiError>> {
        end_reply(ExecutionId::from_u128(7), 2, "succeeded", result)
    }

    #[test]
    fn an_end_report_is_answered_from_what_ending_the_attempt_did() {
        for (result, repeated) in [
            (EndResult::Ended, false),
            (EndResult::Early, false),
            (EndResult::Done("succeeded".into()), true),
            (
                EndResult::Stale {
                    current: 3,
                    end: "succeeded".into(),
                },
                true,
            ),
        ] {
            let reply = answer(result).unwrap().unwrap();
            assert_eq!(reply.state, "succeeded");
            // Index 2 in the queue is the third attempt, as people count.
            assert_eq!(reply.attempt, 3);
            assert_eq!(reply.repeated, repeated);
            assert_eq!(reply.deadline, None);
        }
        assert!(matches!(
            answer(EndResult::Done("failed".into())),
            Some(Err(ApiError::Conflict(_)))
        ));
        assert!(matches!(
            answer(EndResult::Stale {
                current: 3,
                end: "failed".into()
            }),
            Some(Err(ApiError::Conflict(_)))
        ));
        assert!(answer(EndResult::Moved).is_none(), "read the record again");
        for result in [EndResult::Forbidden, EndResult::Gone, EndResult::Alive] {
            assert!(matches!(answer(result), Some(Err(ApiError::Forbidden(_)))));
        }
    }
}
