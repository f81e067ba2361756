//! The `command` section: which configured command the `command` handler runs, with what.
//!
//! A task names a command of the replicas' `[worker.commands]` and never a path, so what may
//! run stays in the operator's hands. Arguments and environment values end up in `execve`,
//! hence the C-string rules; the environment name rule is public because the worker checks
//! its configured variables by the same rule.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::checker::{field, join, kind, Checker};
use crate::task::{
    CommandCall, MAX_COMMAND_ARGS, MAX_COMMAND_ARG_BYTES, MAX_COMMAND_ENV, MAX_NAME_LEN,
};

const COMMAND_FIELDS: &[&str] = &["name", "args", "env"];

/// The top-level `command`, which the `command` handler needs and no other handler reads.
pub(super) fn read_command(
    c: &mut Checker,
    obj: &Map<String, Value>,
    handler: Option<&str>,
) -> Option<CommandCall> {
    let command = field(obj, "command").and_then(|v| parse_command(c, v));
    match (handler, field(obj, "command")) {
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
    command
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
    let args = read_args(c, obj);
    let env = field(obj, "env").map_or(Some(BTreeMap::new()), |e| c.string_map(e, "command.env"));
    if let Some(env) = &env {
        check_env(c, env);
    }
    Some(CommandCall {
        name: name?,
        args: args?,
        env: env?,
    })
}

/// `command.args`: a bounded list of strings.
fn read_args(c: &mut Checker, obj: &Map<String, Value>) -> Option<Vec<String>> {
    match field(obj, "args") {
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
    }
}

/// Variable count, names and values.
fn check_env(c: &mut Checker, env: &BTreeMap<String, String>) {
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
        } else if crate::redact::holds_mask(v) {
            c.err(&path, super::http::MASKED_SECRET.to_owned());
        }
    }
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
