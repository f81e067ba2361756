//! The one configuration of an `ax` process, and how it is assembled.
//!
//! Four layers, each overriding the one before: built-in defaults ([`Default`]), the TOML file,
//! `AX_*` environment variables, command-line flags. The layers are applied by plain functions
//! over plain values ([`Config::from_toml_str`], [`Config::apply_env`],
//! [`Config::apply_overrides`]) so that tests pass a `HashMap` instead of touching the process
//! environment; only `main` reads the real environment and the host name.
//!
//! Every struct denies unknown keys: a misspelt key in the file is an error naming it, never a
//! silently ignored setting. Validation ([`Config::validate`]) reports every problem at once,
//! each prefixed with the key it concerns. Secrets are masked by [`Config::masked`] before the
//! configuration is shown anywhere. Every secret may be read from a file instead
//! (`secret_files`), which keeps it out of the process's environment.

mod defaults;
mod env;
mod load;
mod mask;
pub mod origin;
mod secret_files;
mod sections;
mod validate;

use std::path::PathBuf;

use ax_control::ClusterConfig;
use serde::{Deserialize, Serialize};

pub use ax_control::config::DEFAULT_ETCD_QUOTA_BYTES;
pub use env::ENV_VARS;
pub use load::{config_file_path, ConfigOverrides, LoadOptions};
pub use secret_files::SECRET_FILE_KEYS;
pub use sections::{
    AlertLevel, Alerts, Audit, EgressAllow, Election, Etcd, Http, Instance, Limits, QueueLimit,
    Redis, ReplicaRole, Scheduler, SecretDestination, TokenEntry, Worker,
};

/// Where the server looks for its file when neither `--config` nor `AX_CONFIG` names one.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/ax/ax.toml";

/// Environment variable naming the config file (below `--config`).
pub const CONFIG_ENV_VAR: &str = "AX_CONFIG";

/// What replaces a secret in shown configuration.
pub use ax_scheduler_core::redact::MASK;

/// Why a configuration could not be assembled. Every variant is a usage error (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this configuration (syntax, unknown key, bad value).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file (`<string>` when parsed from memory).
        path: PathBuf,
        /// The parser's message, which names the key and line.
        message: String,
    },
    /// A `*_file` setting names a file that cannot be read.
    #[error("{key}: cannot read {path}: {source}")]
    SecretFile {
        /// The setting (`http.api_token_file`).
        key: String,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// An `AX_*` variable holds a value that cannot be used.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong with its value.
        message: String,
    },
    /// The assembled configuration breaks one or more rules; one entry per problem, each
    /// starting with the key it concerns.
    #[error("invalid configuration:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

/// The effective configuration of an `ax` process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The etcd cluster holding tasks, state, instances and the election.
    pub etcd: Etcd,
    /// The Redis server holding the execution queues.
    pub redis: Redis,
    /// This replica's identity and roles.
    pub instance: Instance,
    /// Leader election.
    pub election: Election,
    /// The scheduling loop (leader only).
    pub scheduler: Scheduler,
    /// The worker pool.
    pub worker: Worker,
    /// The HTTP server (metrics, probes, API).
    pub http: Http,
    /// Alert channels.
    pub alerts: Alerts,
    /// Limits on what callers may send.
    pub limits: Limits,
    /// The audit log of changes.
    pub audit: Audit,
}

impl Config {
    /// The configuration as TOML, secrets masked: what `ax config print` shows.
    pub fn to_masked_toml(&self) -> String {
        // Serializing plain structs of strings, numbers and lists cannot fail; should a
        // future field make it fail, say so rather than print a partial config.
        toml::to_string_pretty(&self.masked())
            .unwrap_or_else(|e| format!("# cannot render the configuration: {e}\n"))
    }

    /// The part every operation on the cluster needs, as [`ax_control`] takes it: the
    /// cluster's sections of this file with the settings of `[scheduler]` and `[worker]` the
    /// operations read.
    pub fn cluster(&self) -> ClusterConfig {
        ClusterConfig {
            etcd: self.etcd.clone(),
            redis: self.redis.clone(),
            election: self.election.clone(),
            audit: self.audit.clone(),
            limits: self.limits.clone(),
            queue_limits: self.worker.queue_limits.clone(),
            shards: self.scheduler.shards,
            max_clock_skew: self.scheduler.max_clock_skew,
            worker_queues: self.worker.queues.clone(),
            commands: self.worker.commands_config(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn printed_toml_parses_back_to_the_same_config() {
        let mut c = Config::default();
        c.instance.id = "ax-0".into();
        c.scheduler.catch_up_window = Duration::from_millis(90_500);
        let back = Config::from_toml_str(&c.to_masked_toml()).unwrap();
        assert_eq!(back, c);
    }
}
