//! Where a cluster is and how it is operated: [`ClusterConfig`], the part of a replica's
//! configuration that every program operating the cluster shares.
//!
//! The sections are the ones of `ax.toml` ([`Etcd`], [`Redis`], [`Election`], [`Audit`],
//! [`Limits`], [`QueueLimit`]); the replica's configuration embeds the same types and hands
//! its operations a [`ClusterConfig`] built from them, and a client outside the cluster reads
//! them from the replicas' own file ([`ClusterConfig::from_ax_toml`]) or builds them in code.
//! Nothing here reads the environment: the binary layers `AX_*` variables over the file.

pub mod checks;
mod sections;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ax_queue::QueueConfig;
use serde::Deserialize;

pub use sections::{Audit, Election, Etcd, Limits, QueueLimit, Redis, DEFAULT_ETCD_QUOTA_BYTES};

use crate::error::ControlError;

/// Everything the operations on a cluster need to know of it: where etcd and Redis are (with
/// their TLS material and prefixes), the settings every process must share, and the bounds of
/// the operations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterConfig {
    /// `[etcd]`: the cluster holding tasks, states, instances and the audit log.
    pub etcd: Etcd,
    /// `[redis]`: the server (or Redis Cluster) holding the queues.
    pub redis: Redis,
    /// `[election]`: the lease every instance record and leader key lives on.
    pub election: Election,
    /// `[audit]`: how long and how many audit records are kept.
    pub audit: Audit,
    /// `[limits]`: bounds on what a caller may ask.
    pub limits: Limits,
    /// `worker.queue_limits`: limits per queue, enforced in Redis by every process.
    pub queue_limits: Vec<QueueLimit>,
    /// `scheduler.shards`: how many shards the status expects owned (at least 1).
    pub shards: u32,
    /// `scheduler.max_clock_skew`: the skew against etcd past which a replica does not lead.
    pub max_clock_skew: Duration,
    /// `worker.queues`: the queues this process serves, shown by the status.
    pub worker_queues: Vec<String>,
    /// `worker.commands`: the rules a task's command arguments are checked against when it
    /// is written; a command not named here is left to the replicas that run it.
    pub commands: ax_worker::CommandsConfig,
}

impl ClusterConfig {
    /// The cluster as the replicas' `ax.toml` at `path` describes it. Sections a client has
    /// no use for (`[http]`, `[alerts]`, most of `[worker]` and `[scheduler]`) are skipped;
    /// the cluster's sections are read as a replica reads them, unknown keys refused, and the
    /// secret files they name (`etcd.password_file`, `redis.url_file`,
    /// `redis.password_file`) are read now.
    pub fn from_ax_toml(path: impl AsRef<Path>) -> Result<ClusterConfig, ControlError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ControlError::Config(format!("cannot read config file {}: {e}", path.display()))
        })?;
        let mut config = ClusterConfig::from_toml_str(&text)
            .map_err(|e| ControlError::Config(format!("config file {}: {e}", path.display())))?;
        config.read_secret_files()?;
        config
            .validate()
            .map_err(|e| ControlError::Config(format!("config file {}: {e}", path.display())))?;
        Ok(config)
    }

    /// Checks the cluster's sections by the rules a replica checks them by
    /// ([`checks`]), reporting every broken rule, one per line, each starting with its key.
    pub fn validate(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        let mut err = |key: &str, msg: String| errors.push(format!("{key}: {msg}"));
        checks::check_etcd(&self.etcd, &mut err);
        checks::check_redis(&self.redis, &mut err);
        checks::check_election(&self.election, &mut err);
        checks::check_audit(&self.audit, &mut err);
        checks::check_limits(&self.limits, &mut err);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }

    /// The cluster's sections of an `ax.toml` text; the error is the parser's message.
    pub fn from_toml_str(text: &str) -> Result<ClusterConfig, String> {
        let file: AxToml = toml::from_str(text).map_err(|e| e.to_string())?;
        Ok(ClusterConfig {
            etcd: file.etcd,
            redis: file.redis,
            election: file.election,
            audit: file.audit,
            limits: file.limits,
            queue_limits: file.worker.queue_limits,
            shards: file.scheduler.shards,
            max_clock_skew: file.scheduler.max_clock_skew,
            worker_queues: file.worker.queues,
            commands: ax_worker::CommandsConfig {
                commands: file.worker.commands,
                allow_root: file.worker.commands_allow_root,
            },
        })
    }

    /// Reads the secrets of the cluster's sections from the files that name them.
    fn read_secret_files(&mut self) -> Result<(), ControlError> {
        read_secret_files(cluster_secret_files(&mut self.etcd, &mut self.redis))
            .map_err(|e| ControlError::Config(e.to_string()))
    }

    /// The queue client's settings: the key prefix, history and dead-letter bounds, queue
    /// limits and partitions, as every process of the cluster must have them.
    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            prefix: self.redis.key_prefix.clone(),
            history_cap: self.redis.history_cap,
            history_retention: self.redis.history_retention,
            execution_history_retention: self.redis.execution_history_retention,
            execution_history_max_entries: self.redis.execution_history_max_entries,
            dlq_retention: self.redis.dlq_retention,
            dlq_max_entries: self.redis.dlq_max_entries,
            replica_acks: self.redis.replica_acks,
            limits: self
                .queue_limits
                .iter()
                .map(|l| {
                    let limits = ax_queue::QueueLimits {
                        max_running: l.max_running,
                        rate: l.rate,
                    };
                    (l.queue.clone(), limits)
                })
                .collect(),
            partitions: self.redis.queue_partitions.clone(),
            ..QueueConfig::default()
        }
    }
}

impl Redis {
    /// The URL to connect with: `url` with `password` put in when one is set.
    pub fn connection_url(&self) -> String {
        with_url_password(&self.url, &self.password)
    }

    /// The Redis Cluster node URLs to connect with (`cluster_nodes`, each with `password` put
    /// in when one is set); empty for a single server.
    pub fn cluster_urls(&self) -> Vec<String> {
        self.cluster_nodes
            .iter()
            .map(|url| with_url_password(url, &self.password))
            .collect()
    }

    /// The URLs in use (`cluster_nodes` when set, else `url`): what TLS settings and messages
    /// are about.
    pub fn urls(&self) -> Vec<&str> {
        if self.cluster_nodes.is_empty() {
            vec![self.url.as_str()]
        } else {
            self.cluster_nodes.iter().map(String::as_str).collect()
        }
    }
}

/// `url` with its password set to `password` (percent-encoded by the parser, so any password
/// survives in the user info; the Redis client decodes it); `url` unchanged when `password`
/// is empty or `url` takes no password.
pub fn with_url_password(url: &str, password: &str) -> String {
    if password.is_empty() {
        return url.to_owned();
    }
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return url.to_owned();
    };
    match parsed.set_password(Some(password)) {
        Ok(()) => parsed.into(),
        Err(()) => url.to_owned(),
    }
}

/// The secrets of the cluster's sections with a file twin: (the file key, the secret's key).
pub const CLUSTER_SECRET_FILE_KEYS: [(&str, &str); 3] = [
    ("etcd.password_file", "etcd.password"),
    ("redis.url_file", "redis.url"),
    ("redis.password_file", "redis.password"),
];

/// The secrets of `etcd` and `redis` with their file twins, in [`CLUSTER_SECRET_FILE_KEYS`]'s
/// order: what a replica and a client both read.
pub fn cluster_secret_files<'a>(etcd: &'a mut Etcd, redis: &'a mut Redis) -> [SecretFile<'a>; 3] {
    let [etcd_password, redis_url, redis_password] = CLUSTER_SECRET_FILE_KEYS;
    [
        SecretFile::new(etcd_password, &mut etcd.password_file, &mut etcd.password),
        // `redis.url` has a default, which its file replaces rather than conflicts with.
        SecretFile::new(redis_url, &mut redis.url_file, &mut redis.url)
            .with_default(Redis::default().url),
        SecretFile::new(
            redis_password,
            &mut redis.password_file,
            &mut redis.password,
        ),
    ]
}

/// A secret setting with a `*_file` twin naming a file that holds it.
pub struct SecretFile<'a> {
    file_key: &'static str,
    key: &'static str,
    file: &'a mut String,
    value: &'a mut String,
    default: Option<String>,
}

impl<'a> SecretFile<'a> {
    /// The setting named by `keys` (its file key, its own key), its path in `file` and its
    /// value in `value`.
    pub fn new(
        (file_key, key): (&'static str, &'static str),
        file: &'a mut String,
        value: &'a mut String,
    ) -> Self {
        SecretFile {
            file_key,
            key,
            file,
            value,
            default: None,
        }
    }

    /// The setting has a default, which its file replaces rather than conflicts with.
    pub fn with_default(mut self, default: String) -> Self {
        self.default = Some(default);
        self
    }
}

/// Why a secret file could not give its setting a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// The file could not be read.
    #[error("{key}: cannot read {path}: {source}")]
    Unreadable {
        /// The `*_file` setting.
        key: String,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file and the setting are both given, or the file is empty.
    #[error("{0}")]
    Invalid(String),
}

/// Reads every secret a `*_file` setting names into its setting, white space around it
/// dropped (Secrets and editors add a trailing newline). Setting both a secret and its file
/// is refused rather than one silently winning.
pub fn read_secret_files<'a>(
    secrets: impl IntoIterator<Item = SecretFile<'a>>,
) -> Result<(), SecretFileError> {
    for secret in secrets {
        if secret.file.is_empty() {
            continue;
        }
        let (file_key, key) = (secret.file_key, secret.key);
        let has_default = secret.default.as_deref() == Some(secret.value.as_str());
        if !secret.value.is_empty() && !has_default {
            return Err(SecretFileError::Invalid(format!(
                "{file_key}: is set together with {key}; set one of them"
            )));
        }
        let path = PathBuf::from(secret.file.as_str());
        let text =
            std::fs::read_to_string(&path).map_err(|source| SecretFileError::Unreadable {
                key: file_key.to_owned(),
                path: path.clone(),
                source,
            })?;
        let text = text.trim();
        if text.is_empty() {
            return Err(SecretFileError::Invalid(format!(
                "{file_key}: {} is empty",
                path.display()
            )));
        }
        *secret.value = text.to_owned();
    }
    Ok(())
}

/// The sections of `ax.toml` a [`ClusterConfig`] is made of; any other section or key outside
/// them is the replica's business and is skipped.
#[derive(Default, Deserialize)]
#[serde(default)]
struct AxToml {
    etcd: Etcd,
    redis: Redis,
    election: Election,
    audit: Audit,
    limits: Limits,
    scheduler: SchedulerPart,
    worker: WorkerPart,
}

#[derive(Deserialize)]
#[serde(default)]
struct SchedulerPart {
    shards: u32,
    #[serde(with = "ax_scheduler_core::duration_serde")]
    max_clock_skew: Duration,
}

impl Default for SchedulerPart {
    fn default() -> Self {
        SchedulerPart {
            shards: 1,
            max_clock_skew: ax_scheduler_core::time::DEFAULT_MAX_CLOCK_SKEW,
        }
    }
}

#[derive(Deserialize)]
#[serde(default)]
struct WorkerPart {
    queues: Vec<String>,
    queue_limits: Vec<QueueLimit>,
    commands: BTreeMap<String, ax_worker::CommandConfig>,
    commands_allow_root: bool,
}

impl Default for WorkerPart {
    fn default() -> Self {
        WorkerPart {
            queues: vec![ax_scheduler_core::task::DEFAULT_QUEUE.to_owned()],
            queue_limits: Vec::new(),
            commands: BTreeMap::new(),
            commands_allow_root: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_goes_into_the_url_encoded() {
        assert_eq!(
            with_url_password("redis://host:6379/0", "p@ss/w:rd"),
            "redis://:p%40ss%2Fw%3Ard@host:6379/0"
        );
        assert_eq!(
            with_url_password("rediss://user:old@host/1", "new"),
            "rediss://user:new@host/1"
        );
        assert_eq!(
            with_url_password("redis://:old@h/0", ""),
            "redis://:old@h/0"
        );
    }

    #[test]
    fn a_replicas_file_gives_the_cluster_and_skips_the_rest() {
        let c = ClusterConfig::from_toml_str(
            "[instance]\nid = \"r1\"\n[http]\nlisten = \"0.0.0.0:1\"\n\
             [etcd]\nprefix = \"/x\"\n[redis]\nkey_prefix = \"k\"\n\
             [scheduler]\nshards = 4\ntick = \"5ms\"\n\
             [worker]\nqueues = [\"a\"]\nconcurrency = 3\n\
             queue_limits = [{queue = \"a\", rate = 2.5}]",
        )
        .unwrap();
        assert_eq!(c.etcd.prefix, "/x");
        assert_eq!(c.redis.key_prefix, "k");
        assert_eq!(c.shards, 4);
        assert_eq!(c.worker_queues, ["a"]);
        assert_eq!(c.queue_config().limits["a"].rate, 2.5);
        // The cluster's own sections refuse a misspelt key, as a replica does.
        let e = ClusterConfig::from_toml_str("[etcd]\nprefx = \"/x\"").unwrap_err();
        assert!(e.contains("prefx"), "{e}");
    }

    #[test]
    fn defaults_are_the_replicas() {
        let c = ClusterConfig::from_toml_str("").unwrap();
        assert_eq!(c.shards, 1);
        assert_eq!(c.max_clock_skew, Duration::from_secs(2));
        assert_eq!(c.worker_queues, ["default"]);
        assert_eq!(c.etcd, Etcd::default());
        assert_eq!(c.redis, Redis::default());
    }

    #[test]
    fn secret_files_are_read_and_conflicts_refused() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let file = dir.path().join("ax.toml");
        std::fs::write(
            &file,
            format!("[redis]\npassword_file = \"{}\"", pw.display()),
        )
        .unwrap();
        let c = ClusterConfig::from_ax_toml(&file).unwrap();
        assert_eq!(c.redis.password, "s3cret");
        assert!(c.redis.connection_url().contains(":s3cret@"));
        std::fs::write(
            &file,
            format!(
                "[etcd]\npassword = \"a\"\npassword_file = \"{}\"",
                pw.display()
            ),
        )
        .unwrap();
        let e = ClusterConfig::from_ax_toml(&file).unwrap_err().to_string();
        assert!(
            e.contains("etcd.password_file: is set together with etcd.password"),
            "{e}"
        );
    }
}
