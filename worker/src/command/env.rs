//! The environment a command runs with: built from nothing, never inherited.
//!
//! A replica's environment holds its own secrets (the Redis and etcd passwords, API tokens):
//! a command inherits none of it. It gets, in this order, each layer overriding the one
//! before: a small base ([`BASE_ENV`]), the variables its configuration fixes (`env`), the
//! variables the task sets (only names the configuration's `allow_env` lists), and the
//! execution's `AX_*` variables, which nothing overrides.

use std::collections::BTreeMap;

use ax_queue::ExecutionMessage;

use super::CommandConfig;

/// What every command starts with. `HOME` here is only a fallback: each attempt gets a
/// private home of its own (see `home`), unless the command's `env` sets one.
pub const BASE_ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("LANG", "C.UTF-8"),
    ("HOME", "/tmp"),
];

/// The command's environment, or the task's variables the configuration does not allow.
pub(crate) fn build(
    cfg: &CommandConfig,
    exec: &ExecutionMessage,
    task_env: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, Vec<String>> {
    let refused: Vec<String> = task_env
        .keys()
        .filter(|k| !cfg.allow_env.iter().any(|a| a == *k))
        .cloned()
        .collect();
    if !refused.is_empty() {
        return Err(refused);
    }
    let mut env: BTreeMap<String, String> = BASE_ENV
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    env.extend(cfg.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(task_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    // AX_ names are refused in both task and configuration env, so these are never set
    // twice; inserting last makes sure of it.
    env.insert("AX_EXECUTION_ID".into(), exec.execution_id.to_string());
    env.insert("AX_TASK".into(), exec.task_id.to_string());
    env.insert("AX_NAMESPACE".into(), exec.namespace.to_string());
    env.insert("AX_ATTEMPT".into(), exec.attempt_number().to_string());
    env.insert("AX_FIRE_AT".into(), exec.fire_at.to_string());
    env.insert("AX_PAYLOAD".into(), exec.payload.to_string());
    // A step of a dependency chain, a piece of a fanned-out fire: where it stands.
    if let Some(run) = &exec.lineage.run_id {
        env.insert("AX_RUN_ID".into(), run.to_string());
    }
    if let (Some(index), Some(total)) = (exec.lineage.piece_index, exec.lineage.piece_total) {
        env.insert("AX_SHARD_INDEX".into(), index.to_string());
        env.insert("AX_SHARD_TOTAL".into(), total.to_string());
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec() -> ExecutionMessage {
        let spec = ax_scheduler_core::TaskSpec::from_json(
            br#"{"handler":"command","schedule":{"every":"1m"},"payload":{"day":"mon"},
            "command":{"name":"backup","env":{"TARGET":"t","LANG":"de_DE.UTF-8"}}}"#,
            "ns",
            "nightly",
        )
        .unwrap();
        ExecutionMessage::for_fire(
            &spec,
            ax_scheduler_core::UtcMillis(1_767_225_600_000),
            ax_scheduler_core::UtcMillis(1_767_225_600_000),
            1,
        )
    }

    #[test]
    fn layers_override_in_order_and_ax_variables_come_last() {
        let exec = exec();
        let task_env = exec.command.as_ref().unwrap().env.clone();
        let cfg = CommandConfig {
            env: [("HOME".to_owned(), "/var/lib/backup".to_owned())].into(),
            allow_env: vec!["TARGET".into(), "LANG".into()],
            ..CommandConfig::new("/usr/local/bin/backup")
        };
        let env = build(&cfg, &exec, &task_env).unwrap();
        assert_eq!(env["PATH"], "/usr/local/bin:/usr/bin:/bin");
        assert_eq!(env["HOME"], "/var/lib/backup");
        assert_eq!(env["LANG"], "de_DE.UTF-8");
        assert_eq!(env["TARGET"], "t");
        assert_eq!(env["AX_EXECUTION_ID"], exec.execution_id.to_string());
        assert_eq!(env["AX_TASK"], "nightly");
        assert_eq!(env["AX_NAMESPACE"], "ns");
        assert_eq!(env["AX_ATTEMPT"], "1");
        assert_eq!(env["AX_FIRE_AT"], "2026-01-01T00:00:00.000Z");
        assert_eq!(env["AX_PAYLOAD"], r#"{"day":"mon"}"#);
        assert_eq!(env.len(), 10, "{env:?}");
    }

    #[test]
    fn a_task_sets_only_the_names_its_command_allows() {
        let exec = exec();
        let task_env = exec.command.as_ref().unwrap().env.clone();
        let cfg = CommandConfig {
            allow_env: vec!["TARGET".into()],
            ..CommandConfig::new("/usr/local/bin/backup")
        };
        assert_eq!(build(&cfg, &exec, &task_env).unwrap_err(), ["LANG"]);
        let none = CommandConfig::new("/usr/local/bin/backup");
        assert_eq!(
            build(&none, &exec, &task_env).unwrap_err(),
            ["LANG", "TARGET"]
        );
        assert!(build(&none, &exec, &BTreeMap::new()).is_ok());
    }
}
