//! The API of ax as data and one trait, with no transport: what the HTTP routes, the CLI and
//! the backends share.
//!
//! The request and response types, the [`ApiBackend`] trait they travel through and the
//! [`ApiError`] every call can fail with live here, free of HTTP, so the CLI, the output
//! formats and the backends depend on the API without depending on the web server. The
//! routes that put it on a port, and the status codes of each error, are in
//! the `ax` binary's `http` module. One file per concept (tasks, executions, the dead-letter queue, status,
//! completions, access, scheduled executions); everything is re-exported here, so callers name `crate::api::X`.

mod access;
mod backend;
mod completion;
mod dlq;
mod error;
mod executions;
mod find;
mod http;
mod scheduled;
mod status;
mod tasks;

pub use access::{
    new_token, parse_sha256, sha256, to_hex, Principal, TokenRole, WhoAmI, ANONYMOUS,
    API_TOKEN_NAME, REFUSAL_REASONS,
};
pub use backend::{ApiBackend, ApiFuture};
pub use completion::{CompletionReply, CompletionRequest, CompletionStatus};
pub use dlq::{
    AttemptFailure, DeadLetter, DlqRequeue, DlqRequeued, RequeueOnto, RequeuedLetter,
    REQUEUED_LISTED,
};
pub use error::{ApiError, LimitKind};
pub use executions::{
    ExecutionList, ExecutionParams, ExecutionQuery, ExecutionRecord, ExecutionStory, FireView,
    KillResult, KilledExecution, Outcome, PendingAttempt, WaitingAttempt, DEFAULT_EXECUTION_PAGE,
    FAILED_LABELS, OUTCOME_LABELS,
};
pub use find::{
    id_fragment, id_matches, ExecutionMatch, ExecutionMatches, FindParams, FIND_MATCHES_MAX,
    FIND_SCAN_MAX, MIN_ID_FRAGMENT,
};
pub use http::{limit_of_status, ErrorBody, ErrorDetail};
pub use scheduled::{
    page_cursor, parse_page_cursor, parse_scheduled_id, Instant, RescheduleRequest, ScheduleBatch,
    ScheduleReply, ScheduleRequest, ScheduleResult, ScheduledPage, ScheduledView, SCHEDULE_HORIZON,
    SCHEDULE_REQUEST_MAX,
};
pub use status::{
    ClockView, EtcdDbView, QueueContents, QueueState, QueueView, QueuedExecution, ReplicaState,
    ReplicaView, ShardsView, StatusView,
};
pub use tasks::{
    BackfillParams, BackfillResult, PutOptions, PutTaskResult, TaskList, TaskQuery, TaskView,
    TriggerParams, TriggerResult, BACKFILL_HARD_MAX, DEFAULT_BACKFILL_MAX, DEFAULT_TASK_PAGE,
    PREVIEW_FIRES, UPCOMING_FIRES,
};

/// A task's address, `{prefix}/tasks/{namespace}/{id}`: the core's key, so the engine and
/// the API name a task the same way.
pub use ax_scheduler_core::TaskKey;

/// Response header holding the token of the next page of a listing.
pub const CONTINUE_HEADER: &str = "x-ax-continue";

/// Largest `limit` a list call accepts.
pub const MAX_LIST_LIMIT: usize = 1000;

/// A namespace name as task specs allow it; [`ApiError::Invalid`] otherwise.
pub fn check_namespace(namespace: &str) -> Result<(), ApiError> {
    ax_scheduler_core::validate::check_name(namespace)
        .map_err(|e| ApiError::invalid(format!("namespace: `{namespace}` {e}")))
}
