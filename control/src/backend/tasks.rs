//! Task operations: views joining spec and state, register, pause and resume, run now.
//!
//! A view is built from the stored value (valid or not) and the leader's state record. The
//! status shown follows the spec where the leader has not caught up yet (it acts within a
//! second of a change): a paused spec shows `PAUSED`, a spec that is valid again or resumed
//! shows `WAITING` until the leader re-arms it, and a task no leader has seen yet shows
//! `WAITING`, the state machine's "registered, no fire computed yet".

use std::collections::{HashMap, HashSet};

use ax_registry::{PageCursor, TaskPage, TriggerRequest};
use ax_scheduler_core::task::DEFAULT_NAMESPACE;
use ax_scheduler_core::{TaskSpec, TaskState, TaskStatus, UtcMillis};

use super::{cursor, errors, Backend};
use crate::api::{
    ApiError, LimitKind, PutOptions, PutTaskResult, TaskKey, TaskList, TaskQuery, TaskView,
    TriggerParams, TriggerResult, UPCOMING_FIRES,
};
use crate::api::{Outcome, PREVIEW_FIRES};

/// The view of the value stored under `namespace/id`.
pub(super) fn view_from_raw(
    namespace: &str,
    id: &str,
    raw: &[u8],
    state: Option<&TaskState>,
    now: UtcMillis,
) -> TaskView {
    match TaskSpec::from_json(raw, namespace, id) {
        Ok(spec) => view_of_spec(&spec, state, now),
        Err(errors) => TaskView {
            namespace: namespace.to_owned(),
            id: id.to_owned(),
            spec: serde_json::from_slice(raw)
                .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(raw).into())),
            status: Some(TaskStatus::Invalid.as_str().to_owned()),
            next_fire: None,
            last_fire: state.and_then(|s| s.last_fire_at),
            errors: errors.iter().map(ToString::to_string).collect(),
            namespace_paused: false,
            throttled: None,
            schedule_text: None,
            upcoming_fires: Vec::new(),
            last_outcome: last_outcome(state),
            last_error: None,
        },
    }
}

/// A task of a paused namespace fires no more, whatever its own state says: `PAUSED`, no
/// next fire (an invalid spec stays `INVALID`, the more urgent news).
fn mark_namespace_paused(view: &mut TaskView, paused: &HashSet<String>) {
    if !paused.contains(&view.namespace) {
        return;
    }
    view.namespace_paused = true;
    view.throttled = None;
    if view.status.as_deref() != Some(TaskStatus::Invalid.as_str()) {
        view.status = Some(TaskStatus::Paused.as_str().to_owned());
        view.next_fire = None;
    }
}

/// How the last finished execution ended, from the state's counters: a failure since the
/// last success means the last one failed.
fn last_outcome(state: Option<&TaskState>) -> Option<Outcome> {
    let s = state?;
    s.last_finished_at?;
    Some(if s.consecutive_failures > 0 {
        Outcome::Failed
    } else {
        Outcome::Succeeded
    })
}

/// The view of a valid spec: the spec in its normalized form (every default spelled out).
/// A waiting task whose state names no next fire yet (the leader records it once the fire
/// is armed) shows the one its schedule gives, computed as the leader computes it.
pub(super) fn view_of_spec(spec: &TaskSpec, state: Option<&TaskState>, now: UtcMillis) -> TaskView {
    let (status, next_fire) = if spec.paused {
        (TaskStatus::Paused, None)
    } else {
        match state {
            Some(s) if matches!(s.status, TaskStatus::Paused | TaskStatus::Invalid) => {
                (TaskStatus::Waiting, None)
            }
            Some(s) => (s.status, s.next_fire_at),
            None => (TaskStatus::Waiting, None),
        }
    };
    let next_fire = match (status, next_fire) {
        (TaskStatus::Waiting, None) => scheduled_next_fire(spec, state, now),
        (_, next) => next,
    };
    TaskView {
        namespace: spec.namespace.to_string(),
        id: spec.id.to_string(),
        spec: serde_json::from_slice(&spec.to_json()).unwrap_or(serde_json::Value::Null),
        status: Some(status.as_str().to_owned()),
        next_fire,
        last_fire: state.and_then(|s| s.last_fire_at),
        errors: Vec::new(),
        namespace_paused: false,
        throttled: state
            .filter(|_| !spec.paused)
            .and_then(|s| s.throttled.clone()),
        schedule_text: Some(spec.schedule.describe()),
        upcoming_fires: Vec::new(),
        last_outcome: last_outcome(state),
        last_error: state
            .filter(|s| s.consecutive_failures > 0)
            .and_then(|s| s.last_error.clone()),
    }
}

/// The schedule's next fire at or after `now`, from the countdown anchor the leader recorded
/// (else the spec's creation, else now); `None` past a one-shot's instant.
fn scheduled_next_fire(
    spec: &TaskSpec,
    state: Option<&TaskState>,
    now: UtcMillis,
) -> Option<UtcMillis> {
    let compiled = spec.schedule.compile().ok()?;
    let anchor = state
        .and_then(|s| s.anchor_at)
        .or(spec.created_at)
        .unwrap_or(now);
    compiled.upcoming(now, anchor, 1).into_iter().next()
}

/// The next `n` fires of a task, from its armed next fire when the leader computed one
/// (then on, from the countdown anchor the leader recorded), else from `now`. None for a
/// paused task: it does not fire.
pub(super) fn upcoming_fires(
    spec: &TaskSpec,
    state: Option<&TaskState>,
    next_fire: Option<UtcMillis>,
    now: UtcMillis,
    n: usize,
) -> Vec<UtcMillis> {
    if spec.paused || n == 0 {
        return Vec::new();
    }
    let Ok(compiled) = spec.schedule.compile() else {
        return Vec::new();
    };
    let anchor = state
        .and_then(|s| s.anchor_at)
        .or(spec.created_at)
        .unwrap_or(now);
    // An armed fire already past (the leader is about to send it, or is down) is shown as
    // the task's next fire; the list ahead starts at now, never in the past.
    match next_fire {
        Some(first) if first >= now => std::iter::once(first)
            .chain(compiled.upcoming(first, anchor, n - 1))
            .collect(),
        _ => compiled.upcoming(now, anchor, n),
    }
}

/// The next fires of `spec` after `now`, its countdown starting at `created_at` (else now).
pub(super) fn next_fires(spec: &TaskSpec, now: UtcMillis) -> Result<Vec<UtcMillis>, ApiError> {
    let compiled = spec
        .schedule
        .compile()
        .map_err(|e| ApiError::invalid(format!("schedule: {e}")))?;
    Ok(compiled.upcoming(now, spec.created_at.unwrap_or(now), PREVIEW_FIRES))
}

/// The key a spec submitted as JSON names: its `namespace` (default `default`) and `id`.
fn key_of(doc: &serde_json::Value) -> Result<TaskKey, ApiError> {
    let Some(obj) = doc.as_object() else {
        return Err(ApiError::invalid("the task spec must be a JSON object"));
    };
    let id = match obj.get("id") {
        Some(serde_json::Value::String(id)) => id.clone(),
        Some(_) => return Err(ApiError::invalid("id: must be a string")),
        None => {
            return Err(ApiError::invalid(
                "id: missing; the task id is taken from the spec's \"id\" field",
            ))
        }
    };
    let namespace = match obj.get("namespace") {
        Some(serde_json::Value::String(ns)) => ns.clone(),
        Some(_) => return Err(ApiError::invalid("namespace: must be a string")),
        None => DEFAULT_NAMESPACE.to_owned(),
    };
    Ok(TaskKey::new(namespace, id))
}

/// What a task view says of a state record that cannot be decoded.
fn unreadable_state(error: &str) -> String {
    format!("state record unreadable (the next takeover deletes it, the next state write replaces it): {error}")
}

impl Backend {
    /// The task's state, or why it cannot be read (the view is still useful without it).
    async fn state_of(&self, namespace: &str, id: &str) -> Result<Option<TaskState>, String> {
        match self.registry.get_state(namespace, id).await {
            Ok(s) => Ok(s.map(|s| s.state)),
            Err(e) => {
                tracing::warn!(task_id = id, namespace, error = %e, "cannot read task state");
                Err(e.to_string())
            }
        }
    }

    /// One page of the tasks `query` selects, with their states, in key order. Pages are
    /// read from etcd at one revision, `limit` tasks at a time (at least
    /// [`FILTERED_READ`] with a filter); a filter that matches few tasks reads on until the
    /// page is full, the tasks end, or `limits.max_list_scan` keys were read: then the page
    /// is short (even empty) and its token resumes after the last key read, so a filter
    /// that matches nothing costs one bounded request per page, never a scan of every task.
    pub(super) async fn list_page_views(&self, query: &TaskQuery) -> Result<TaskList, ApiError> {
        let limit = query.page_size()?;
        let status = query.status_filter()?;
        let label = query.label_filter();
        let tasks_prefix = self.registry.keys().tasks_prefix();
        let filter = cursor::fingerprint(query);
        let namespace = query.namespace.as_deref();
        let mut cursor = match &query.continue_token {
            Some(t) => Some(cursor::decode(t, &tasks_prefix, namespace, &filter)?),
            None => None,
        };
        let token = |c: &PageCursor| {
            cursor::encode(c, &tasks_prefix, &filter).ok_or_else(|| {
                ApiError::Internal(format!(
                    "listed key {:?} is outside the task prefix",
                    c.after
                ))
            })
        };
        let filtered = status.is_some() || label.is_some() || query.search.is_some();
        let read = if filtered {
            limit.max(FILTERED_READ)
        } else {
            limit
        }
        .min(self.max_list_scan);
        let paused = self.paused_namespace_names().await?;
        let mut items = Vec::new();
        let mut scanned = 0usize;
        loop {
            let page = self
                .registry
                .list_page(namespace, cursor.as_ref(), read)
                .await
                .map_err(errors::registry)?;
            scanned += page.listing.tasks.len() + page.listing.invalid.len();
            let revision = page.listing.revision;
            let more = page.next.clone();
            let views = views_of_page(page, self.wall.now());
            let last = views.len();
            for (i, mut view) in views.into_iter().enumerate() {
                mark_namespace_paused(&mut view, &paused);
                let wanted = status.is_none_or(|s| view.status.as_deref() == Some(s.as_str()))
                    && query.id_matches(&view.id)
                    && label.is_none_or(|(k, v)| has_label(&view, k, v));
                if !wanted {
                    continue;
                }
                let key = self.registry.keys().task(&view.namespace, &view.id);
                items.push(view);
                if items.len() == limit {
                    let ended = i + 1 == last && more.is_none();
                    let continue_token = match ended {
                        true => None,
                        false => Some(token(&PageCursor {
                            revision,
                            after: key,
                        })?),
                    };
                    return Ok(TaskList {
                        items,
                        continue_token,
                    });
                }
            }
            match more {
                Some(next) if scanned >= self.max_list_scan => {
                    return Ok(TaskList {
                        items,
                        continue_token: Some(token(&next)?),
                    })
                }
                Some(next) => cursor = Some(next),
                None => {
                    return Ok(TaskList {
                        items,
                        continue_token: None,
                    })
                }
            }
        }
    }

    pub(super) async fn get_view(&self, key: &TaskKey) -> Result<TaskView, ApiError> {
        let raw = self.raw_spec(key).await?.ok_or_else(|| not_found(key))?;
        let state = self.state_of(&key.namespace, &key.id).await;
        let known = state.as_ref().ok().and_then(Option::as_ref);
        let now = self.wall.now();
        let mut view = view_from_raw(&key.namespace, &key.id, &raw, known, now);
        mark_namespace_paused(&mut view, &self.paused_namespace_names().await?);
        if let Ok(spec) = TaskSpec::from_json(&raw, &key.namespace, &key.id) {
            if !view.namespace_paused {
                view.upcoming_fires =
                    upcoming_fires(&spec, known, view.next_fire, now, UPCOMING_FIRES);
            }
        }
        if let Err(error) = &state {
            view.errors.push(unreadable_state(error));
        }
        Ok(view)
    }

    /// The names of the paused namespaces, for the views to say so.
    async fn paused_namespace_names(&self) -> Result<HashSet<String>, ApiError> {
        Ok(self
            .registry
            .paused_namespaces()
            .await
            .map_err(errors::registry)?
            .into_iter()
            .map(|p| p.namespace)
            .collect())
    }

    /// The stored value of a task spec, as written.
    async fn raw_spec(&self, key: &TaskKey) -> Result<Option<Vec<u8>>, ApiError> {
        let mut kv = self.etcd.kv_client();
        let k = self.registry.keys().task(&key.namespace, &key.id);
        let resp = tokio::time::timeout(self.request_timeout, kv.get(k, None))
            .await
            .map_err(|_| {
                ApiError::Unavailable(format!(
                    "etcd task get timed out after {}",
                    humantime::format_duration(self.request_timeout)
                ))
            })?
            .map_err(|e| errors::etcd("task get", e))?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Whether a task is registered (valid or not).
    pub(super) async fn exists(&self, key: &TaskKey) -> Result<bool, ApiError> {
        Ok(self.raw_spec(key).await?.is_some())
    }

    pub(super) async fn put(
        &self,
        doc: serde_json::Value,
        opts: PutOptions,
    ) -> Result<PutTaskResult, ApiError> {
        let (key, mut spec) = self.checked_spec(&doc, &opts).await?;
        let now = self.wall.now();
        if !opts.dry_run && spec.created_at.is_none() {
            // So that a `delay` or `every` countdown starts at registration, whichever
            // replica leads when the spec is first seen.
            spec.created_at = Some(now);
        }
        let next_fires = next_fires(&spec, now)?;
        if opts.dry_run {
            return Ok(put_result(&key, false, false, next_fires, None));
        }
        self.write_spec(&key, &spec, now, next_fires).await
    }

    /// The spec `doc` holds, with every check past its own (the command allowed, the
    /// handler served) reported together with its own problems in one answer.
    async fn checked_spec(
        &self,
        doc: &serde_json::Value,
        opts: &PutOptions,
    ) -> Result<(TaskKey, TaskSpec), ApiError> {
        let key = key_of(doc)?;
        let bytes = serde_json::to_vec(doc)
            .map_err(|e| ApiError::Internal(format!("cannot encode the spec: {e}")))?;
        let spec = match TaskSpec::from_json(&bytes, &key.namespace, &key.id) {
            Ok(spec) => spec,
            Err(errors) => {
                let mut errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                // The handler is checked too, as written, so that fixing the spec's own
                // problems does not reveal one more.
                if !opts.allow_unserved_handler {
                    errors.extend(self.unserved_handler_of(doc).await?);
                }
                return Err(ApiError::Invalid {
                    message: format!("task {key} is invalid"),
                    errors,
                });
            }
        };
        let mut problems = check_command(&spec, &self.config.commands)
            .err()
            .unwrap_or_default();
        if !opts.allow_unserved_handler {
            match self.check_handler_served(&spec).await {
                Ok(()) => {}
                Err(ApiError::Invalid { errors, .. }) => problems.extend(errors),
                Err(other) => return Err(other),
            }
        }
        if !problems.is_empty() {
            return Err(ApiError::Invalid {
                message: format!("task {key} is invalid"),
                errors: problems,
            });
        }
        Ok((key, spec))
    }

    /// Registers a checked spec whose next fires are `next_fires`, with the audit detail of
    /// what changed; an identical spec is left as it is and answers the registered one's fires.
    async fn write_spec(
        &self,
        key: &TaskKey,
        spec: &TaskSpec,
        now: UtcMillis,
        next_fires: Vec<UtcMillis>,
    ) -> Result<PutTaskResult, ApiError> {
        let previous = self.raw_spec(key).await?;
        if previous.is_none() {
            self.check_namespace_room(key).await?;
        }
        let outcome = self
            .registry
            .register(spec)
            .await
            .map_err(errors::registry)?;
        let revision = match outcome {
            ax_registry::RegisterOutcome::Created { revision }
            | ax_registry::RegisterOutcome::Replaced { revision, .. } => revision,
            ax_registry::RegisterOutcome::Unchanged { .. } => {
                // The fires are the registered spec's, counted from when it was first
                // registered, not from this call.
                let stored = previous
                    .as_deref()
                    .and_then(|raw| TaskSpec::from_json(raw, &key.namespace, &key.id).ok());
                let next_fires = match stored {
                    Some(stored) => self::next_fires(&stored, now)?,
                    None => next_fires,
                };
                return Ok(put_result(key, false, true, next_fires, None));
            }
        };
        self.queue_names.note(&spec.queue);
        let previous = previous.and_then(|raw| serde_json::from_slice(&raw).ok());
        let written: serde_json::Value =
            serde_json::from_slice(&spec.to_json()).unwrap_or(serde_json::Value::Null);
        let audit = crate::audit::AuditDetail {
            target: Some(key.to_string()),
            detail: Some(crate::audit::spec_diff(previous.as_ref(), &written)),
            revision: Some(revision),
        };
        Ok(put_result(key, true, false, next_fires, Some(audit)))
    }

    /// Refuses a new task in a namespace already holding `limits.max_tasks_per_namespace`
    /// (replacing a task always has room). Two creations racing may both pass at the limit:
    /// it bounds a namespace's size, it is not a quota to the task.
    async fn check_namespace_room(&self, key: &TaskKey) -> Result<(), ApiError> {
        let held = self
            .registry
            .count_tasks(&key.namespace)
            .await
            .map_err(errors::registry)?;
        if held >= self.max_tasks_per_namespace {
            return Err(ApiError::Limit {
                retry_after_s: None,
                kind: LimitKind::Count,
                message: format!(
                    "namespace {} holds {held} tasks, the limit \
                     (limits.max_tasks_per_namespace = {}); delete tasks or raise it",
                    key.namespace, self.max_tasks_per_namespace
                ),
            });
        }
        Ok(())
    }

    pub(super) async fn delete(&self, key: &TaskKey) -> Result<(), ApiError> {
        let deleted = self
            .registry
            .unregister(&key.namespace, &key.id)
            .await
            .map_err(errors::registry)?;
        if deleted {
            Ok(())
        } else {
            Err(not_found(key))
        }
    }

    pub(super) async fn set_paused(
        &self,
        key: &TaskKey,
        paused: bool,
    ) -> Result<TaskView, ApiError> {
        let stored = self
            .registry
            .update(&key.namespace, &key.id, |spec| spec.paused = paused)
            .await
            .map_err(errors::registry)?;
        let state = self.state_of(&key.namespace, &key.id).await.ok().flatten();
        Ok(view_of_spec(&stored.spec, state.as_ref(), self.wall.now()))
    }

    pub(super) async fn run_now(
        &self,
        key: &TaskKey,
        params: TriggerParams,
    ) -> Result<TriggerResult, ApiError> {
        params.check()?;
        // An invalid spec cannot run; say so rather than leave a request the leader drops.
        if self
            .registry
            .get(&key.namespace, &key.id)
            .await
            .map_err(errors::registry)?
            .is_none()
        {
            return Err(not_found(key));
        }
        let request = TriggerRequest {
            execution_id: ax_queue::new_execution_id(),
            requested_at: self.wall.now(),
            payload: params.payload,
            idempotency_key: params.idempotency_key,
            backfill_of: None,
            requested_by: params.requested_by,
        };
        self.registry
            .request_trigger(&key.namespace, &key.id, &request)
            .await
            .map_err(errors::registry)?;
        Ok(TriggerResult {
            execution_id: request.execution_id,
        })
    }
}

/// Keys one etcd read of a filtered listing takes at least: a filter that matches few tasks
/// would otherwise read its way through the tasks a page size (maybe 1) at a time.
const FILTERED_READ: usize = 500;

pub(super) fn not_found(key: &TaskKey) -> ApiError {
    ApiError::NotFound(format!("task {key} is not registered"))
}

/// Whether a task's spec has label `key` (with `value`, when one is asked for). An invalid
/// spec has no labels one can rely on.
fn has_label(view: &TaskView, key: &str, value: Option<&str>) -> bool {
    match view.spec.get("labels").and_then(|l| l.get(key)) {
        Some(serde_json::Value::String(v)) => value.is_none_or(|want| want == v),
        _ => false,
    }
}

/// The views of one page's tasks, valid and invalid, in key order, each with its state (or
/// why its state cannot be read).
fn views_of_page(page: TaskPage, now: UtcMillis) -> Vec<TaskView> {
    let TaskPage {
        listing, states, ..
    } = page;
    let unreadable: HashMap<(String, String), String> = states
        .undecodable
        .into_iter()
        .map(|u| ((u.namespace, u.id), u.error))
        .collect();
    let states: HashMap<(String, String), TaskState> = states
        .states
        .into_iter()
        .map(|s| ((s.namespace, s.id), s.state))
        .collect();
    let state = |ns: &str, id: &str| states.get(&(ns.to_owned(), id.to_owned()));
    let mut views: Vec<TaskView> = listing
        .tasks
        .iter()
        .map(|t| {
            let mut view = view_of_spec(&t.spec, state(&t.spec.namespace, &t.spec.id), now);
            let key = (t.spec.namespace.to_string(), t.spec.id.to_string());
            if let Some(error) = unreadable.get(&key) {
                view.errors.push(unreadable_state(error));
            }
            view
        })
        .chain(listing.invalid.iter().map(|bad| {
            TaskView {
                namespace: bad.namespace.clone(),
                id: bad.id.clone(),
                spec: serde_json::from_str(&bad.raw)
                    .unwrap_or_else(|_| serde_json::Value::String(bad.raw.clone())),
                status: Some(TaskStatus::Invalid.as_str().to_owned()),
                next_fire: None,
                last_fire: state(&bad.namespace, &bad.id).and_then(|s| s.last_fire_at),
                errors: bad.errors.iter().map(ToString::to_string).collect(),
                namespace_paused: false,
                throttled: None,
                schedule_text: None,
                upcoming_fires: Vec::new(),
                last_outcome: last_outcome(state(&bad.namespace, &bad.id)),
                last_error: None,
            }
        }))
        .collect();
    // Key order, which is etcd's order of `{prefix}/tasks/{namespace}/{id}`.
    // Compared as the joined bytes, as etcd orders keys: namespace `a` sorts after `a-b`,
    // since `/` is above `-`.
    views.sort_by_cached_key(|v| {
        v.namespace
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(v.id.bytes())
            .collect::<Vec<u8>>()
    });
    views
}

/// Checks a valid spec's `command.args` against the rule for its command
/// (`worker.commands.<name>.task_args`), so a task its workers would refuse is refused when it
/// is written, where its author sees why.
pub fn check_command(
    spec: &TaskSpec,
    commands: &ax_worker::CommandsConfig,
) -> Result<(), Vec<String>> {
    match &spec.command {
        Some(call) => commands
            .check_task_args(call)
            .map_err(|e| vec![format!("command.args: {e}")]),
        None => Ok(()),
    }
}

/// The answer to a put of `key`.
fn put_result(
    key: &TaskKey,
    written: bool,
    unchanged: bool,
    next_fires: Vec<UtcMillis>,
    audit: Option<crate::audit::AuditDetail>,
) -> PutTaskResult {
    PutTaskResult {
        namespace: key.namespace.to_string(),
        id: key.id.to_string(),
        written,
        unchanged,
        next_fires,
        audit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> TaskSpec {
        TaskSpec::from_json(json.as_bytes(), "default", "t").unwrap()
    }

    #[test]
    fn status_follows_the_spec_until_the_leader_catches_up() {
        let now = UtcMillis(1_800_000_000_000);
        let mut state = TaskState::new(1, now, now);
        state.status = TaskStatus::Scheduled;
        state.next_fire_at = Some(UtcMillis(now.0 + 60_000));

        let s = spec(r#"{"handler": "log", "schedule": {"every": "1m"}}"#);
        let v = view_of_spec(&s, Some(&state), now);
        assert_eq!(v.status.as_deref(), Some("SCHEDULED"));
        assert_eq!(v.next_fire, state.next_fire_at);

        let paused = spec(r#"{"handler": "log", "schedule": {"every": "1m"}, "paused": true}"#);
        let v = view_of_spec(&paused, Some(&state), now);
        assert_eq!((v.status.as_deref(), v.next_fire), (Some("PAUSED"), None));

        state.status = TaskStatus::Paused;
        let v = view_of_spec(&s, Some(&state), now);
        assert_eq!(v.status.as_deref(), Some("WAITING"));

        let v = view_of_spec(&s, None, now);
        assert_eq!(v.status.as_deref(), Some("WAITING"));
        assert_eq!(v.spec["schedule"]["every"], "1m");
    }

    #[test]
    fn a_waiting_task_shows_the_next_fire_its_schedule_gives() {
        let now = UtcMillis(1_800_000_000_000);
        let at = spec(r#"{"handler": "log", "schedule": {"at": "2027-12-01T00:00:00Z"}}"#);
        let due = UtcMillis(1_827_619_200_000);
        // Registered, no state yet; and a state the leader wrote without an armed fire.
        assert_eq!(view_of_spec(&at, None, now).next_fire, Some(due));
        let state = TaskState::new(1, now, now);
        assert_eq!(state.status, TaskStatus::Waiting);
        let v = view_of_spec(&at, Some(&state), now);
        assert_eq!(
            (v.status.as_deref(), v.next_fire),
            (Some("WAITING"), Some(due))
        );
        // Past its instant, nothing is shown ahead; paused, nothing either.
        assert_eq!(
            view_of_spec(&at, None, UtcMillis(due.0 + 1)).next_fire,
            None
        );
        let paused = spec(
            r#"{"handler": "log", "schedule": {"at": "2027-12-01T00:00:00Z"}, "paused": true}"#,
        );
        assert_eq!(view_of_spec(&paused, None, now).next_fire, None);
    }

    #[test]
    fn upcoming_fires_start_at_the_armed_fire_and_keep_the_anchor() {
        let now = UtcMillis(1_800_000_000_000);
        let every = spec(r#"{"handler": "log", "schedule": {"every": "1m"}}"#);
        let mut state = TaskState::new(1, now, now);
        state.anchor_at = Some(UtcMillis(now.0 - 30_000));
        let armed = UtcMillis(now.0 + 30_000);
        let fires = upcoming_fires(&every, Some(&state), Some(armed), now, 3);
        assert_eq!(
            fires,
            vec![
                armed,
                UtcMillis(armed.0 + 60_000),
                UtcMillis(armed.0 + 120_000)
            ]
        );
        // Not armed yet: from now, on the anchor's grid.
        let fires = upcoming_fires(&every, Some(&state), None, now, 2);
        assert_eq!(fires, vec![armed, UtcMillis(armed.0 + 60_000)]);
        // A one-shot has one fire; a paused task none.
        let once = spec(r#"{"handler": "log", "schedule": {"delay": "1m"}}"#);
        assert_eq!(
            upcoming_fires(&once, Some(&state), Some(armed), now, 10),
            vec![armed]
        );
        let paused = spec(r#"{"handler": "log", "schedule": {"every": "1m"}, "paused": true}"#);
        assert!(upcoming_fires(&paused, Some(&state), None, now, 10).is_empty());
        let v = view_of_spec(&every, Some(&state), now);
        assert_eq!(v.schedule_text.as_deref(), Some("every 1m"));
        // An armed fire already past (a throttled task's skipped fires, a leader down) is
        // not listed ahead: the fires start at now, on the anchor's grid.
        let late = UtcMillis(now.0 - 90_000);
        let fires = upcoming_fires(&every, Some(&state), Some(late), now, 2);
        assert_eq!(fires, vec![armed, UtcMillis(armed.0 + 60_000)]);
    }

    #[test]
    fn a_throttled_state_shows_in_the_view_unless_the_task_is_paused() {
        let now = UtcMillis(1_800_000_000_000);
        let mut state = TaskState::new(1, now, now);
        state.throttled = Some(ax_scheduler_core::breaker::Throttle {
            since: now,
            failures: 4,
            executions: 4,
            dispatch_every: 10,
        });
        let every = spec(r#"{"handler": "log", "schedule": {"every": "1m"}}"#);
        assert_eq!(
            view_of_spec(&every, Some(&state), now).throttled,
            state.throttled
        );
        let paused = spec(r#"{"handler": "log", "schedule": {"every": "1m"}, "paused": true}"#);
        assert_eq!(view_of_spec(&paused, Some(&state), now).throttled, None);
        let mut v = view_of_spec(&every, Some(&state), now);
        mark_namespace_paused(&mut v, &HashSet::from(["default".to_owned()]));
        assert_eq!((v.status.as_deref(), v.throttled), (Some("PAUSED"), None));
    }

    #[test]
    fn an_invalid_value_is_shown_as_written_with_its_errors() {
        let v = view_from_raw(
            "default",
            "t",
            br#"{"schedule": {"every": "soon"}}"#,
            None,
            UtcMillis(0),
        );
        assert_eq!(v.status.as_deref(), Some("INVALID"));
        assert_eq!(v.spec["schedule"]["every"], "soon");
        assert!(
            v.errors.iter().any(|e| e.starts_with("handler:")),
            "{:?}",
            v.errors
        );

        let v = view_from_raw("default", "t", b"not json", None, UtcMillis(0));
        assert_eq!(v.spec, serde_json::Value::String("not json".into()));
    }

    #[test]
    fn submitted_specs_name_their_key() {
        let k = key_of(&serde_json::json!({"id": "a", "namespace": "ops"})).unwrap();
        assert_eq!((&*k.namespace, &*k.id), ("ops", "a"));
        let k = key_of(&serde_json::json!({"id": "a"})).unwrap();
        assert_eq!(&*k.namespace, "default");
        assert!(matches!(
            key_of(&serde_json::json!({})),
            Err(ApiError::Invalid { .. })
        ));
        assert!(matches!(
            key_of(&serde_json::json!([])),
            Err(ApiError::Invalid { .. })
        ));
    }
}
