//! A task spec file as `ax task put` reads it: where its key comes from, its validation, and
//! the `--dry-run` preview.
//!
//! In etcd a spec's id and namespace are its key; in a file they may be written in the JSON
//! or given on the command line. The precedence is flag, then JSON field, then (for the id) the
//! file name without `.json`, then (for the namespace) `default`; a JSON field that disagrees
//! with a flag is reported by the core's validation, which checks the document against its
//! key. Validation itself is the core's (`TaskSpec::from_json`), so the CLI, the API and the
//! engine accept exactly the same documents.

use std::path::Path;

use ax_control::api::PREVIEW_FIRES;
use ax_scheduler_core::task::DEFAULT_NAMESPACE;
use ax_scheduler_core::{TaskKey, TaskSpec, UtcMillis};

/// Works out the key a spec file is registered under, from `bytes` read from `source` (a
/// path, or `-` for stdin).
pub fn resolve_key(
    bytes: &[u8],
    source: &str,
    id_flag: Option<&str>,
    namespace_flag: Option<&str>,
) -> Result<TaskKey, String> {
    let doc: Option<serde_json::Value> = serde_json::from_slice(bytes).ok();
    let field = |name: &str| {
        doc.as_ref()
            .and_then(|d| d.get(name))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let from_file_name = || {
        (source != "-")
            .then(|| Path::new(source).file_stem())
            .flatten()
            .and_then(|s| s.to_str())
            .map(str::to_owned)
    };
    let id = id_flag
        .map(str::to_owned)
        .or_else(|| field("id"))
        .or_else(from_file_name)
        .ok_or_else(|| {
            "the task has no id: give --id, or an \"id\" field in the JSON".to_owned()
        })?;
    let namespace = namespace_flag
        .map(str::to_owned)
        .or_else(|| field("namespace"))
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    Ok(TaskKey::new(namespace, id))
}

/// Validates `bytes` as the spec stored under `key`; every problem as one line.
pub fn validate(bytes: &[u8], key: &TaskKey) -> Result<TaskSpec, Vec<String>> {
    TaskSpec::from_json(bytes, &key.namespace, &key.id)
        .map_err(|errors| errors.iter().map(ToString::to_string).collect())
}

/// The `--dry-run` report: the key and the next fires after `now` (the countdown of a
/// `delay` or `every` starting at the spec's `created_at`, else at `now`, as it would if the
/// spec were registered now).
pub fn preview(spec: &TaskSpec, now: UtcMillis) -> Result<String, Vec<String>> {
    let compiled = spec.schedule.compile().map_err(|e| vec![e.to_string()])?;
    let anchor = spec.created_at.unwrap_or(now);
    let fires = compiled.upcoming(now, anchor, PREVIEW_FIRES);
    let mut out = format!(
        "task {}/{} is valid (dry run: nothing written)\n",
        spec.namespace, spec.id
    );
    if spec.paused {
        out.push_str("it is paused: it will not fire until resumed\n");
    }
    if fires.is_empty() {
        match compiled.first_fire(anchor) {
            Some(t) if t <= now => out.push_str(&format!(
                "no future fires: it was due at {t}, so it runs once, late, when registered (misfire policy: {:?})\n",
                spec.misfire
            )),
            _ => out.push_str("no future fires\n"),
        }
    } else {
        out.push_str(&crate::cli::output::fire_lines(&fires, &spec.schedule));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_precedence() {
        let doc = br#"{"id": "in-json", "namespace": "ops"}"#;
        let k = resolve_key(doc, "dir/file-name.json", Some("flag-id"), Some("flag-ns")).unwrap();
        assert_eq!((&*k.namespace, &*k.id), ("flag-ns", "flag-id"));
        let k = resolve_key(doc, "dir/file-name.json", None, None).unwrap();
        assert_eq!((&*k.namespace, &*k.id), ("ops", "in-json"));
        let k = resolve_key(b"{}", "dir/file-name.json", None, None).unwrap();
        assert_eq!((&*k.namespace, &*k.id), ("default", "file-name"));
        assert!(resolve_key(b"{}", "-", None, None).is_err());
        // Unparseable JSON still gets a key, so that validation reports the syntax error.
        assert_eq!(&*resolve_key(b"{", "t.json", None, None).unwrap().id, "t");
    }

    #[test]
    fn every_fires_from_now() {
        let key = TaskKey::new("default", "beat");
        let spec = validate(br#"{"handler": "log", "schedule": {"every": "1m"}}"#, &key).unwrap();
        let now = UtcMillis(1_800_000_000_000);
        let report = preview(&spec, now).unwrap();
        assert!(report.contains("next 5 fire(s)"), "{report}");
        assert!(
            report.contains(&format!("  {}\n", UtcMillis(now.0 + 60_000))),
            "{report}"
        );
        assert!(
            report.contains(&format!("  {}\n", UtcMillis(now.0 + 300_000))),
            "{report}"
        );
    }

    #[test]
    fn a_past_one_shot_says_it_runs_late() {
        let key = TaskKey::new("default", "once");
        let spec = validate(
            br#"{"handler": "log", "schedule": {"at": "2020-01-01T00:00:00Z"}}"#,
            &key,
        )
        .unwrap();
        let report = preview(&spec, UtcMillis(1_800_000_000_000)).unwrap();
        assert!(
            report.contains("no future fires: it was due at 2020-01-01T00:00:00.000Z"),
            "{report}"
        );
    }

    #[test]
    fn invalid_specs_list_every_problem() {
        let key = TaskKey::new("default", "bad");
        let errors =
            validate(br#"{"schedule": {"every": "soon"}, "colour": 1}"#, &key).unwrap_err();
        assert!(errors.len() >= 3, "{errors:#?}");
        assert!(
            errors.iter().any(|e| e.starts_with("handler:")),
            "{errors:#?}"
        );
        assert!(errors.iter().any(|e| e.contains("colour")), "{errors:#?}");
    }
}
