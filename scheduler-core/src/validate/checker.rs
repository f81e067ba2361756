//! The value checker: reads one JSON value as a typed field and records what is wrong.
//!
//! Every section parser goes through [`Checker`], so a problem is worded the same way
//! wherever the field sits ("must be a string, found a number") and all of them land in one
//! list, in the order the fields are read. A reader returns `None` when it recorded a
//! problem, which lets a parser go on to the next field instead of stopping.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::DateTime;
use serde_json::{Map, Value};

use super::FieldError;
use crate::task::MAX_NAME_LEN;
use crate::time::UtcMillis;

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
#[derive(Default)]
pub(super) struct Checker {
    pub(super) errors: Vec<FieldError>,
}

impl Checker {
    pub(super) fn err(&mut self, path: &str, reason: impl Into<String>) {
        self.errors.push(FieldError::new(path, reason));
    }

    /// Records `problem` at `path` if there is one; true when there is none.
    pub(super) fn problem(&mut self, path: &str, problem: Option<String>) -> bool {
        match problem {
            Some(reason) => {
                self.err(path, reason);
                false
            }
            None => true,
        }
    }

    pub(super) fn unknown_fields(
        &mut self,
        obj: &Map<String, Value>,
        prefix: &str,
        allowed: &[&str],
    ) {
        for key in obj.keys().filter(|k| !allowed.contains(&k.as_str())) {
            let path = join(prefix, key);
            let hint = crate::suggest::closest(key, allowed)
                .map(|m| format!("did you mean `{m}`? "))
                .unwrap_or_default();
            self.err(
                &path,
                format!(
                    "unknown field `{key}`; {hint}allowed: {}",
                    allowed.join(", ")
                ),
            );
        }
    }

    pub(super) fn string(&mut self, v: &Value, path: &str) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.err(path, format!("must be a string, found {}", kind(other)));
                None
            }
        }
    }

    pub(super) fn name(&mut self, v: &Value, path: &str) -> Option<String> {
        let s = self.string(v, path)?;
        match check_name(&s) {
            Ok(()) => Some(s),
            Err(e) => {
                self.err(path, e);
                None
            }
        }
    }

    pub(super) fn bool(&mut self, v: &Value, path: &str) -> Option<bool> {
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
    pub(super) fn integer(
        &mut self,
        v: &Value,
        path: &str,
        min: u64,
        max: u64,
        what: &str,
    ) -> Option<u64> {
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

    /// Any whole number, signed or not, for a reader whose bound is checked elsewhere.
    pub(super) fn whole(&mut self, v: &Value, path: &str) -> Option<i128> {
        let Value::Number(n) = v else {
            self.err(path, format!("must be a whole number, found {}", kind(v)));
            return None;
        };
        let whole = n.as_u64().map(i128::from).or(n.as_i64().map(i128::from));
        if whole.is_none() {
            self.err(path, format!("must be a whole number, found {n}"));
        }
        whole
    }

    pub(super) fn number(&mut self, v: &Value, path: &str) -> Option<f64> {
        match v.as_f64() {
            Some(x) if x.is_finite() => Some(x),
            _ => {
                self.err(path, format!("must be a number, found {}", kind(v)));
                None
            }
        }
    }

    /// A humantime duration string above zero.
    pub(super) fn duration(&mut self, v: &Value, path: &str) -> Option<Duration> {
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

    pub(super) fn instant(&mut self, v: &Value, path: &str) -> Option<UtcMillis> {
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

    pub(super) fn string_map(&mut self, v: &Value, path: &str) -> Option<BTreeMap<String, String>> {
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

/// The path of `key` inside the object at `prefix`.
pub(super) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// How a problem names the JSON type that was found instead.
pub(super) fn kind(v: &Value) -> &'static str {
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
pub(super) fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// One of the named `options`, e.g. `"fire_once"` for a misfire policy.
pub(super) fn enum_value<T: Copy>(
    c: &mut Checker,
    v: &Value,
    path: &str,
    options: &[(&str, T)],
) -> Option<T> {
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
