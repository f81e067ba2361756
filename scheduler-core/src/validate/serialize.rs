//! The JSON form written back: what `from_json` reads, with every default spelled out.
//!
//! Written by hand rather than derived so that it is the user-facing form field for field
//! (durations as humantime strings, instants as RFC 3339, an absent `schedule` for a task
//! with parents) and `from_json(to_json(spec))` gives `spec` again. Each section has its own
//! writer, so a section's reader and writer can be compared side by side.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::SecondsFormat;
use serde_json::{Map, Value};

use crate::concurrency::Concurrency;
use crate::task::{CommandCall, Dependency, Fanout, HttpTarget, RetryPolicy, Schedule, TaskSpec};
use crate::time::UtcMillis;

impl TaskSpec {
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
            obj.insert("http".into(), http_json(h));
        }
        if let Some(cmd) = &self.command {
            obj.insert("command".into(), command_json(cmd));
        }
        obj.insert("queue".into(), Value::from(&*self.queue));
        obj.insert("priority".into(), self.priority.into());
        obj.insert("timeout".into(), duration_json(self.timeout));
        obj.insert("retry".into(), retry_json(&self.retry));
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
            obj.insert("concurrency".into(), concurrency_json(cc));
        }
        if let Some(fanout) = self.fanout {
            obj.insert("fanout".into(), fanout_json(fanout));
        }
        if !self.depends_on.is_empty() {
            obj.insert("depends_on".into(), depends_on_json(&self.depends_on));
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
}

fn http_json(h: &HttpTarget) -> Value {
    let mut http = Map::new();
    http.insert("url".into(), h.url.clone().into());
    http.insert("headers".into(), string_map_json(&h.headers));
    http.insert("follow_redirects".into(), h.follow_redirects.into());
    if h.await_completion {
        http.insert("async".into(), true.into());
    }
    Value::Object(http)
}

fn command_json(cmd: &CommandCall) -> Value {
    let mut command = Map::new();
    command.insert("name".into(), cmd.name.clone().into());
    command.insert("args".into(), cmd.args.clone().into());
    command.insert("env".into(), string_map_json(&cmd.env));
    Value::Object(command)
}

fn retry_json(r: &RetryPolicy) -> Value {
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
    Value::Object(retry)
}

fn concurrency_json(cc: &Concurrency) -> Value {
    let mut limit = Map::new();
    limit.insert("key".into(), Value::from(cc.key.as_str()));
    limit.insert("max".into(), cc.max.into());
    Value::Object(limit)
}

fn fanout_json(fanout: Fanout) -> Value {
    let mut f = Map::new();
    match fanout {
        Fanout::Pieces(n) => f.insert("shards".into(), n.into()),
        Fanout::Broadcast => f.insert("broadcast".into(), true.into()),
    };
    Value::Object(f)
}

fn depends_on_json(depends_on: &[Dependency]) -> Value {
    let deps = depends_on
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
    Value::Array(deps)
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
