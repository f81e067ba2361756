//! The `depends_on` section: the parents whose end fires this task.
//!
//! Only what one spec can tell is checked here: each parent named once, in a valid form,
//! never the task itself. Whether the parents exist and the graph has no cycle needs every
//! task, so `crate::workflow` says that. One list item is read as a unit so its problems
//! come together, in the order of its fields.

use serde_json::{Map, Value};

use super::checker::{check_name, enum_value, field, kind, Checker};
use crate::task::{
    DependOn, Dependency, DEFAULT_DEPENDENCY_WITHIN, MAX_DEPENDENCY_WITHIN, MAX_PARENTS,
};

const DEPENDENCY_FIELDS: &[&str] = &["task", "on", "within"];

/// The top-level `depends_on`: empty when absent.
pub(super) fn read_depends_on(
    c: &mut Checker,
    obj: &Map<String, Value>,
    namespace: &str,
    id: &str,
) -> Option<Vec<Dependency>> {
    match field(obj, "depends_on") {
        None => Some(Vec::new()),
        Some(v) => parse_depends_on(c, v, namespace, id),
    }
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
        if let Some(dep) = parse_dependency(c, obj, &path, namespace, id) {
            if out.iter().any(|d: &Dependency| d.task == dep.task) {
                c.err(
                    &format!("{path}.task"),
                    format!("`{}` is listed twice", dep.task),
                );
            } else {
                out.push(dep);
            }
        }
    }
    (c.errors.len() == errors_before).then_some(out)
}

/// One parent, `depends_on[i]` at `path`.
fn parse_dependency(
    c: &mut Checker,
    obj: &Map<String, Value>,
    path: &str,
    namespace: &str,
    id: &str,
) -> Option<Dependency> {
    c.unknown_fields(obj, path, DEPENDENCY_FIELDS);
    let task = parent_task(c, obj, &format!("{path}.task"), namespace, id);
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
    Some(Dependency {
        task: task?,
        on: on?,
        within: within?,
    })
}

/// The parent's `task`, written out as `namespace/id`.
fn parent_task(
    c: &mut Checker,
    obj: &Map<String, Value>,
    task_path: &str,
    namespace: &str,
    id: &str,
) -> Option<String> {
    let task = match field(obj, "task") {
        Some(t) => c.string(t, task_path),
        None => {
            c.err(
                task_path,
                "missing; name the parent as \"namespace/id\" or \"id\"",
            );
            None
        }
    };
    task.and_then(|t| {
        let (ns, parent) = t.split_once('/').unwrap_or((namespace, t.as_str()));
        for part in [ns, parent] {
            if let Err(e) = check_name(part) {
                c.err(task_path, format!("`{t}`: {e}"));
                return None;
            }
        }
        if ns == namespace && parent == id {
            c.err(task_path, "a task cannot depend on itself");
            return None;
        }
        Some(format!("{ns}/{parent}"))
    })
}
