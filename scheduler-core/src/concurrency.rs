//! Concurrency keys: at most `max` executions sharing a key run at once, across all workers.
//!
//! A task declares `concurrency: {key, max}`; the key is a template resolved per execution
//! when it is enqueued (so one task can limit per customer with `customer-{payload.customer}`),
//! and the queue's scripts enforce the limit (see `docs/redis-layout.md`). Keys are scoped to
//! the task's queue: two tasks share a limit when their executions go to the same queue
//! with the same resolved key.
//!
//! Placeholders: `{namespace}`, `{id}` (the task's), and `{payload.FIELD}` (a top-level field
//! of the payload: a string as is, any other value as its JSON text, a missing field as the
//! empty string). Nothing else may appear between braces, so a resolved key never holds one
//! and cannot move the queue's hash tag.

use serde::{Deserialize, Serialize};

/// Most bytes of a key template (and of a resolved key, which is cut to it).
pub const MAX_CONCURRENCY_KEY_BYTES: usize = 200;
/// Highest `max` of a concurrency key.
pub const MAX_CONCURRENCY: u32 = 10_000;

/// A task's concurrency limit, as declared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Concurrency {
    /// Key template (see the module notes).
    pub key: String,
    /// Most executions with the same resolved key running at once, 1 ..= [`MAX_CONCURRENCY`].
    pub max: u32,
}

/// One piece of a key template.
enum Part<'a> {
    Text(&'a str),
    Namespace,
    Id,
    Payload(&'a str),
}

/// Splits a template into its parts, or says what is wrong with it.
fn parse(template: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err("has a `}` without its `{`".into());
        }
        if open > 0 {
            parts.push(Part::Text(&rest[..open]));
        }
        let Some(len) = rest[open + 1..].find('}') else {
            return Err("has a `{` without its `}`".into());
        };
        let name = &rest[open + 1..open + 1 + len];
        parts.push(match name {
            "namespace" => Part::Namespace,
            "id" => Part::Id,
            _ => match name.strip_prefix("payload.") {
                Some(f) if !f.is_empty() && !f.contains(['{', '}']) => Part::Payload(f),
                _ => {
                    return Err(format!(
                        "has an unknown placeholder `{{{name}}}`; use {{namespace}}, {{id}} or \
                         {{payload.FIELD}}"
                    ))
                }
            },
        });
        rest = &rest[open + 2 + len..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest));
    }
    Ok(parts)
}

impl Concurrency {
    /// What is wrong with the template, if anything (empty, too long, a stray brace, an
    /// unknown placeholder).
    pub fn check_key(template: &str) -> Result<(), String> {
        if template.trim().is_empty() {
            return Err("must not be empty".into());
        }
        if template.len() > MAX_CONCURRENCY_KEY_BYTES {
            return Err(format!(
                "is {} bytes; at most {MAX_CONCURRENCY_KEY_BYTES} are allowed",
                template.len()
            ));
        }
        parse(template).map(|_| ())
    }

    /// The key of one execution of task `namespace/id` with `payload`. Braces in the
    /// substituted values are replaced by `_` (they would move a Redis hash tag), and the
    /// result is cut to [`MAX_CONCURRENCY_KEY_BYTES`].
    pub fn resolve(&self, namespace: &str, id: &str, payload: &serde_json::Value) -> String {
        let Ok(parts) = parse(&self.key) else {
            // A spec that passed validation always parses; an unparsable one limits as a
            // whole.
            return self.key.replace(['{', '}'], "_");
        };
        let mut out = String::new();
        for p in parts {
            let value = match p {
                Part::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                Part::Namespace => namespace.to_string(),
                Part::Id => id.to_string(),
                Part::Payload(f) => match payload.get(f) {
                    None | Some(serde_json::Value::Null) => String::new(),
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                },
            };
            out.push_str(&value.replace(['{', '}'], "_"));
        }
        if out.len() > MAX_CONCURRENCY_KEY_BYTES {
            let mut cut = MAX_CONCURRENCY_KEY_BYTES;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(key: &str) -> Concurrency {
        Concurrency {
            key: key.into(),
            max: 2,
        }
    }

    #[test]
    fn placeholders_resolve_per_execution() {
        let payload = serde_json::json!({"customer": "42", "n": 7, "o": {"a": "{x}"}});
        assert_eq!(
            c("customer-{payload.customer}").resolve("ns", "t", &payload),
            "customer-42"
        );
        assert_eq!(
            c("{namespace}/{id}:{payload.n}:{payload.missing}").resolve("ns", "t", &payload),
            "ns/t:7:"
        );
        assert_eq!(
            c("{payload.o}").resolve("ns", "t", &payload),
            r#"_"a":"_x_"_"#
        );
        assert_eq!(c("fixed").resolve("ns", "t", &payload), "fixed");
    }

    #[test]
    fn bad_templates_say_why() {
        assert!(Concurrency::check_key("").unwrap_err().contains("empty"));
        assert!(Concurrency::check_key("a{b")
            .unwrap_err()
            .contains("without its `}`"));
        assert!(Concurrency::check_key("a}b")
            .unwrap_err()
            .contains("without its `{`"));
        let e = Concurrency::check_key("{customer}").unwrap_err();
        assert!(e.contains("unknown placeholder `{customer}`"), "{e}");
        assert!(Concurrency::check_key(&"x".repeat(201))
            .unwrap_err()
            .contains("at most 200"));
        assert!(Concurrency::check_key("c-{payload.customer}-{namespace}-{id}").is_ok());
    }
}
