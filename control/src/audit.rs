//! The audit log: who changed what through ax, and when.
//!
//! One record per change that succeeded (a put, delete, pause, resume, run-now, requeue,
//! purge, ...), made by the API (the caller's token name) or the CLI (the operating-system
//! user running it), with the action, its target, and for a spec change the diff, secrets
//! masked. Refused and failed requests are not changes; they are counted and logged where
//! they are refused.
//!
//! Records live in etcd under `{prefix}/audit/{at:013}-{random}`: they must survive a Redis
//! restart, the volume is human-scale (changes, not executions), and keys that sort by time
//! make "newest first since T" one range read and retention one range delete. The leader
//! deletes records older than `audit.retention`.
//!
//! This module is the log's data (records, queries, pages, the diff of a spec, who made a
//! change), free of any transport, so the API, the CLI, the SDK and the leader write the same
//! records. The records of changes made through ax are built and written by
//! [`crate::operations`], whichever front end asked; a put hands its diff to it as an
//! [`AuditDetail`].

use std::collections::BTreeMap;

use ax_scheduler_core::UtcMillis;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Largest audit record, bytes of JSON: a spec diff of a 1 MiB spec would be a 1 MiB etcd
/// value per change. A detail that makes a record larger is replaced by its size and SHA-256.
pub const MAX_RECORD_BYTES: usize = 16 * 1024;

/// A record up to this size counts this much against `audit.max_bytes`; a larger one counts
/// [`MAX_RECORD_BYTES`]. Most records (an action, a target, a short detail) are far smaller.
pub const SMALL_RECORD_BYTES: usize = 1024;

/// `via` of a change made through the HTTP API.
pub const VIA_API: &str = "api";
/// `via` of a change made with the CLI.
pub const VIA_CLI: &str = "cli";
/// `via` (and actor) of a change written to etcd without ax.
pub const VIA_ETCD: &str = "etcd (direct)";

/// Who makes a change, and through what: the actor and `via` of its audit record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actor {
    /// The API token's name, `cli:<user>@<host>`, a service's name.
    pub name: String,
    /// [`VIA_API`], [`VIA_CLI`].
    pub via: String,
}

impl Actor {
    /// A caller of the HTTP API (or of the cluster from code), by name.
    pub fn api(name: impl Into<String>) -> Self {
        Actor {
            name: name.into(),
            via: VIA_API.to_owned(),
        }
    }

    /// A user of the CLI, by name.
    pub fn cli(name: impl Into<String>) -> Self {
        Actor {
            name: name.into(),
            via: VIA_CLI.to_owned(),
        }
    }
}

/// One change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When it was made, ms since the epoch (UTC).
    pub at: UtcMillis,
    /// Who: the API token's name, `cli:<user>`, or `etcd (direct)`.
    pub actor: String,
    /// Through what: `api`, `cli` or `etcd (direct)`.
    pub via: String,
    /// What: `task.put`, `task.delete`, `task.pause`, `dlq.requeue`, ...
    pub action: String,
    /// On what: `namespace/id`, a queue, an execution id; empty when the action has none.
    pub target: String,
    /// More: a spec change's diff (secrets masked), the request's query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    /// The etcd revision the change was written at, when it was an etcd write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

/// Which records `GET /api/v1/audit` returns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    /// Only records at or after this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<UtcMillis>,
    /// Only records of this actor: its whole name, or its first word (`etcd` finds
    /// `etcd (direct)`, `cli` every `cli:<user>`); see [`AuditQuery::admits_actor`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Most records in the page, 1 to 1000; default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The previous page's continue token.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

impl AuditQuery {
    /// Whether a record by `actor` passes the actor filter: no filter, the same name, or the
    /// name's first word before a space, `:` or `@` (`etcd (direct)`, `cli:alice@host`).
    pub fn admits_actor(&self, actor: &str) -> bool {
        self.actor.as_deref().is_none_or(|want| {
            actor == want
                || actor
                    .strip_prefix(want)
                    .is_some_and(|rest| rest.starts_with([' ', ':', '@']))
        })
    }
}

/// Records in a page when the query gives no limit.
pub const DEFAULT_AUDIT_PAGE: usize = 100;

/// One page of the audit log, newest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditPage {
    /// The records, newest first.
    pub items: Vec<AuditRecord>,
    /// Pass as `continue` for the next (older) page; `None` on the last.
    pub continue_token: Option<String>,
}

/// What a route adds to its audit record, as a response extension.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuditDetail {
    /// The target, when the route's path does not name it (a put names it in its body).
    pub target: Option<String>,
    /// The change's details.
    pub detail: Option<Value>,
    /// The etcd revision of the change.
    pub revision: Option<i64>,
}

/// The changes from `old` to `new` as `{path: {"from", "to"}}`, objects compared key by key
/// and anything else as a whole; the values shown have their secrets masked, so a changed
/// header shows as changed without showing either value. `old` is `None` for a new task.
///
/// Paths are walked as segments (a header may be named `X.Api.Key`) and only joined for
/// display by [`display_path`]; masking looks at the segments, so no key can hide a value
/// from it.
pub fn spec_diff(old: Option<&Value>, new: &Value) -> Value {
    let Some(old) = old else {
        let mut created = new.clone();
        ax_scheduler_core::redact::mask_spec(&mut created);
        return serde_json::json!({ "created": created });
    };
    let mut changes = BTreeMap::new();
    diff_into(&mut changes, &mut Vec::new(), old, new);
    serde_json::json!({ "changed": changes })
}

fn diff_into<'a>(
    out: &mut BTreeMap<String, Value>,
    path: &mut Vec<&'a str>,
    old: &'a Value,
    new: &'a Value,
) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let (x, y) = (a.get(k), b.get(k));
                path.push(k);
                diff_into(
                    out,
                    path,
                    x.unwrap_or(&Value::Null),
                    y.unwrap_or(&Value::Null),
                );
                path.pop();
            }
        }
        (a, b) if a != b => {
            let change =
                serde_json::json!({ "from": masked_at(path, a), "to": masked_at(path, b) });
            out.insert(display_path(path), change);
        }
        _ => {}
    }
}

/// `path` as people read it: plain segments joined by `.`, any other segment quoted as a
/// JSON string in brackets (`http.headers["X.Api.Key"]`), so two paths never read alike.
pub fn display_path(path: &[&str]) -> String {
    let mut out = String::new();
    for segment in path {
        let plain = !segment.is_empty()
            && segment
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if plain {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        } else {
            out.push('[');
            out.push_str(&Value::from(*segment).to_string());
            out.push(']');
        }
    }
    out
}

/// `value` as it shows at `path` of a masked spec: put back in place, masked with the
/// spec's rules (one definition of what is secret), and taken out again.
fn masked_at(path: &[&str], value: &Value) -> Value {
    let mut doc = value.clone();
    for p in path.iter().rev() {
        let mut parent = serde_json::Map::new();
        parent.insert((*p).to_owned(), doc);
        doc = Value::Object(parent);
    }
    ax_scheduler_core::redact::mask_spec(&mut doc);
    let mut cur = &doc;
    for p in path {
        cur = &cur[*p];
    }
    cur.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_actor_filter_is_the_whole_name_or_its_first_word() {
        let q = |a: &str| AuditQuery {
            actor: Some(a.into()),
            ..AuditQuery::default()
        };
        assert!(q("etcd").admits_actor(VIA_ETCD));
        assert!(q("etcd (direct)").admits_actor(VIA_ETCD));
        assert!(q("cli").admits_actor("cli:alice@host"));
        assert!(q("cli:alice").admits_actor("cli:alice@host"));
        assert!(!q("cli:al").admits_actor("cli:alice@host"));
        assert!(!q("etc").admits_actor(VIA_ETCD));
        assert!(!q("ops").admits_actor("ops-bot"));
        assert!(AuditQuery::default().admits_actor("anyone"));
    }

    #[test]
    fn a_spec_diff_names_each_changed_field_with_secrets_masked() {
        let old = serde_json::json!({"schedule": {"cron": "0 * * * * *"}, "paused": false,
            "http": {"url": "https://h/x", "headers": {"Authorization": "old-secret"}}});
        let new = serde_json::json!({"schedule": {"cron": "0 */5 * * * *"}, "paused": false,
            "http": {"url": "https://h/x", "headers": {"Authorization": "new-secret"}},
            "labels": {"team": "data"}});
        let d = spec_diff(Some(&old), &new);
        assert_eq!(
            d,
            serde_json::json!({"changed": {
                "schedule.cron": {"from": "0 * * * * *", "to": "0 */5 * * * *"},
                "http.headers.Authorization": {"from": "***", "to": "***"},
                "labels": {"from": null, "to": {"team": "data"}},
            }})
        );
        assert!(!d.to_string().contains("secret"), "{d}");
        let created = spec_diff(None, &new);
        assert!(!created.to_string().contains("new-secret"), "{created}");
    }

    #[test]
    fn keys_with_dots_neither_hide_secrets_nor_read_as_other_paths() {
        let old = serde_json::json!({"http": {"url": "https://h/x",
            "headers": {"X.Api.Key": "old-secret"}},
            "command": {"env": {"TOKEN": "old-env"}},
            "labels": {"a.b": "1", "a": {"b": "2"}}});
        let new = serde_json::json!({"http": {"url": "https://h/x",
            "headers": {"X.Api.Key": "new-secret"}},
            "command": {"env": {"TOKEN": "new-env"}},
            "labels": {"a.b": "3", "a": {"b": "4"}}});
        let d = spec_diff(Some(&old), &new);
        assert_eq!(
            d,
            serde_json::json!({"changed": {
                "http.headers[\"X.Api.Key\"]": {"from": "***", "to": "***"},
                "command.env.TOKEN": {"from": "***", "to": "***"},
                "labels[\"a.b\"]": {"from": "1", "to": "3"},
                "labels.a.b": {"from": "2", "to": "4"},
            }})
        );
        assert_eq!(display_path(&["a", "", "b c"]), "a[\"\"][\"b c\"]");
    }
}
