//! The user-facing JSON form of a task: lenient parsing that reports every problem at once.
//!
//! serde's derive stops at the first error and words it for programmers ("invalid type:
//! integer, expected a string at line 1 column 40"). A person registering a task wants the
//! whole list, each with the field path and what to write instead. So the bytes are read into
//! a `serde_json::Value` and every field is checked by hand, collecting [`FieldError`]s;
//! defaults come from the constants in `task.rs`. [`TaskSpec::to_json`] writes the same form
//! back with every default spelled out, and `from_json(to_json(spec))` gives `spec` again.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::concurrency::{Concurrency, MAX_CONCURRENCY};
use crate::redact::holds_mask;
use crate::task::{
    CommandCall, DependOn, Dependency, Fanout, HttpTarget, MisfirePolicy, OverlapPolicy,
    RetryPolicy, Schedule, TaskSpec, DEFAULT_DEPENDENCY_WITHIN, DEFAULT_PRIORITY, DEFAULT_QUEUE,
    DEFAULT_TIMEOUT, DEFAULT_TIMEZONE, DEFAULT_VERSION, MAX_COMMAND_ARGS, MAX_COMMAND_ARG_BYTES,
    MAX_COMMAND_ENV, MAX_DEPENDENCY_WITHIN, MAX_HTTP_HEADERS, MAX_HTTP_HEADER_BYTES,
    MAX_IDEMPOTENCY_KEY_LEN, MAX_LABELS, MAX_LABEL_BYTES, MAX_MULTIPLIER, MAX_NAME_LEN,
    MAX_PARENTS, MAX_PAYLOAD_BYTES, MAX_PRIORITY, MAX_RETRIES, MAX_SHARDS, MAX_URL_BYTES,
};
use crate::time::UtcMillis;

/// One problem with a spec: where, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// Dotted path of the field (`schedule.cron`, `retry.jitter`, `labels.team`); empty for
    /// the document as a whole.
    pub path: String,
    /// What is wrong, worded for the person who wrote the spec.
    pub reason: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

/// Every problem found in a spec; displayed one per line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ValidationErrors {
    /// The problems, in field order.
    pub errors: Vec<FieldError>,
}

impl ValidationErrors {
    /// Whether there are no problems.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Number of problems.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// The problems.
    pub fn iter(&self) -> std::slice::Iter<'_, FieldError> {
        self.errors.iter()
    }

    /// Whether any problem is at `path`.
    pub fn has(&self, path: &str) -> bool {
        self.errors.iter().any(|e| e.path == path)
    }
}

impl From<Vec<FieldError>> for ValidationErrors {
    fn from(errors: Vec<FieldError>) -> Self {
        ValidationErrors { errors }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

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
const SCHEDULE_FIELDS: &[&str] = &["at", "delay", "every", "cron", "timezone"];
const SCHEDULE_KINDS: &[&str] = &["at", "delay", "every", "cron"];
const RETRY_FIELDS: &[&str] = &[
    "max_retries",
    "initial_interval",
    "max_interval",
    "multiplier",
    "jitter",
    "max_elapsed",
];
const HTTP_FIELDS: &[&str] = &["url", "headers", "follow_redirects", "async"];
const COMMAND_FIELDS: &[&str] = &["name", "args", "env"];

/// Checks a name used as an etcd/Redis key segment: `[A-Za-z0-9._-]`, 1 to 128 characters.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "is {} characters long; at most {MAX_NAME_LEN} are allowed",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c)))
    {
        return Err(format!(
            "`{name}` contains {c:?}; use only letters, digits, `.`, `_` and `-`"
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("`{name}` is reserved"));
    }
    Ok(())
}

/// Collects problems while fields are read.
struct Checker {
    errors: Vec<FieldError>,
}

impl Checker {
    fn err(&mut self, path: &str, reason: impl Into<String>) {
        self.errors.push(FieldError::new(path, reason));
    }

    fn unknown_fields(&mut self, obj: &Map<String, Value>, prefix: &str, allowed: &[&str]) {
        for key in obj.keys().filter(|k| !allowed.contains(&k.as_str())) {
            let path = join(prefix, key);
            self.err(
                &path,
                format!("unknown field `{key}`; allowed: {}", allowed.join(", ")),
            );
        }
    }

    fn string(&mut self, v: &Value, path: &str) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.err(path, format!("must be a string, found {}", kind(other)));
                None
            }
        }
    }

    fn name(&mut self, v: &Value, path: &str) -> Option<String> {
        let s = self.string(v, path)?;
        match check_name(&s) {
            Ok(()) => Some(s),
            Err(e) => {
                self.err(path, e);
                None
            }
        }
    }

    fn bool(&mut self, v: &Value, path: &str) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            other => {
                self.err(
                    path,
                    format!("must be true or false, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// A whole number in `min..=max`.
    fn integer(&mut self, v: &Value, path: &str, min: u64, max: u64, what: &str) -> Option<u64> {
        let Value::Number(n) = v else {
            self.err(path, format!("must be a whole number, found {}", kind(v)));
            return None;
        };
        let out_of_range = |shown: String| format!("{what} {shown} is out of range {min}-{max}");
        match (n.as_u64(), n.as_i64()) {
            (Some(x), _) if (min..=max).contains(&x) => Some(x),
            (Some(x), _) => {
                self.err(path, out_of_range(x.to_string()));
                None
            }
            (None, Some(x)) => {
                self.err(path, out_of_range(x.to_string()));
                None
            }
            (None, None) => {
                self.err(path, format!("must be a whole number, found {n}"));
                None
            }
        }
    }

    fn number(&mut self, v: &Value, path: &str) -> Option<f64> {
        match v.as_f64() {
            Some(x) if x.is_finite() => Some(x),
            _ => {
                self.err(path, format!("must be a number, found {}", kind(v)));
                None
            }
        }
    }

    /// A humantime duration string above zero.
    fn duration(&mut self, v: &Value, path: &str) -> Option<Duration> {
        let Value::String(text) = v else {
            let hint = if v.is_number() {
                format!("; write durations as strings with a unit, e.g. \"{v}s\" or \"{v}ms\"")
            } else {
                String::new()
            };
            self.err(
                path,
                format!(
                    "must be a duration string like \"30s\", found {}{hint}",
                    kind(v)
                ),
            );
            return None;
        };
        if text.trim_start().starts_with('-') {
            self.err(
                path,
                format!("`{text}` is negative; durations must be positive"),
            );
            return None;
        }
        match crate::duration_serde::parse(text) {
            Ok(d) if d.is_zero() => {
                self.err(path, format!("`{text}` is zero; give a positive duration"));
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.err(path, e);
                None
            }
        }
    }

    fn instant(&mut self, v: &Value, path: &str) -> Option<UtcMillis> {
        let s = self.string(v, path)?;
        match DateTime::parse_from_rfc3339(s.trim()) {
            Ok(dt) => Some(UtcMillis::from_datetime(&dt)),
            Err(e) => {
                self.err(
                    path,
                    format!("`{s}` is not an RFC 3339 instant ({e}); write e.g. \"2026-01-01T09:00:00Z\""),
                );
                None
            }
        }
    }

    fn string_map(&mut self, v: &Value, path: &str) -> Option<BTreeMap<String, String>> {
        let Value::Object(obj) = v else {
            self.err(
                path,
                format!("must be an object of strings, found {}", kind(v)),
            );
            return None;
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (k, val) in obj {
            let p = join(path, k);
            if k.is_empty() {
                self.err(path, "keys must not be empty");
                ok = false;
            }
            match self.string(val, &p) {
                Some(s) => {
                    out.insert(k.clone(), s);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Treats an absent field and `null` alike: both mean "use the default".
fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

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
        let mut c = Checker { errors: Vec::new() };
        if let Err(e) = check_name(namespace) {
            c.err("namespace", format!("namespace in the key {e}"));
        }
        if let Err(e) = check_name(id) {
            c.err("id", format!("id in the key {e}"));
        }
        let root: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                c.err("", format!("not valid JSON: {e}"));
                return Err(c.errors.into());
            }
        };
        let Value::Object(obj) = root else {
            c.err(
                "",
                format!("a task must be a JSON object, found {}", kind(&root)),
            );
            return Err(c.errors.into());
        };
        c.unknown_fields(&obj, "", TASK_FIELDS);

        for (key, expected) in [("id", id), ("namespace", namespace)] {
            if let Some(v) = field(&obj, key) {
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

        let handler = match field(&obj, "handler") {
            Some(v) => c.name(v, "handler"),
            None => {
                c.err(
                    "handler",
                    "missing; name the handler that runs the task, e.g. \"http\" or \"log\"",
                );
                None
            }
        };
        let depends_on = match field(&obj, "depends_on") {
            None => Some(Vec::new()),
            Some(v) => parse_depends_on(&mut c, v, namespace, id),
        };
        let dependent = depends_on.as_ref().is_some_and(|d| !d.is_empty());
        let schedule = match field(&obj, "schedule") {
            Some(_) if dependent => {
                c.err(
                    "schedule",
                    "a task with depends_on fires when its parents finish, not by the clock; remove schedule (or depends_on)",
                );
                None
            }
            Some(v) => parse_schedule(&mut c, v),
            None if dependent => Some(Schedule::Dependent),
            None => {
                c.err(
                    "schedule",
                    "missing; give one of {\"at\": ...}, {\"delay\": ...}, {\"every\": ...}, {\"cron\": ...}",
                );
                None
            }
        };
        let payload = obj.get("payload").cloned().unwrap_or(Value::Null);
        if let Ok(bytes) = serde_json::to_vec(&payload) {
            if bytes.len() > MAX_PAYLOAD_BYTES {
                c.err(
                    "payload",
                    format!(
                        "is {} bytes serialized; the limit is {MAX_PAYLOAD_BYTES} bytes (32 KiB); store large data elsewhere and pass a reference",
                        bytes.len()
                    ),
                );
            }
        }
        let http = field(&obj, "http").and_then(|v| parse_http(&mut c, v));
        match (handler.as_deref(), field(&obj, "http")) {
            (Some("http"), None) => c.err(
                "http.url",
                "missing; the http handler needs {\"http\": {\"url\": \"https://...\"}}",
            ),
            (Some(h), Some(_)) if h != "http" => c.err(
                "http",
                format!("is only read by the `http` handler, not `{h}`; remove it"),
            ),
            _ => {}
        }
        let command = field(&obj, "command").and_then(|v| parse_command(&mut c, v));
        match (handler.as_deref(), field(&obj, "command")) {
            (Some("command"), None) => c.err(
                "command.name",
                "missing; the command handler needs {\"command\": {\"name\": \"...\"}}, naming a command of the replicas' [worker.commands]",
            ),
            (Some(h), Some(_)) if h != "command" => c.err(
                "command",
                format!("is only read by the `command` handler, not `{h}`; remove it"),
            ),
            _ => {}
        }
        let queue =
            field(&obj, "queue").map_or(Some(DEFAULT_QUEUE.to_string()), |v| c.name(v, "queue"));
        let priority = field(&obj, "priority").map_or(Some(u64::from(DEFAULT_PRIORITY)), |v| {
            c.integer(v, "priority", 0, u64::from(MAX_PRIORITY), "priority")
        });
        if let Some(Value::Number(_)) = field(&obj, "priority") {
            if c.errors.last().is_some_and(|e| e.path == "priority") {
                if let Some(e) = c.errors.last_mut() {
                    e.reason.push_str(" (0 lowest, 9 highest)");
                }
            }
        }
        let timeout =
            field(&obj, "timeout").map_or(Some(DEFAULT_TIMEOUT), |v| c.duration(v, "timeout"));
        let retry =
            field(&obj, "retry").map_or(Some(RetryPolicy::default()), |v| parse_retry(&mut c, v));
        let idempotency_key = match field(&obj, "idempotency_key") {
            None => Some(None),
            Some(v) => c.string(v, "idempotency_key").and_then(|s| {
                if s.is_empty() || s.len() > MAX_IDEMPOTENCY_KEY_LEN {
                    c.err(
                        "idempotency_key",
                        format!(
                            "must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} bytes, found {}",
                            s.len()
                        ),
                    );
                    None
                } else {
                    Some(Some(s))
                }
            }),
        };
        if let (
            Some(Some(_)),
            Some(Schedule::Every(_) | Schedule::Cron { .. } | Schedule::Dependent),
        ) = (&idempotency_key, &schedule)
        {
            c.err(
                "idempotency_key",
                "applies to one-shot tasks (schedule at or delay): each fire of a periodic task is enqueued once already, and one key shared by every fire would let the task run once per dedupe window (24 h); remove it",
            );
        }
        let misfire = field(&obj, "misfire").map_or(Some(MisfirePolicy::default()), |v| {
            enum_value(
                &mut c,
                v,
                "misfire",
                &[
                    ("fire_once", MisfirePolicy::FireOnce),
                    ("fire_all", MisfirePolicy::FireAll),
                    ("skip", MisfirePolicy::Skip),
                ],
            )
        });
        let fanout = match field(&obj, "fanout") {
            None => Some(None),
            Some(v) => parse_fanout(&mut c, v).map(Some),
        };
        let fanned = fanout.is_some_and(|f| f.is_some());
        // The shards of one fire run side by side: `forbid` would hold the second behind
        // the first. Overlap between fires is therefore `allow` for a fanned-out task.
        let default_overlap = if fanned {
            OverlapPolicy::Allow
        } else {
            OverlapPolicy::default()
        };
        if let (true, Some(v)) = (fanned, field(&obj, "overlap")) {
            if v.as_str() != Some("allow") {
                c.err(
                    "overlap",
                    "a task with fanout runs its shards side by side, so its overlap is `allow`; remove overlap",
                );
            }
        }
        let overlap = field(&obj, "overlap").map_or(Some(default_overlap), |v| {
            enum_value(
                &mut c,
                v,
                "overlap",
                &[
                    ("allow", OverlapPolicy::Allow),
                    ("forbid", OverlapPolicy::Forbid),
                    ("replace", OverlapPolicy::Replace),
                ],
            )
        });
        let concurrency = match field(&obj, "concurrency") {
            None => Some(None),
            Some(v) => concurrency(&mut c, v).map(Some),
        };
        let paused = field(&obj, "paused").map_or(Some(false), |v| c.bool(v, "paused"));
        let expect_success_within = match field(&obj, "expect_success_within") {
            None => Some(None),
            Some(_) if dependent => {
                c.err(
                    "expect_success_within",
                    "judges the fires of a schedule, and a task with depends_on has none; put it on the chain's first task",
                );
                None
            }
            Some(v) => c.duration(v, "expect_success_within").map(Some),
        };
        let labels =
            field(&obj, "labels").map_or(Some(BTreeMap::new()), |v| c.string_map(v, "labels"));
        if let Some(labels) = &labels {
            check_labels(&mut c, labels);
        }
        let version = field(&obj, "version").map_or(Some(DEFAULT_VERSION), |v| {
            c.integer(v, "version", 0, u64::MAX, "version")
        });
        let created_at = match field(&obj, "created_at") {
            None => Some(None),
            Some(v) => c.instant(v, "created_at").map(Some),
        };

        if !c.errors.is_empty() {
            return Err(c.errors.into());
        }
        match (
            handler,
            schedule,
            queue,
            priority,
            timeout,
            retry,
            idempotency_key,
            misfire,
            overlap,
            (paused, concurrency),
            (fanout, depends_on),
            expect_success_within,
            labels,
            version,
            created_at,
        ) {
            (
                Some(handler),
                Some(schedule),
                Some(queue),
                Some(priority),
                Some(timeout),
                Some(retry),
                Some(idempotency_key),
                Some(misfire),
                Some(overlap),
                (Some(paused), Some(concurrency)),
                (Some(fanout), Some(depends_on)),
                Some(expect_success_within),
                Some(labels),
                Some(version),
                Some(created_at),
            ) => Ok(TaskSpec {
                id: id.into(),
                namespace: namespace.into(),
                handler: handler.into(),
                schedule,
                payload,
                http,
                command,
                queue: queue.into(),
                // Checked against MAX_PRIORITY above.
                priority: u8::try_from(priority).unwrap_or(MAX_PRIORITY),
                concurrency,
                timeout,
                retry: Arc::new(retry),
                idempotency_key,
                misfire,
                overlap,
                paused,
                fanout,
                depends_on,
                expect_success_within,
                labels,
                version,
                created_at,
            }),
            // Every `None` above recorded an error, so this arm is not reached; it stays an
            // error rather than a panic.
            _ => Err(vec![FieldError::new("", "invalid task spec")].into()),
        }
    }

    /// Writes the user-facing JSON form, every default spelled out; `from_json` reads it back
    /// to an equal spec.
    pub fn to_json(&self) -> Vec<u8> {
        let mut obj = Map::new();
        obj.insert("id".into(), Value::from(&*self.id));
        obj.insert("namespace".into(), Value::from(&*self.namespace));
        obj.insert("handler".into(), Value::from(&*self.handler));
        if self.schedule != Schedule::Dependent {
            obj.insert("schedule".into(), schedule_json(&self.schedule));
        }
        obj.insert("payload".into(), self.payload.clone());
        if let Some(h) = &self.http {
            let mut http = Map::new();
            http.insert("url".into(), h.url.clone().into());
            http.insert("headers".into(), string_map_json(&h.headers));
            http.insert("follow_redirects".into(), h.follow_redirects.into());
            if h.await_completion {
                http.insert("async".into(), true.into());
            }
            obj.insert("http".into(), Value::Object(http));
        }
        if let Some(cmd) = &self.command {
            let mut command = Map::new();
            command.insert("name".into(), cmd.name.clone().into());
            command.insert("args".into(), cmd.args.clone().into());
            command.insert("env".into(), string_map_json(&cmd.env));
            obj.insert("command".into(), Value::Object(command));
        }
        obj.insert("queue".into(), Value::from(&*self.queue));
        obj.insert("priority".into(), self.priority.into());
        obj.insert("timeout".into(), duration_json(self.timeout));
        let r = &self.retry;
        let mut retry = Map::new();
        retry.insert("max_retries".into(), r.max_retries.into());
        retry.insert("initial_interval".into(), duration_json(r.initial_interval));
        retry.insert("max_interval".into(), duration_json(r.max_interval));
        retry.insert("multiplier".into(), r.multiplier.into());
        retry.insert("jitter".into(), r.jitter.into());
        retry.insert(
            "max_elapsed".into(),
            r.max_elapsed.map_or(Value::Null, duration_json),
        );
        obj.insert("retry".into(), Value::Object(retry));
        obj.insert(
            "idempotency_key".into(),
            self.idempotency_key
                .clone()
                .map_or(Value::Null, Value::from),
        );
        obj.insert(
            "misfire".into(),
            serde_json::to_value(self.misfire).unwrap_or(Value::Null),
        );
        obj.insert(
            "overlap".into(),
            serde_json::to_value(self.overlap).unwrap_or(Value::Null),
        );
        obj.insert("paused".into(), self.paused.into());
        if let Some(cc) = &self.concurrency {
            let mut limit = Map::new();
            limit.insert("key".into(), Value::from(cc.key.as_str()));
            limit.insert("max".into(), cc.max.into());
            obj.insert("concurrency".into(), Value::Object(limit));
        }
        if let Some(fanout) = self.fanout {
            let mut f = Map::new();
            match fanout {
                Fanout::Shards(n) => f.insert("shards".into(), n.into()),
                Fanout::Broadcast => f.insert("broadcast".into(), true.into()),
            };
            obj.insert("fanout".into(), Value::Object(f));
        }
        if !self.depends_on.is_empty() {
            let deps = self
                .depends_on
                .iter()
                .map(|d| {
                    let mut o = Map::new();
                    o.insert("task".into(), d.task.clone().into());
                    o.insert(
                        "on".into(),
                        serde_json::to_value(d.on).unwrap_or(Value::Null),
                    );
                    o.insert("within".into(), duration_json(d.within));
                    Value::Object(o)
                })
                .collect();
            obj.insert("depends_on".into(), Value::Array(deps));
        }
        obj.insert(
            "expect_success_within".into(),
            self.expect_success_within
                .map_or(Value::Null, duration_json),
        );
        obj.insert("labels".into(), string_map_json(&self.labels));
        obj.insert("version".into(), self.version.into());
        obj.insert(
            "created_at".into(),
            self.created_at.map_or(Value::Null, instant_json),
        );
        // A `Value` with string keys always serializes.
        serde_json::to_vec_pretty(&Value::Object(obj)).unwrap_or_default()
    }

    /// Checks a spec built in code (not parsed) against the same rules as [`Self::from_json`].
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        TaskSpec::from_json(&self.to_json(), &self.namespace, &self.id).map(|_| ())
    }
}

fn duration_json(d: Duration) -> Value {
    Value::String(humantime::format_duration(d).to_string())
}

fn instant_json(t: UtcMillis) -> Value {
    match t.to_datetime() {
        Some(dt) => Value::String(dt.to_rfc3339_opts(SecondsFormat::Millis, true)),
        None => Value::Null,
    }
}

fn string_map_json(m: &BTreeMap<String, String>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn schedule_json(s: &Schedule) -> Value {
    let mut obj = Map::new();
    match s {
        Schedule::At(t) => {
            obj.insert("at".into(), instant_json(*t));
        }
        Schedule::Delay(d) => {
            obj.insert("delay".into(), duration_json(*d));
        }
        Schedule::Every(d) => {
            obj.insert("every".into(), duration_json(*d));
        }
        Schedule::Cron { expr, timezone } => {
            obj.insert("cron".into(), expr.clone().into());
            obj.insert("timezone".into(), timezone.clone().into());
        }
        // Written as an absent `schedule` (see `to_json`).
        Schedule::Dependent => {}
    }
    Value::Object(obj)
}

const DEPENDENCY_FIELDS: &[&str] = &["task", "on", "within"];
const FANOUT_FIELDS: &[&str] = &["shards", "broadcast"];

/// `fanout`: `{"shards": N}`, 2 to [`MAX_SHARDS`], or `{"broadcast": true}`.
fn parse_fanout(c: &mut Checker, v: &Value) -> Option<Fanout> {
    let Value::Object(obj) = v else {
        c.err(
            "fanout",
            format!(
                "must be an object such as {{\"shards\": 4}} or {{\"broadcast\": true}}, found {}",
                kind(v)
            ),
        );
        return None;
    };
    c.unknown_fields(obj, "fanout", FANOUT_FIELDS);
    let n = match (field(obj, "shards"), field(obj, "broadcast")) {
        (Some(n), None) => n,
        (Some(_), Some(_)) => {
            c.err(
                "fanout",
                "give either shards (N executions per fire) or broadcast (one per live worker), not both",
            );
            return None;
        }
        (None, Some(Value::Bool(true))) => return Some(Fanout::Broadcast),
        (None, Some(b)) => {
            let found = match b {
                Value::Bool(false) => "false",
                other => kind(other),
            };
            c.err(
                "fanout.broadcast",
                format!(
                    "must be true (leave fanout out for one execution per fire), found {found}"
                ),
            );
            return None;
        }
        (None, None) => {
            c.err(
                "fanout",
                "give shards (the number of executions per fire) or broadcast: true (one per live worker)",
            );
            return None;
        }
    };
    let n = c.integer(n, "fanout.shards", 2, u64::from(MAX_SHARDS), "shards")?;
    // In range: at most MAX_SHARDS.
    Some(Fanout::Shards(u32::try_from(n).unwrap_or(MAX_SHARDS)))
}

/// `depends_on`: parents as `namespace/id` (or `id`, in the task's own namespace), each once,
/// never the task itself. Whether they exist and form no cycle is the graph's to say (it
/// needs every task; see `crate::workflow`).
fn parse_depends_on(
    c: &mut Checker,
    v: &Value,
    namespace: &str,
    id: &str,
) -> Option<Vec<Dependency>> {
    let Value::Array(items) = v else {
        c.err(
            "depends_on",
            format!(
                "must be a list such as [{{\"task\": \"ns/parent\"}}], found {}",
                kind(v)
            ),
        );
        return None;
    };
    if items.is_empty() || items.len() > MAX_PARENTS {
        c.err(
            "depends_on",
            format!(
                "lists {} parents; give 1 to {MAX_PARENTS} (or remove it)",
                items.len()
            ),
        );
        return None;
    }
    let errors_before = c.errors.len();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("depends_on[{i}]");
        let Value::Object(obj) = item else {
            c.err(&path, format!("must be an object, found {}", kind(item)));
            continue;
        };
        c.unknown_fields(obj, &path, DEPENDENCY_FIELDS);
        let task_path = format!("{path}.task");
        let task = match field(obj, "task") {
            Some(t) => c.string(t, &task_path),
            None => {
                c.err(
                    &task_path,
                    "missing; name the parent as \"namespace/id\" or \"id\"",
                );
                None
            }
        };
        let task = task.and_then(|t| {
            let (ns, parent) = t.split_once('/').unwrap_or((namespace, t.as_str()));
            for part in [ns, parent] {
                if let Err(e) = check_name(part) {
                    c.err(&task_path, format!("`{t}`: {e}"));
                    return None;
                }
            }
            if ns == namespace && parent == id {
                c.err(&task_path, "a task cannot depend on itself");
                return None;
            }
            Some(format!("{ns}/{parent}"))
        });
        let on = field(obj, "on").map_or(Some(DependOn::Success), |v| {
            enum_value(
                c,
                v,
                &format!("{path}.on"),
                &[
                    ("success", DependOn::Success),
                    ("failure", DependOn::Failure),
                    ("any", DependOn::Any),
                ],
            )
        });
        let within_path = format!("{path}.within");
        let within = field(obj, "within").map_or(Some(DEFAULT_DEPENDENCY_WITHIN), |v| {
            c.duration(v, &within_path)
        });
        if within.is_some_and(|w| w > MAX_DEPENDENCY_WITHIN) {
            c.err(
                &within_path,
                format!(
                    "is above the maximum of {}",
                    humantime::format_duration(MAX_DEPENDENCY_WITHIN)
                ),
            );
        }
        if let (Some(task), Some(on), Some(within)) = (task, on, within) {
            if out.iter().any(|d: &Dependency| d.task == task) {
                c.err(&task_path, format!("`{task}` is listed twice"));
            } else {
                out.push(Dependency { task, on, within });
            }
        }
    }
    (c.errors.len() == errors_before).then_some(out)
}

fn enum_value<T: Copy>(c: &mut Checker, v: &Value, path: &str, options: &[(&str, T)]) -> Option<T> {
    let s = c.string(v, path)?;
    match options.iter().find(|(name, _)| *name == s) {
        Some((_, t)) => Some(*t),
        None => {
            let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
            c.err(path, format!("`{s}` is not one of {}", names.join(", ")));
            None
        }
    }
}

fn parse_schedule(c: &mut Checker, v: &Value) -> Option<Schedule> {
    let Value::Object(obj) = v else {
        c.err(
            "schedule",
            format!(
                "must be an object such as {{\"every\": \"30s\"}}, found {}",
                kind(v)
            ),
        );
        return None;
    };
    c.unknown_fields(obj, "schedule", SCHEDULE_FIELDS);
    let kinds: Vec<&str> = SCHEDULE_KINDS
        .iter()
        .copied()
        .filter(|k| field(obj, k).is_some())
        .collect();
    if field(obj, "timezone").is_some() && !kinds.contains(&"cron") {
        c.err("schedule.timezone", "only applies to a cron schedule");
    }
    let kind_name = match kinds.as_slice() {
        [] => {
            c.err(
                "schedule",
                "no schedule kind; give exactly one of at, delay, every, cron",
            );
            return None;
        }
        [one] => *one,
        many => {
            c.err(
                "schedule",
                format!(
                    "more than one schedule kind ({}); give exactly one",
                    many.join(", ")
                ),
            );
            return None;
        }
    };
    let value = field(obj, kind_name)?;
    let path = format!("schedule.{kind_name}");
    let schedule = match kind_name {
        "at" => Schedule::At(c.instant(value, &path)?),
        "delay" => Schedule::Delay(c.duration(value, &path)?),
        "every" => Schedule::Every(c.duration(value, &path)?),
        _ => {
            let expr = c.string(value, &path)?;
            let timezone = match field(obj, "timezone") {
                Some(tz) => c.string(tz, "schedule.timezone")?,
                None => DEFAULT_TIMEZONE.to_string(),
            };
            Schedule::Cron { expr, timezone }
        }
    };
    match schedule.compile_checked() {
        Ok(_) => Some(schedule),
        Err(errors) => {
            c.errors.extend(errors);
            None
        }
    }
}

fn parse_http(c: &mut Checker, v: &Value) -> Option<HttpTarget> {
    let Value::Object(obj) = v else {
        c.err(
            "http",
            format!(
                "must be an object like {{\"url\": \"https://...\"}}, found {}",
                kind(v)
            ),
        );
        return None;
    };
    c.unknown_fields(obj, "http", HTTP_FIELDS);
    let url = match field(obj, "url") {
        None => {
            c.err(
                "http.url",
                "missing; give the http(s) URL that receives the POST",
            );
            None
        }
        Some(u) => c.string(u, "http.url").and_then(|u| match check_url(&u) {
            Ok(()) => Some(u),
            Err(e) => {
                c.err("http.url", e);
                None
            }
        }),
    };
    if let Some(u) = &url {
        if u.len() > MAX_URL_BYTES {
            c.err(
                "http.url",
                format!(
                    "is {} bytes long; at most {MAX_URL_BYTES} are allowed",
                    u.len()
                ),
            );
        } else if holds_mask(u) {
            c.err("http.url", MASKED_SECRET.to_owned());
        }
    }
    let headers =
        field(obj, "headers").map_or(Some(BTreeMap::new()), |h| c.string_map(h, "http.headers"));
    if let Some(headers) = &headers {
        if headers.len() > MAX_HTTP_HEADERS {
            c.err(
                "http.headers",
                format!(
                    "has {} headers; at most {MAX_HTTP_HEADERS} are allowed",
                    headers.len()
                ),
            );
        }
        for (k, v) in headers {
            let path = join("http.headers", k);
            if k.len() + v.len() > MAX_HTTP_HEADER_BYTES {
                c.err(
                    &path,
                    format!(
                        "is {} bytes with its name; at most {MAX_HTTP_HEADER_BYTES} are allowed",
                        k.len() + v.len()
                    ),
                );
            } else if holds_mask(v) {
                c.err(&path, MASKED_SECRET.to_owned());
            }
        }
    }
    let follow_redirects =
        field(obj, "follow_redirects").map_or(Some(false), |v| c.bool(v, "http.follow_redirects"));
    let await_completion = field(obj, "async").map_or(Some(false), |v| c.bool(v, "http.async"));
    Some(HttpTarget {
        url: url?,
        headers: headers?,
        follow_redirects: follow_redirects?,
        await_completion: await_completion?,
    })
}

fn parse_command(c: &mut Checker, v: &Value) -> Option<CommandCall> {
    let Value::Object(obj) = v else {
        c.err(
            "command",
            format!(
                "must be an object like {{\"name\": \"backup\"}}, found {}",
                kind(v)
            ),
        );
        return None;
    };
    c.unknown_fields(obj, "command", COMMAND_FIELDS);
    let name = match field(obj, "name") {
        None => {
            c.err(
                "command.name",
                "missing; name a command of the replicas' [worker.commands] (a task never gives a path)",
            );
            None
        }
        Some(v) => c.name(v, "command.name"),
    };
    let args = match field(obj, "args") {
        None => Some(Vec::new()),
        Some(Value::Array(items)) => {
            if items.len() > MAX_COMMAND_ARGS {
                c.err(
                    "command.args",
                    format!(
                        "has {} arguments; at most {MAX_COMMAND_ARGS} are allowed",
                        items.len()
                    ),
                );
            }
            let mut args = Vec::with_capacity(items.len());
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let path = format!("command.args.{i}");
                match c.string(item, &path) {
                    Some(a) => match check_command_text(&a) {
                        Ok(()) => args.push(a),
                        Err(e) => {
                            c.err(&path, e);
                            ok = false;
                        }
                    },
                    None => ok = false,
                }
            }
            ok.then_some(args)
        }
        Some(other) => {
            c.err(
                "command.args",
                format!("must be an array of strings, found {}", kind(other)),
            );
            None
        }
    };
    let env = field(obj, "env").map_or(Some(BTreeMap::new()), |e| c.string_map(e, "command.env"));
    if let Some(env) = &env {
        if env.len() > MAX_COMMAND_ENV {
            c.err(
                "command.env",
                format!(
                    "has {} variables; at most {MAX_COMMAND_ENV} are allowed",
                    env.len()
                ),
            );
        }
        for (k, v) in env {
            let path = join("command.env", k);
            if let Err(e) = check_env_name(k) {
                c.err(&path, e);
            }
            if let Err(e) = check_command_text(v) {
                c.err(&path, e);
            }
        }
    }
    Some(CommandCall {
        name: name?,
        args: args?,
        env: env?,
    })
}

/// An argument or environment value: a C string of bounded size, since that is what
/// `execve` passes on.
fn check_command_text(text: &str) -> Result<(), String> {
    if text.contains('\0') {
        return Err("contains a NUL byte, which no program can receive".into());
    }
    if text.len() > MAX_COMMAND_ARG_BYTES {
        return Err(format!(
            "is {} bytes long; at most {MAX_COMMAND_ARG_BYTES} are allowed",
            text.len()
        ));
    }
    Ok(())
}

/// An environment variable name a task may set: a portable shell identifier
/// (`[A-Za-z_][A-Za-z0-9_]*`), outside ax's own `AX_` names.
pub fn check_env_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= MAX_NAME_LEN;
    if !valid {
        return Err(format!(
            "`{}` is not an environment variable name: use letters, digits and `_`, not starting with a digit, at most {MAX_NAME_LEN} characters",
            name.escape_debug()
        ));
    }
    if name.starts_with("AX_") {
        return Err(format!(
            "`{name}` is reserved: ax sets the AX_ variables of a command itself"
        ));
    }
    Ok(())
}

/// Why a spec holding `***` in a secret is refused.
const MASKED_SECRET: &str = "holds `***`, a secret masked as ax shows it: give the real \
     value (an admin sees it with `ax task get --show-secrets`)";

/// Label count and sizes.
/// `concurrency: {"key": "...", "max": N}`.
fn concurrency(c: &mut Checker, v: &Value) -> Option<Concurrency> {
    let Value::Object(obj) = v else {
        c.err(
            "concurrency",
            format!(
                "must be an object like {{\"key\": \"customer-{{payload.customer}}\", \"max\": 2}}, found {}",
                kind(v)
            ),
        );
        return None;
    };
    c.unknown_fields(obj, "concurrency", &["key", "max"]);
    let key = match field(obj, "key") {
        None => {
            c.err("concurrency.key", "missing");
            None
        }
        Some(Value::String(k)) => match Concurrency::check_key(k) {
            Ok(()) => Some(k.clone()),
            Err(e) => {
                c.err("concurrency.key", e);
                None
            }
        },
        Some(other) => {
            c.err(
                "concurrency.key",
                format!("must be a string, found {}", kind(other)),
            );
            None
        }
    };
    let max = match field(obj, "max") {
        None => {
            c.err("concurrency.max", "missing");
            None
        }
        Some(m) => c.integer(
            m,
            "concurrency.max",
            1,
            u64::from(MAX_CONCURRENCY),
            "concurrency max",
        ),
    };
    Some(Concurrency {
        key: key?,
        max: u32::try_from(max?).ok()?,
    })
}

fn check_labels(c: &mut Checker, labels: &BTreeMap<String, String>) {
    if labels.len() > MAX_LABELS {
        c.err(
            "labels",
            format!(
                "has {} labels; at most {MAX_LABELS} are allowed",
                labels.len()
            ),
        );
    }
    for (k, v) in labels {
        if k.len() > MAX_LABEL_BYTES || v.len() > MAX_LABEL_BYTES {
            c.err(
                &join("labels", k),
                format!("key and value may be at most {MAX_LABEL_BYTES} bytes each"),
            );
        }
    }
}

/// An `http://` or `https://` URL with a host; no full URL parser is needed for that.
fn check_url(url: &str) -> Result<(), String> {
    // Errors quote the URL as ax shows URLs everywhere: without credentials or query values.
    let shown = crate::redact::mask_url(url);
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("`{shown}` must start with http:// or https://"))?;
    if url.chars().any(char::is_whitespace) {
        return Err(format!("`{shown}` contains whitespace"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("`{shown}` has no host"));
    }
    Ok(())
}

fn parse_retry(c: &mut Checker, v: &Value) -> Option<RetryPolicy> {
    let Value::Object(obj) = v else {
        c.err("retry", format!("must be an object, found {}", kind(v)));
        return None;
    };
    c.unknown_fields(obj, "retry", RETRY_FIELDS);
    let d = RetryPolicy::default();
    let max_retries = field(obj, "max_retries").map_or(Some(d.max_retries), |v| {
        c.integer(
            v,
            "retry.max_retries",
            0,
            u64::from(MAX_RETRIES),
            "max_retries",
        )
        .and_then(|n| u32::try_from(n).ok())
    });
    let initial_interval = field(obj, "initial_interval").map_or(Some(d.initial_interval), |v| {
        c.duration(v, "retry.initial_interval")
    });
    let max_interval = field(obj, "max_interval").map_or(Some(d.max_interval), |v| {
        c.duration(v, "retry.max_interval")
    });
    let multiplier = field(obj, "multiplier").map_or(Some(d.multiplier), |v| {
        let m = c.number(v, "retry.multiplier")?;
        if !(1.0..=MAX_MULTIPLIER).contains(&m) {
            c.err(
                "retry.multiplier",
                format!("{m} is out of range 1-{MAX_MULTIPLIER}; 1 keeps the wait constant, 2 doubles it"),
            );
            return None;
        }
        Some(m)
    });
    let jitter = field(obj, "jitter").map_or(Some(d.jitter), |v| {
        let j = c.number(v, "retry.jitter")?;
        if !(0.0..=1.0).contains(&j) {
            c.err(
                "retry.jitter",
                format!("{j} is out of range 0-1 (0.2 spreads waits by +-20%)"),
            );
            return None;
        }
        Some(j)
    });
    // `null` means "no limit", so absence and null differ here.
    let max_elapsed = match obj.get("max_elapsed") {
        None => Some(d.max_elapsed),
        Some(Value::Null) => Some(None),
        Some(v) => c.duration(v, "retry.max_elapsed").map(Some),
    };
    if let (Some(i), Some(m)) = (initial_interval, max_interval) {
        if m < i {
            c.err(
                "retry.max_interval",
                format!(
                    "{} is below initial_interval {}",
                    humantime::format_duration(m),
                    humantime::format_duration(i)
                ),
            );
            return None;
        }
    }
    Some(RetryPolicy {
        max_retries: max_retries?,
        initial_interval: initial_interval?,
        max_interval: max_interval?,
        multiplier: multiplier?,
        jitter: jitter?,
        max_elapsed: max_elapsed?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::DependOn;

    fn parse(json: &str) -> Result<TaskSpec, ValidationErrors> {
        TaskSpec::from_json(json.as_bytes(), "default", "t1")
    }

    fn errors(json: &str) -> Vec<String> {
        match parse(json) {
            Ok(_) => Vec::new(),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn minimal_spec_gets_documented_defaults() {
        let spec = parse(r#"{"handler":"log","schedule":{"every":"10s"}}"#).unwrap();
        assert_eq!(&*spec.id, "t1");
        assert_eq!(&*spec.namespace, "default");
        assert_eq!(spec.schedule, Schedule::Every(Duration::from_secs(10)));
        assert_eq!(&*spec.queue, DEFAULT_QUEUE);
        assert_eq!(spec.priority, DEFAULT_PRIORITY);
        assert_eq!(spec.timeout, DEFAULT_TIMEOUT);
        assert_eq!(*spec.retry, RetryPolicy::default());
        assert_eq!(spec.misfire, MisfirePolicy::FireOnce);
        assert_eq!(spec.overlap, OverlapPolicy::Forbid);
        assert!(!spec.paused);
        assert_eq!(spec.version, DEFAULT_VERSION);
        assert_eq!(spec.payload, Value::Null);
        assert_eq!(spec.created_at, None);
        let cron = parse(r#"{"handler":"log","schedule":{"cron":"@daily"}}"#).unwrap();
        assert_eq!(
            cron.schedule,
            Schedule::Cron {
                expr: "@daily".into(),
                timezone: "UTC".into()
            }
        );
    }

    #[test]
    fn broadcast_fanout_parses_round_trips_and_excludes_shards() {
        let spec =
            parse(r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{"broadcast":true}}"#)
                .unwrap();
        assert_eq!(spec.fanout, Some(Fanout::Broadcast));
        assert_eq!(
            spec.overlap,
            OverlapPolicy::Allow,
            "its shards run side by side"
        );
        let again = TaskSpec::from_json(&spec.to_json(), "default", "t1");
        assert_eq!(again.unwrap().fanout, Some(Fanout::Broadcast));
        let both = errors(
            r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{"broadcast":true,"shards":3}}"#,
        );
        assert!(
            both.iter()
                .any(|e| e.starts_with("fanout:") && e.contains("not both")),
            "{both:?}"
        );
        let off =
            errors(r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{"broadcast":false}}"#);
        assert!(
            off.iter()
                .any(|e| e.starts_with("fanout.broadcast:") && e.contains("found false")),
            "{off:?}"
        );
        let empty = errors(r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{}}"#);
        assert!(
            empty.iter().any(|e| e.contains("broadcast: true")),
            "{empty:?}"
        );
    }

    #[test]
    fn full_example_parses() {
        let spec = parse(
            r#"{"handler":"http","schedule":{"cron":"0 */5 * * * *","timezone":"Asia/Shanghai"},
            "http":{"url":"https://example.com/hook","headers":{"X-Token":"abc"}},"payload":{"a":1},"priority":7,
            "timeout":"30s","retry":{"max_retries":3,"initial_interval":"10s","max_interval":"10m",
            "multiplier":3,"jitter":0.2,"max_elapsed":"1h"},"misfire":"fire_once","overlap":"forbid",
            "paused":false,"labels":{"team":"data"},"queue":"default","version":1,"idempotency_key":null,
            "created_at":"2026-01-01T00:00:00Z","id":"t1","namespace":"default"}"#,
        )
        .unwrap();
        assert_eq!(spec.priority, 7);
        assert_eq!(
            spec.http.as_ref().map(|h| h.url.as_str()),
            Some("https://example.com/hook")
        );
        assert_eq!(spec.created_at, Some(UtcMillis(1_767_225_600_000)));
        assert_eq!(spec.retry.max_elapsed, Some(Duration::from_secs(3600)));
        assert_eq!(spec.http.map(|h| h.follow_redirects), Some(false));
    }

    #[test]
    fn follow_redirects_is_a_bool_of_the_http_target() {
        let on = parse(
            r#"{"handler":"http","schedule":{"every":"1m"},
            "http":{"url":"https://example.com/hook","follow_redirects":true}}"#,
        )
        .unwrap();
        assert_eq!(on.http.map(|h| h.follow_redirects), Some(true));
        let errs = errors(
            r#"{"handler":"http","schedule":{"every":"1m"},
            "http":{"url":"https://example.com/hook","follow_redirects":"yes"}}"#,
        );
        assert_eq!(
            errs,
            ["http.follow_redirects: must be true or false, found a string"]
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let errs = errors(
            r#"{"handler":"http","schedule":{"cron":"0 61 * * *","every":"5s"},"priority":12,
            "timeout":"0s","retry":{"multiplier":0.5,"jitter":1.5,"max_retries":-1,"bogus":1},
            "misfire":"sometimes","colour":"red","id":"other","labels":{"a":1}}"#,
        );
        let expected = [
            "colour: unknown field `colour`",
            "id: `other` does not match the id in the key (`t1`)",
            "schedule: more than one schedule kind (every, cron); give exactly one",
            "http.url: missing",
            "priority: priority 12 is out of range 0-9 (0 lowest, 9 highest)",
            "timeout: `0s` is zero",
            "retry.bogus: unknown field `bogus`",
            "retry.max_retries: max_retries -1 is out of range 0-100",
            "retry.multiplier: 0.5 is out of range 1-100",
            "retry.jitter: 1.5 is out of range 0-1",
            "misfire: `sometimes` is not one of fire_once, fire_all, skip",
            "labels.a: must be a string, found a number",
        ];
        for e in expected {
            assert!(
                errs.iter().any(|x| x.starts_with(e)),
                "missing {e:?} in {errs:#?}"
            );
        }
        assert_eq!(errs.len(), expected.len(), "{errs:#?}");
    }

    #[test]
    fn schedule_problems() {
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{"cron":"61 * * * *"}}"#),
            vec!["schedule.cron: minute 61 is out of range 0-59"]
        );
        assert_eq!(
            errors(
                r#"{"handler":"log","schedule":{"cron":"0 * * * *","timezone":"Asia/Shangai"}}"#
            )
            .len(),
            1
        );
        assert!(errors(
            r#"{"handler":"log","schedule":{"cron":"0 * * * *","timezone":"Asia/Shangai"}}"#
        )[0]
        .starts_with("schedule.timezone: unknown time zone `Asia/Shangai`"));
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{"every":"500ms"}}"#),
            vec!["schedule.every: 500ms is below the minimum of 1s"]
        );
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{"every":"1m"},"idempotency_key":"k"}"#),
            vec!["idempotency_key: applies to one-shot tasks (schedule at or delay): each fire of a periodic task is enqueued once already, and one key shared by every fire would let the task run once per dedupe window (24 h); remove it"]
        );
        assert!(errors(
            r#"{"handler":"log","schedule":{"cron":"0 * * * *"},"idempotency_key":"k"}"#
        )
        .iter()
        .any(|e| e.starts_with("idempotency_key: applies to one-shot tasks")));
        assert!(
            errors(r#"{"handler":"log","schedule":{"delay":"5m"},"idempotency_key":"k"}"#)
                .is_empty()
        );
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{"delay":"-5m"}}"#),
            vec!["schedule.delay: `-5m` is negative; durations must be positive"]
        );
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{"delay":300}}"#),
            vec!["schedule.delay: must be a duration string like \"30s\", found a number; write durations as strings with a unit, e.g. \"300s\" or \"300ms\""]
        );
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{"at":"tomorrow"}}"#).len(),
            1
        );
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{"every":"1m","timezone":"UTC"}}"#),
            vec!["schedule.timezone: only applies to a cron schedule"]
        );
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{}}"#),
            vec!["schedule: no schedule kind; give exactly one of at, delay, every, cron"]
        );
        assert_eq!(
            errors(r#"{"handler":"log"}"#),
            vec!["schedule: missing; give one of {\"at\": ...}, {\"delay\": ...}, {\"every\": ...}, {\"cron\": ...}"]
        );
    }

    #[test]
    fn sizes_of_labels_headers_and_url_are_bounded_and_masks_refused() {
        let many_labels: String = (0..=MAX_LABELS)
            .map(|i| format!("\"l{i}\":\"v\""))
            .collect::<Vec<_>>()
            .join(",");
        let e = errors(&format!(
            r#"{{"handler":"log","schedule":{{"every":"1m"}},"labels":{{{many_labels}}}}}"#
        ));
        assert_eq!(e, vec!["labels: has 65 labels; at most 64 are allowed"]);
        let e = errors(&format!(
            r#"{{"handler":"log","schedule":{{"every":"1m"}},"labels":{{"k":"{}"}}}}"#,
            "v".repeat(MAX_LABEL_BYTES + 1)
        ));
        assert_eq!(
            e,
            vec!["labels.k: key and value may be at most 256 bytes each"]
        );

        let http = |target: &str| {
            errors(&format!(
                r#"{{"handler":"http","schedule":{{"every":"1m"}},"http":{target}}}"#
            ))
        };
        let e = http(&format!(
            r#"{{"url":"https://h/{}"}}"#,
            "p".repeat(MAX_URL_BYTES)
        ));
        assert_eq!(
            e,
            vec!["http.url: is 2058 bytes long; at most 2048 are allowed"]
        );
        let headers: String = (0..=MAX_HTTP_HEADERS)
            .map(|i| format!("\"h{i}\":\"v\""))
            .collect::<Vec<_>>()
            .join(",");
        let e = http(&format!(
            r#"{{"url":"https://h/","headers":{{{headers}}}}}"#
        ));
        assert_eq!(
            e,
            vec!["http.headers: has 33 headers; at most 32 are allowed"]
        );
        let e = http(&format!(
            r#"{{"url":"https://h/","headers":{{"X-Big":"{}"}}}}"#,
            "b".repeat(MAX_HTTP_HEADER_BYTES)
        ));
        assert_eq!(
            e,
            vec!["http.headers.X-Big: is 8197 bytes with its name; at most 8192 are allowed"]
        );
        // A spec copied from a masked view cannot overwrite its secrets with the mask.
        let e = http(r#"{"url":"https://***@h/x?t=***","headers":{"Authorization":"***"}}"#);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("http.url: holds `***`"), "{e:?}");
        assert!(
            e[1].starts_with("http.headers.Authorization: holds `***`"),
            "{e:?}"
        );
        assert!(http(r#"{"url":"https://h/x","headers":{"Authorization":"Bearer t"}}"#).is_empty());
    }

    #[test]
    fn command_calls_name_a_configured_command_with_bounded_args_and_env() {
        let cmd = |call: &str| {
            errors(&format!(
                r#"{{"handler":"command","schedule":{{"every":"1m"}},"command":{call}}}"#
            ))
        };
        let spec = parse(
            r#"{"handler":"command","schedule":{"every":"1m"},
            "command":{"name":"backup","args":["--full","a b"],"env":{"TARGET":"s3://b/x","_x1":""}}}"#,
        )
        .unwrap();
        let call = spec.command.as_ref().unwrap();
        assert_eq!(call.name, "backup");
        assert_eq!(call.args, ["--full", "a b"]);
        assert_eq!(call.env["TARGET"], "s3://b/x");
        assert_eq!(
            TaskSpec::from_json(&spec.to_json(), "default", "t1").unwrap(),
            spec
        );

        assert_eq!(
            errors(r#"{"handler":"command","schedule":{"every":"1m"}}"#),
            vec!["command.name: missing; the command handler needs {\"command\": {\"name\": \"...\"}}, naming a command of the replicas' [worker.commands]"]
        );
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{"every":"1m"},"command":{"name":"x"}}"#),
            vec!["command: is only read by the `command` handler, not `log`; remove it"]
        );
        assert_eq!(
            cmd(r#"{"name":"b","path":"/bin/sh"}"#),
            vec!["command.path: unknown field `path`; allowed: name, args, env"]
        );
        assert_eq!(
            cmd(r#"{"args":[]}"#),
            vec!["command.name: missing; name a command of the replicas' [worker.commands] (a task never gives a path)"]
        );
        assert_eq!(
            cmd(r#"{"name":"/bin/sh"}"#),
            vec![
                "command.name: `/bin/sh` contains '/'; use only letters, digits, `.`, `_` and `-`"
            ]
        );
        assert_eq!(
            cmd(r#""backup""#),
            vec![r#"command: must be an object like {"name": "backup"}, found a string"#]
        );
        assert_eq!(
            cmd(r#"{"name":"b","args":"--full"}"#),
            vec!["command.args: must be an array of strings, found a string"]
        );
        assert_eq!(
            cmd(r#"{"name":"b","args":["ok",1,"a\u0000b"]}"#),
            vec![
                "command.args.1: must be a string, found a number",
                "command.args.2: contains a NUL byte, which no program can receive"
            ]
        );
        let many = vec!["\"a\""; 65].join(",");
        assert_eq!(
            cmd(&format!(r#"{{"name":"b","args":[{many}]}}"#)),
            vec!["command.args: has 65 arguments; at most 64 are allowed"]
        );
        assert_eq!(
            cmd(&format!(
                r#"{{"name":"b","args":["{}"]}}"#,
                "x".repeat(4097)
            )),
            vec!["command.args.0: is 4097 bytes long; at most 4096 are allowed"]
        );
        assert_eq!(
            cmd(r#"{"name":"b","env":{"N":1}}"#),
            vec!["command.env.N: must be a string, found a number"]
        );
        let e = cmd(r#"{"name":"b","env":{"1X":"a","A-B":"a","AX_TASK":"a","OK":"a\u0000"}}"#);
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(
            e[0].starts_with("command.env.1X: `1X` is not an environment variable name"),
            "{e:?}"
        );
        assert!(
            e[1].starts_with("command.env.A-B: `A-B` is not an environment variable name"),
            "{e:?}"
        );
        assert_eq!(
            e[2],
            "command.env.AX_TASK: `AX_TASK` is reserved: ax sets the AX_ variables of a command itself"
        );
        assert_eq!(
            e[3],
            "command.env.OK: contains a NUL byte, which no program can receive"
        );
        let env: Vec<String> = (0..33).map(|i| format!(r#""V{i}":"x""#)).collect();
        assert_eq!(
            cmd(&format!(r#"{{"name":"b","env":{{{}}}}}"#, env.join(","))),
            vec!["command.env: has 33 variables; at most 32 are allowed"]
        );
    }

    #[test]
    fn names_http_and_payload() {
        let e = TaskSpec::from_json(
            br#"{"handler":"log","schedule":{"every":"1m"}}"#,
            "a/b",
            "x y",
        )
        .unwrap_err();
        assert!(e.has("namespace") && e.has("id"), "{e}");
        assert!(e.to_string().contains("`x y` contains ' '"), "{e}");
        assert_eq!(
            check_name(&"a".repeat(129)).unwrap_err(),
            "is 129 characters long; at most 128 are allowed"
        );
        assert!(check_name("report.daily-2_x").is_ok());

        assert_eq!(
            errors(r#"{"handler":"http","schedule":{"every":"1m"},"http":{"url":"ftp://x"}}"#),
            vec!["http.url: `ftp://x` must start with http:// or https://"]
        );
        assert_eq!(
            errors(r#"{"handler":"http","schedule":{"every":"1m"},"http":{"url":"http:///x"}}"#),
            vec!["http.url: `http:///x` has no host"]
        );
        assert_eq!(
            errors(
                r#"{"handler":"http","schedule":{"every":"1m"},"http":{"url":"ftp://u:pw@x/?t=s"}}"#
            ),
            vec!["http.url: `ftp://***@x/?t=***` must start with http:// or https://"]
        );
        assert_eq!(
            errors(r#"{"handler":"log","schedule":{"every":"1m"},"http":{"url":"http://x"}}"#),
            vec!["http: is only read by the `http` handler, not `log`; remove it"]
        );
        assert_eq!(
            errors(r#"{"handler":"","schedule":{"every":"1m"}}"#),
            vec!["handler: must not be empty"]
        );

        let big = format!(
            r#"{{"handler":"log","schedule":{{"every":"1m"}},"payload":"{}"}}"#,
            "x".repeat(40_000)
        );
        assert_eq!(
            errors(&big),
            vec!["payload: is 40002 bytes serialized; the limit is 32768 bytes (32 KiB); store large data elsewhere and pass a reference"]
        );
        assert_eq!(
            errors("[1]"),
            vec!["a task must be a JSON object, found an array"]
        );
        assert!(errors("{").len() == 1 && errors("{")[0].starts_with("not valid JSON"));
    }

    #[test]
    fn retry_rules() {
        assert_eq!(
            errors(
                r#"{"handler":"log","schedule":{"every":"1m"},"retry":{"initial_interval":"1m","max_interval":"10s"}}"#
            ),
            vec!["retry.max_interval: 10s is below initial_interval 1m"]
        );
        let s = parse(r#"{"handler":"log","schedule":{"every":"1m"},"retry":{"max_elapsed":null,"max_retries":0}}"#)
            .unwrap();
        assert_eq!(s.retry.max_elapsed, None);
        assert_eq!(s.retry.max_retries, 0);
    }

    mod round_trip {
        use super::*;
        use proptest::prelude::*;

        fn duration(min_ms: u64) -> impl Strategy<Value = Duration> {
            (min_ms..10_000_000u64).prop_map(Duration::from_millis)
        }

        fn schedule() -> impl Strategy<Value = Schedule> {
            prop_oneof![
                (0i64..4_000_000_000_000).prop_map(|t| Schedule::At(UtcMillis(t))),
                duration(1).prop_map(Schedule::Delay),
                duration(1000).prop_map(Schedule::Every),
                (
                    prop::sample::select(vec![
                        "* * * * *",
                        "0 */5 * * * *",
                        "30 2 * * MON-FRI",
                        "@daily",
                        "0 0 L * ?"
                    ]),
                    prop::sample::select(vec![
                        "UTC",
                        "Asia/Shanghai",
                        "America/New_York",
                        "Australia/Sydney"
                    ]),
                )
                    .prop_map(|(e, z)| Schedule::Cron {
                        expr: e.into(),
                        timezone: z.into()
                    }),
            ]
        }

        fn spec() -> impl Strategy<Value = TaskSpec> {
            (
                (
                    prop::sample::select(vec!["http", "log", "report.daily", "command"]),
                    schedule(),
                    0u8..=9,
                    duration(1),
                ),
                (
                    0u32..=100,
                    duration(1),
                    1u32..=40,
                    0u32..=20,
                    prop::option::of(duration(1)),
                ),
                (
                    prop::sample::select(vec![
                        MisfirePolicy::FireOnce,
                        MisfirePolicy::FireAll,
                        MisfirePolicy::Skip,
                    ]),
                    prop::sample::select(vec![
                        OverlapPolicy::Allow,
                        OverlapPolicy::Forbid,
                        OverlapPolicy::Replace,
                    ]),
                    any::<bool>(),
                    any::<u64>(),
                ),
                (
                    prop::option::of("[a-z0-9:-]{1,40}"),
                    prop::option::of(0i64..4_000_000_000_000),
                    prop::collection::btree_map("[a-z]{1,8}", "[ -~]{0,12}", 0..3),
                    prop::option::of(("[ -~]{0,20}", any::<i32>())),
                    any::<bool>(),
                ),
            )
                .prop_map(
                    |(
                        (handler, schedule, priority, timeout),
                        (retries, init, mult, jit, elapsed),
                        (misfire, overlap, paused, version),
                        (key, created, labels, payload, follow_redirects),
                    )| {
                        let http = (handler == "http").then(|| HttpTarget {
                            url: "https://example.com/hook".into(),
                            headers: labels.clone(),
                            follow_redirects,
                            await_completion: follow_redirects && priority % 2 == 0,
                        });
                        let command = (handler == "command").then(|| CommandCall {
                            name: "backup".into(),
                            args: labels.values().cloned().collect(),
                            env: labels
                                .iter()
                                .map(|(k, v)| (k.to_uppercase(), v.clone()))
                                .collect(),
                        });
                        // Periodic tasks take no idempotency key.
                        let key = key
                            .filter(|_| matches!(schedule, Schedule::At(_) | Schedule::Delay(_)));
                        TaskSpec {
                            id: "t1".into(),
                            namespace: "default".into(),
                            handler: handler.into(),
                            schedule,
                            payload: payload
                                .map_or(Value::Null, |(s, n)| serde_json::json!({"s": s, "n": n})),
                            http,
                            command,
                            queue: "q-1".into(),
                            priority,
                            concurrency: None,
                            timeout,
                            retry: Arc::new(RetryPolicy {
                                max_retries: retries,
                                initial_interval: init,
                                max_interval: init * 2,
                                multiplier: f64::from(mult) / 4.0 + 0.75,
                                jitter: f64::from(jit) / 20.0,
                                max_elapsed: elapsed,
                            }),
                            idempotency_key: key,
                            misfire,
                            overlap,
                            paused,
                            fanout: None,
                            depends_on: Vec::new(),
                            expect_success_within: (version % 3 == 0).then(|| timeout * 2),
                            labels,
                            version,
                            created_at: created.map(UtcMillis),
                        }
                    },
                )
        }

        proptest! {
            #[test]
            fn to_json_then_from_json_is_identity(spec in spec()) {
                let json = spec.to_json();
                let back = TaskSpec::from_json(&json, "default", "t1");
                prop_assert_eq!(back.as_ref(), Ok(&spec), "{}", String::from_utf8_lossy(&json));
                prop_assert!(spec.validate().is_ok());
            }
        }
    }

    #[test]
    fn depends_on_replaces_the_schedule_and_names_each_parent_once() {
        let json = br#"{"handler":"log","depends_on":[{"task":"r"},{"task":"other/x","on":"any","within":"1h"}]}"#;
        let spec = TaskSpec::from_json(json, "ns", "c").unwrap();
        assert_eq!(spec.schedule, Schedule::Dependent);
        assert_eq!(spec.depends_on[0].task, "ns/r");
        assert_eq!(spec.depends_on[0].on, DependOn::Success);
        assert_eq!(spec.depends_on[0].within, DEFAULT_DEPENDENCY_WITHIN);
        assert_eq!(spec.depends_on[1].task, "other/x");
        let back = TaskSpec::from_json(&spec.to_json(), "ns", "c").unwrap();
        assert_eq!(back, spec);
        for (bad, expected) in [
            (
                r#"{"handler":"log","schedule":{"every":"1m"},"depends_on":[{"task":"r"}]}"#,
                "schedule: a task with depends_on fires when its parents finish",
            ),
            (
                r#"{"handler":"log","depends_on":[{"task":"c"}]}"#,
                "cannot depend on itself",
            ),
            (
                r#"{"handler":"log","depends_on":[{"task":"r"},{"task":"ns/r"}]}"#,
                "`ns/r` is listed twice",
            ),
            (
                r#"{"handler":"log","depends_on":[{"task":"r","within":"30days"}]}"#,
                "depends_on[0].within: is above the maximum",
            ),
            (r#"{"handler":"log","depends_on":[]}"#, "lists 0 parents"),
            (
                r#"{"handler":"log","depends_on":[{"task":"r","on":"maybe"}]}"#,
                "depends_on[0].on: `maybe` is not one of success, failure, any",
            ),
            (
                r#"{"handler":"log","depends_on":[{"task":"a b"}]}"#,
                "depends_on[0].task",
            ),
        ] {
            let err = TaskSpec::from_json(bad.as_bytes(), "ns", "c")
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{bad}: {err}");
        }
    }

    #[test]
    fn expect_success_within_is_a_positive_duration() {
        let ok = TaskSpec::from_json(
            br#"{"handler":"log","schedule":{"every":"1m"},"expect_success_within":"2h"}"#,
            "default",
            "t",
        )
        .unwrap();
        assert_eq!(ok.expect_success_within, Some(Duration::from_secs(7200)));
        for (bad, reason) in [(r#""0s""#, "is zero"), ("30", "duration string")] {
            let json = format!(
                r#"{{"handler":"log","schedule":{{"every":"1m"}},"expect_success_within":{bad}}}"#
            );
            let err = TaskSpec::from_json(json.as_bytes(), "default", "t").unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("expect_success_within") && text.contains(reason),
                "{text}"
            );
        }
    }

    #[test]
    fn display_is_one_problem_per_line() {
        let e: ValidationErrors = vec![
            FieldError::new("schedule.cron", "minute 61 is out of range 0-59"),
            FieldError::new("priority", "priority 12 is out of range 0-9"),
        ]
        .into();
        assert_eq!(
            e.to_string(),
            "schedule.cron: minute 61 is out of range 0-59\npriority: priority 12 is out of range 0-9"
        );
        let boxed: Box<dyn std::error::Error> = Box::new(e);
        assert!(boxed.to_string().contains('\n'));
    }

    #[test]
    fn a_concurrency_key_is_read_written_back_and_checked() {
        let spec = TaskSpec::from_json(
            br#"{"handler":"log","schedule":{"every":"60s"},
                 "concurrency":{"key":"customer-{payload.customer}","max":2}}"#,
            "ns",
            "t",
        )
        .unwrap();
        let limit = spec.concurrency.clone().unwrap();
        assert_eq!(
            (limit.key.as_str(), limit.max),
            ("customer-{payload.customer}", 2)
        );
        assert_eq!(
            TaskSpec::from_json(&spec.to_json(), "ns", "t").unwrap(),
            spec
        );
        let bad = |json: &str| {
            TaskSpec::from_json(json.as_bytes(), "ns", "t")
                .unwrap_err()
                .to_string()
        };
        let e = bad(
            r#"{"handler":"log","schedule":{"every":"60s"},"concurrency":{"key":"c-{customer}","max":0}}"#,
        );
        assert!(
            e.contains("concurrency.key: has an unknown placeholder `{customer}`"),
            "{e}"
        );
        assert!(
            e.contains("concurrency.max: concurrency max 0 is out of range 1-10000"),
            "{e}"
        );
        let e = bad(
            r#"{"handler":"log","schedule":{"every":"60s"},"concurrency":{"max":2,"limit":3}}"#,
        );
        assert!(e.contains("concurrency.key: missing"), "{e}");
        assert!(
            e.contains("concurrency.limit: unknown field `limit`"),
            "{e}"
        );
        let e = bad(r#"{"handler":"log","schedule":{"every":"60s"},"concurrency":"c"}"#);
        assert!(e.contains("concurrency: must be an object"), "{e}");
    }
}
