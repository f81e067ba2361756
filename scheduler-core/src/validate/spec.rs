//! The top-level parser: from the bytes of a task to a [`TaskSpec`], or every problem.
//!
//! [`TaskSpec::from_json`] reads the fields one after another, each by its section's reader,
//! and only then builds the spec, so one bad field does not hide the next. The order of the
//! reads is the order of the problems in the list (users and tests see it), and a few reads
//! depend on earlier ones (`schedule` on `depends_on`, `overlap` on `fanout`); both are kept
//! in `read_fields`, in one place.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::checker::{check_name, field, kind, Checker};
use super::command::read_command;
use super::concurrency::read_concurrency;
use super::deadline::read_expect_success_within;
use super::depends_on::read_depends_on;
use super::fanout::read_fanout;
use super::fields::{
    read_created_at, read_handler, read_idempotency_key, read_labels, read_paused, read_payload,
    read_priority, read_queue, read_timeout, read_version,
};
use super::http::read_http;
use super::policy::{read_misfire, read_overlap};
use super::retry::read_retry;
use super::schedule::read_schedule;
use super::{FieldError, ValidationErrors};
use crate::concurrency::Concurrency;
use crate::options::TaskOptions;
use crate::task::{
    CommandCall, Dependency, Fanout, HttpTarget, MisfirePolicy, OverlapPolicy, RetryPolicy,
    Schedule, TaskSpec,
};
use crate::time::UtcMillis;

/// Top-level fields of the JSON form.
const TASK_FIELDS: &[&str] = &[
    "id",
    "namespace",
    "handler",
    "schedule",
    "payload",
    "http",
    "command",
    "queue",
    "priority",
    "concurrency",
    "timeout",
    "retry",
    "idempotency_key",
    "misfire",
    "overlap",
    "paused",
    "fanout",
    "depends_on",
    "expect_success_within",
    "labels",
    "version",
    "created_at",
];

impl TaskSpec {
    /// Parses and validates the user-facing JSON form of a task stored under
    /// `{namespace}/{id}`, reporting every problem at once.
    ///
    /// `id` and `namespace` come from the key; the JSON may repeat them but must agree.
    /// Absent fields take the defaults documented in `docs/tasks.md`.
    pub fn from_json(
        bytes: &[u8],
        namespace: &str,
        id: &str,
    ) -> Result<TaskSpec, ValidationErrors> {
        let mut c = Checker::default();
        if let Err(e) = check_name(namespace) {
            c.err("namespace", format!("namespace in the key {e}"));
        }
        if let Err(e) = check_name(id) {
            c.err("id", format!("id in the key {e}"));
        }
        let Some(obj) = read_object(&mut c, bytes) else {
            return Err(c.errors.into());
        };
        c.unknown_fields(&obj, "", TASK_FIELDS);
        check_repeated_key(&mut c, &obj, namespace, id);
        let fields = read_fields(&mut c, &obj, namespace, id);
        if !c.errors.is_empty() {
            return Err(c.errors.into());
        }
        // Every `None` in `fields` recorded an error, so this is not reached; it stays an
        // error rather than a panic.
        fields
            .into_spec(namespace, id)
            .ok_or_else(|| vec![FieldError::new("", "invalid task spec")].into())
    }

    /// Checks a spec built in code (not parsed) against the same rules as [`Self::from_json`].
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        TaskSpec::from_json(&self.to_json(), &self.namespace, &self.id).map(|_| ())
    }
}

/// The document as a JSON object, or `None` with the problem recorded.
fn read_object(c: &mut Checker, bytes: &[u8]) -> Option<Map<String, Value>> {
    let root: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            c.err("", format!("not valid JSON: {e}"));
            return None;
        }
    };
    let Value::Object(obj) = root else {
        c.err(
            "",
            format!("a task must be a JSON object, found {}", kind(&root)),
        );
        return None;
    };
    Some(obj)
}

/// `id` and `namespace` in the document, if given, must be those of the key.
fn check_repeated_key(c: &mut Checker, obj: &Map<String, Value>, namespace: &str, id: &str) {
    for (key, expected) in [("id", id), ("namespace", namespace)] {
        if let Some(v) = field(obj, key) {
            if let Some(s) = c.string(v, key) {
                if s != expected {
                    c.err(
                        key,
                        format!("`{s}` does not match the {key} in the key (`{expected}`); remove it or make them equal"),
                    );
                }
            }
        }
    }
}

/// Every field as read: `None` where a problem was recorded (an optional field that is
/// absent is `Some(None)`).
struct Fields {
    handler: Option<String>,
    schedule: Option<Schedule>,
    payload: Value,
    http: Option<HttpTarget>,
    command: Option<CommandCall>,
    queue: Option<String>,
    priority: Option<u64>,
    timeout: Option<Duration>,
    retry: Option<RetryPolicy>,
    idempotency_key: Option<Option<String>>,
    misfire: Option<MisfirePolicy>,
    fanout: Option<Option<Fanout>>,
    overlap: Option<OverlapPolicy>,
    concurrency: Option<Option<Concurrency>>,
    paused: Option<bool>,
    depends_on: Option<Vec<Dependency>>,
    expect_success_within: Option<Option<Duration>>,
    labels: Option<BTreeMap<String, String>>,
    version: Option<u64>,
    created_at: Option<Option<UtcMillis>>,
}

/// Reads the fields in the order their problems are reported.
fn read_fields(c: &mut Checker, obj: &Map<String, Value>, namespace: &str, id: &str) -> Fields {
    let handler = read_handler(c, obj);
    let depends_on = read_depends_on(c, obj, namespace, id);
    let dependent = depends_on.as_ref().is_some_and(|d| !d.is_empty());
    let schedule = read_schedule(c, obj, dependent);
    let payload = read_payload(c, obj);
    let http = read_http(c, obj, handler.as_deref());
    let command = read_command(c, obj, handler.as_deref());
    let queue = read_queue(c, obj);
    let priority = read_priority(c, obj);
    let timeout = read_timeout(c, obj);
    let retry = read_retry(c, obj);
    let idempotency_key = read_idempotency_key(c, obj, schedule.as_ref());
    let misfire = read_misfire(c, obj);
    let fanout = read_fanout(c, obj);
    let overlap = read_overlap(c, obj, fanout.is_some_and(|f| f.is_some()));
    let concurrency = read_concurrency(c, obj);
    let paused = read_paused(c, obj);
    let expect_success_within = read_expect_success_within(c, obj, dependent);
    let labels = read_labels(c, obj);
    let version = read_version(c, obj);
    let created_at = read_created_at(c, obj);
    Fields {
        handler,
        schedule,
        payload,
        http,
        command,
        queue,
        priority,
        timeout,
        retry,
        idempotency_key,
        misfire,
        fanout,
        overlap,
        concurrency,
        paused,
        depends_on,
        expect_success_within,
        labels,
        version,
        created_at,
    }
}

impl Fields {
    /// The spec, when every field was read without a problem: the execution options as one
    /// [`TaskOptions`], the rest around them.
    fn into_spec(self, namespace: &str, id: &str) -> Option<TaskSpec> {
        let options = TaskOptions {
            // Checked against the bound when read.
            priority: u8::try_from(self.priority?).ok()?,
            timeout: self.timeout?,
            retry: self.retry?,
            idempotency_key: self.idempotency_key?,
            misfire: self.misfire?,
            overlap: self.overlap?,
            expect_success_within: self.expect_success_within?,
        };
        let handler = self.handler?;
        let spec = TaskSpec {
            payload: self.payload,
            http: self.http,
            command: self.command,
            queue: self.queue?.into(),
            concurrency: self.concurrency?,
            paused: self.paused?,
            fanout: self.fanout?,
            depends_on: self.depends_on?,
            labels: self.labels?,
            version: self.version?,
            created_at: self.created_at?,
            ..TaskSpec::new(namespace, id, &handler, self.schedule?)
        };
        Some(spec.with_options(options))
    }
}
