//! Configuration assembly end to end: file, environment map and flags in their order of
//! precedence, and the errors a user sees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use ax::config::{Config, ConfigError, ConfigOverrides, LoadOptions, ReplicaRole};

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn load(
    file: Option<&Path>,
    env: &HashMap<String, String>,
    overrides: &ConfigOverrides,
) -> Result<Config, ConfigError> {
    Config::load(LoadOptions {
        config_flag: file,
        env,
        overrides,
        default_path: None,
        hostname: Some("host-7"),
    })
}

fn write(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("ax.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn flags_beat_env_beat_file_beat_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        &dir,
        r#"
[etcd]
endpoints = ["http://file:2379"]
prefix = "/from-file"

[redis]
url = "redis://file:6379/0"

[election]
lease_ttl = "20s"

[http]
listen = "127.0.0.1:9000"
"#,
    );
    let e = env(&[
        ("AX_ETCD_ENDPOINTS", "http://env-a:2379,http://env-b:2379"),
        ("AX_REDIS_URL", "rediss://env:6380/1"),
        ("AX_LEASE_TTL", "15s"),
    ]);
    let flags = ConfigOverrides {
        redis_url: Some("redis://flag:6379/2".into()),
        ..ConfigOverrides::default()
    };
    let c = load(Some(&file), &e, &flags).unwrap();
    assert_eq!(c.etcd.prefix, "/from-file"); // file only
    assert_eq!(c.etcd.endpoints, ["http://env-a:2379", "http://env-b:2379"]); // env over file
    assert_eq!(c.redis.url, "redis://flag:6379/2"); // flag over env and file
    assert_eq!(c.election.lease_ttl, Duration::from_secs(15));
    assert_eq!(c.http.listen, "127.0.0.1:9000");
    assert_eq!(c.scheduler.tick, Duration::from_millis(10)); // default
    assert_eq!(c.instance.id, "host-7"); // host name when unset
}

#[test]
fn the_config_file_can_come_from_ax_config() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        &dir,
        "[instance]\nid = \"from-file\"\nroles = [\"worker\"]\n",
    );
    let e = env(&[("AX_CONFIG", file.to_str().unwrap())]);
    let c = load(None, &e, &ConfigOverrides::default()).unwrap();
    assert_eq!(c.instance.id, "from-file");
    assert_eq!(c.instance.roles, [ReplicaRole::Worker]);
}

#[test]
fn a_missing_named_file_is_an_error() {
    let err = load(
        Some(Path::new("/nonexistent/ax.toml")),
        &env(&[]),
        &ConfigOverrides::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/ax.toml"), "{err}");
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key) in [
        ("[etcd]\nendpoint = [\"http://a:2379\"]\n", "endpoint"),
        ("[scheduler]\nticks = \"5ms\"\n", "ticks"),
        ("[metrics]\nport = 9090\n", "metrics"),
    ] {
        let file = write(&dir, text);
        let err = load(Some(&file), &env(&[]), &ConfigOverrides::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("unknown field `{key}`")),
            "{key}: {err}"
        );
    }
}

#[test]
fn bad_values_in_the_file_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    for (text, needle) in [
        (
            "[election]\nlease_ttl = \"ten seconds\"\n",
            "not a duration",
        ),
        (
            "[instance]\nroles = [\"leader\"]\n",
            "unknown variant `leader`",
        ),
        ("[alerts]\nmin_level = \"loud\"\n", "unknown variant `loud`"),
        ("[worker]\nconcurrency = \"many\"\n", "invalid type"),
    ] {
        let file = write(&dir, text);
        let err = load(Some(&file), &env(&[]), &ConfigOverrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
}

#[test]
fn validation_runs_after_every_layer() {
    let dir = tempfile::tempdir().unwrap();
    // Invalid in the file, corrected by a flag: no error.
    let file = write(&dir, "[redis]\nurl = \"http://wrong:6379\"\n");
    let flags = ConfigOverrides {
        redis_url: Some("redis://right:6379/0".into()),
        ..ConfigOverrides::default()
    };
    load(Some(&file), &env(&[]), &flags).unwrap();

    // Valid in the file, broken by the environment: the error names the key.
    let e = env(&[("AX_REDIS_URL", "memcached://x:11211")]);
    match load(None, &e, &ConfigOverrides::default()).unwrap_err() {
        ConfigError::Invalid(errors) => {
            assert!(
                errors.iter().any(|l| l.starts_with("redis.url:")),
                "{errors:?}"
            )
        }
        other => panic!("{other}"),
    }

    let flags = ConfigOverrides {
        etcd_endpoints: Some(vec![]),
        ..ConfigOverrides::default()
    };
    let err = load(None, &env(&[]), &flags).unwrap_err().to_string();
    assert!(
        err.contains("etcd.endpoints: must list at least one endpoint"),
        "{err}"
    );
}

#[test]
fn no_host_name_and_no_id_is_an_error() {
    let err = Config::load(LoadOptions {
        config_flag: None,
        env: &env(&[]),
        overrides: &ConfigOverrides::default(),
        default_path: None,
        hostname: None,
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("instance.id"), "{err}");
    let c = load(
        None,
        &env(&[("AX_INSTANCE_ID", "ax-2")]),
        &ConfigOverrides::default(),
    )
    .unwrap();
    assert_eq!(c.instance.id, "ax-2");
}

#[test]
fn redis_password_replaces_the_url_password() {
    let e = env(&[
        ("AX_REDIS_URL", "rediss://:0ld-pw@redis:6380/0"),
        ("AX_REDIS_PASSWORD", "n3w"),
    ]);
    let c = load(None, &e, &ConfigOverrides::default()).unwrap();
    assert_eq!(c.redis.connection_url(), "rediss://:n3w@redis:6380/0");
    let shown = c.to_masked_toml();
    assert!(
        !shown.contains("0ld-pw") && !shown.contains("n3w"),
        "{shown}"
    );
}

#[test]
fn the_api_token_is_trimmed_and_must_be_long_enough() {
    let token = "ax_0123456789abcdef0123456789abcdef";
    // A Secret's trailing newline, in the environment or the file, is not part of the token.
    let c = load(
        None,
        &env(&[("AX_API_TOKEN", &format!("{token}\n"))]),
        &ConfigOverrides::default(),
    )
    .unwrap();
    assert_eq!(c.http.api_token, token);
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, &format!("[http]\napi_token = \"  {token}\\n\"\n"));
    let c = load(Some(&file), &env(&[]), &ConfigOverrides::default()).unwrap();
    assert_eq!(c.http.api_token, token);
    // Short ones are refused, naming the key.
    let e = load(
        None,
        &env(&[("AX_API_TOKEN", "hunter2")]),
        &ConfigOverrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("http.api_token") && e.contains("at least 32"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "the token is in the error: {e}");
}

#[test]
fn allowed_origins_and_hosts_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        &dir,
        r#"
[http]
allowed_origins = ["https://good.example.com", "https://ops.example.com/ui", "console.example.com"]
allowed_hosts = ["ax.tunnel.example", "localhost:8080", "a b"]
header_read_timeout = "0s"
"#,
    );
    let e = load(Some(&file), &env(&[]), &ConfigOverrides::default())
        .unwrap_err()
        .to_string();
    for needle in [
        "http.allowed_origins: `https://ops.example.com/ui`",
        "http.allowed_origins: `console.example.com`",
        "http.allowed_hosts: `a b`",
        "http.header_read_timeout",
    ] {
        assert!(e.contains(needle), "{needle} not in {e}");
    }
    assert!(!e.contains("good.example.com"), "{e}");
    assert!(!e.contains("ax.tunnel.example"), "{e}");
    let c = Config::default();
    assert_eq!(c.http.header_read_timeout, Duration::from_secs(10));
    assert!(c.http.allowed_origins.is_empty() && c.http.allowed_hosts.is_empty());
}

#[test]
fn queue_partitions_are_read_checked_and_given_to_the_queue_client() {
    let c = Config::from_toml_str(
        "[instance]\nid = \"r1\"\n[redis]\nqueue_partitions = { hot = 4, warm = 1 }",
    )
    .unwrap();
    c.validate().unwrap();
    let q = c.cluster().queue_config();
    assert_eq!(q.partitions["hot"], 4);
    assert_eq!(q.partitions["warm"], 1);
    assert!(Config::default().redis.queue_partitions.is_empty());
    let bad = Config::from_toml_str(
        "[instance]\nid = \"r1\"\n[redis]\nqueue_partitions = { hot = 0, cold = 257, \"a#p1\" = 2 }\n\
         [worker]\nqueues = [\"default\", \"b#p0\"]",
    )
    .unwrap();
    let e = bad.validate().unwrap_err().to_string();
    assert!(
        e.contains("redis.queue_partitions: queue `hot` has 0 partitions; 1 to 256"),
        "{e}"
    );
    assert!(e.contains("queue `cold` has 257 partitions"), "{e}");
    assert!(
        e.contains("redis.queue_partitions: queue `a#p1` contains `#`"),
        "{e}"
    );
    assert!(
        e.contains("worker.queues: queue `b#p0` contains `#`"),
        "{e}"
    );
}

#[test]
fn queue_limits_are_read_checked_and_given_to_the_queue_client() {
    let c = Config::from_toml_str(
        "[instance]\nid = \"r1\"\n[worker]\nqueue_limits = [{queue = \"reports\", max_running = 4, rate = 2.5}, \
         {queue = \"mail\", rate = 10}]",
    )
    .unwrap();
    c.validate().unwrap();
    let q = c.cluster().queue_config();
    assert_eq!(q.limits["reports"].max_running, 4);
    assert_eq!(q.limits["reports"].rate, 2.5);
    assert_eq!(q.limits["mail"].max_running, 0);
    let bad = Config::from_toml_str(
        "[instance]\nid = \"r1\"\n[worker]\nqueue_limits = [{queue = \"a\", rate = -1}, {queue = \"a\"}, \
         {queue = \"b c\"}]",
    )
    .unwrap();
    let e = bad.validate().unwrap_err().to_string();
    assert!(
        e.contains("worker.queue_limits[0]: rate -1 must be a number of at least 0"),
        "{e}"
    );
    assert!(
        e.contains("worker.queue_limits[1]: queue `a` has limits twice"),
        "{e}"
    );
    assert!(
        e.contains("worker.queue_limits[2]: queue `b c` is not a queue name"),
        "{e}"
    );
    assert!(Config::from_toml_str("[worker]\nqueue_limits = [{queue = \"a\", max = 1}]").is_err());
}

/// A client reads the cluster's part of a replica's file ([`ax_control::ClusterConfig`]) with
/// its own parser, which skips the replica's sections: it must find what the replica finds,
/// defaults included.
#[test]
fn a_client_reads_the_cluster_of_a_file_as_the_replica_does() {
    let doc = include_str!("../../docs/configuration.md");
    let start = doc.find("```toml\n").expect("a toml block in the docs") + 8;
    let len = doc[start..].find("```").expect("the block ends");
    let changed = "[etcd]\nprefix = \"/x\"\ntimeout = \"2s\"\n\
                   [redis]\nkey_prefix = \"k\"\nqueue_partitions = { hot = 4 }\n\
                   [audit]\nmax_records = 7\n[limits]\nmax_list_scan = 9\n\
                   [scheduler]\nshards = 4\nmax_clock_skew = \"3s\"\ntick = \"5ms\"\n\
                   [worker]\nqueues = [\"a\", \"b\"]\ncommands_allow_root = true\n\
                   queue_limits = [{queue = \"a\", rate = 2.5}]\n\
                   [http]\nlisten = \"127.0.0.1:1\"\n";
    for text in ["", &doc[start..start + len], changed] {
        let replica = Config::from_toml_str(text).unwrap().cluster();
        let client = ax_control::ClusterConfig::from_toml_str(text).unwrap();
        assert_eq!(client, replica, "{text}");
    }
}

#[test]
fn a_client_refuses_the_cluster_sections_a_replica_refuses_with_the_same_words() {
    let bad = "[etcd]\nprefix = \"x/\"\nendpoints = []\n\
               [redis]\nurl = \"http://r\"\nkey_prefix = \" \"\n\
               [election]\nlease_ttl = \"1s\"\n\
               [audit]\nmax_records = 0\n[limits]\nreads_per_minute = 0\n";
    let replica = match Config::from_toml_str(bad).unwrap().validate() {
        Err(ax::config::ConfigError::Invalid(lines)) => lines,
        other => panic!("the replica took it: {other:?}"),
    };
    let client: Vec<String> = ax_control::ClusterConfig::from_toml_str(bad)
        .unwrap()
        .validate()
        .unwrap_err()
        .lines()
        .map(str::to_owned)
        .collect();
    for key in [
        "etcd.endpoints",
        "etcd.prefix",
        "redis.url",
        "redis.key_prefix",
        "election.lease_ttl",
        "audit.max_records",
        "limits.reads_per_minute",
    ] {
        let of = |lines: &[String]| lines.iter().find(|l| l.starts_with(key)).cloned();
        assert!(
            of(&client).is_some(),
            "{key} not refused by the client: {client:#?}"
        );
        assert_eq!(of(&client), of(&replica), "{key}");
    }
    ax_control::ClusterConfig::from_toml_str("")
        .unwrap()
        .validate()
        .unwrap();
}

#[test]
fn the_routine_state_delay_is_read_bounded_and_may_be_zero() {
    let read = |value: &str| {
        Config::from_toml_str(&format!(
            "[instance]\nid = \"r1\"\n[scheduler]\nroutine_state_delay = \"{value}\""
        ))
        .unwrap()
    };
    assert_eq!(
        Config::default().scheduler.routine_state_delay,
        Duration::from_secs(10)
    );
    let zero = read("0s");
    zero.validate().unwrap();
    assert_eq!(zero.scheduler.routine_state_delay, Duration::ZERO);
    read("30s").validate().unwrap();
    let e = read("31s").validate().unwrap_err().to_string();
    assert!(
        e.contains("scheduler.routine_state_delay: 31s is longer than 30s"),
        "{e}"
    );
}
