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
//! configuration is shown anywhere.

mod env;
mod mask;
mod validate;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use env::ENV_VARS;

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

/// `[etcd]`: connection to the etcd cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Etcd {
    /// Client URLs (`http://host:2379`, `https://...`); default `["http://127.0.0.1:2379"]`.
    pub endpoints: Vec<String>,
    /// Key prefix under which ax keeps everything; default `/scheduler`.
    pub prefix: String,
    /// User name for etcd authentication; empty for none.
    pub username: String,
    /// Password for etcd authentication (secret).
    pub password: String,
    /// CA bundle; when set, connections use TLS.
    pub ca_file: String,
    /// Client certificate for mutual TLS (with `key_file`).
    pub cert_file: String,
    /// Client key for mutual TLS (with `cert_file`).
    pub key_file: String,
    /// Timeout of every etcd request; default 5 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub timeout: Duration,
    /// etcd's `--quota-backend-bytes`, for the database-size gauge, alert and `ax status`
    /// (etcd 3.6 and later report it themselves, and that wins); default 2 GiB, etcd's own
    /// default.
    pub quota_backend_bytes: u64,
}

/// etcd's default database quota (`--quota-backend-bytes`).
pub const DEFAULT_ETCD_QUOTA_BYTES: u64 = 2 * 1024 * 1024 * 1024;

impl Default for Etcd {
    fn default() -> Self {
        Etcd {
            endpoints: vec!["http://127.0.0.1:2379".to_owned()],
            prefix: "/scheduler".to_owned(),
            username: String::new(),
            password: String::new(),
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            timeout: Duration::from_secs(5),
            quota_backend_bytes: DEFAULT_ETCD_QUOTA_BYTES,
        }
    }
}

/// `[redis]`: connection to Redis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Redis {
    /// `redis://` or `rediss://` (TLS) URL; default `redis://127.0.0.1:6379/0`. Not used
    /// when `cluster_nodes` is set.
    pub url: String,
    /// `redis://` or `rediss://` URLs of some nodes of a Redis Cluster (one reachable node is
    /// enough to find the rest); when set, ax uses the cluster instead of `url`. Default
    /// empty.
    pub cluster_nodes: Vec<String>,
    /// Replicas that must have each enqueue and settle before it counts as done (`WAIT`);
    /// 0 (the default) does not wait.
    pub replica_acks: u32,
    /// Password (secret); when set it replaces any password in `url`.
    pub password: String,
    /// CA bundle that signed the server's certificate (`rediss://` only); empty: the
    /// system's root certificates.
    pub ca_file: String,
    /// Client certificate for mutual TLS (with `key_file`; `rediss://` only).
    pub cert_file: String,
    /// Client key for mutual TLS (with `cert_file`).
    pub key_file: String,
    /// Prefix of every Redis key ax writes; default `ax`.
    pub key_prefix: String,
    /// Executions kept in each task's history (`ax task history`); default 100.
    pub history_cap: usize,
    /// How long a task's execution history is kept after its last execution; default 30 d.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub history_retention: Duration,
    /// How long the execution history across tasks (`ax history`) keeps an attempt;
    /// default 7 d.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub execution_history_retention: Duration,
    /// Most attempts the execution history across tasks keeps; default 200 000.
    pub execution_history_max_entries: usize,
    /// How long a dead-letter entry is kept; default 90 d.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub dlq_retention: Duration,
    /// Most dead-letter entries kept per queue (the oldest go first); default 10 000.
    pub dlq_max_entries: usize,
    /// Partitions per queue name (`{ hot = 4 }`), 1 to 256: such a queue is that many
    /// physical queues on different Redis Cluster slots. Every replica and the CLI must
    /// have the same. Default none.
    pub queue_partitions: BTreeMap<String, u32>,
}

impl Default for Redis {
    fn default() -> Self {
        Redis {
            url: "redis://127.0.0.1:6379/0".to_owned(),
            cluster_nodes: Vec::new(),
            replica_acks: 0,
            password: String::new(),
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            key_prefix: "ax".to_owned(),
            history_cap: ax_queue::DEFAULT_HISTORY_CAP,
            history_retention: ax_queue::DEFAULT_HISTORY_RETENTION,
            execution_history_retention: ax_queue::DEFAULT_EXECUTION_HISTORY_RETENTION,
            execution_history_max_entries: ax_queue::DEFAULT_EXECUTION_HISTORY_MAX_ENTRIES,
            dlq_retention: ax_queue::DEFAULT_DLQ_RETENTION,
            dlq_max_entries: ax_queue::DEFAULT_DLQ_MAX_ENTRIES,
            queue_partitions: BTreeMap::new(),
        }
    }
}

/// What a replica does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Joins the election; the leader fires tasks.
    Scheduler,
    /// Runs executions from the queues.
    Worker,
}

impl Role {
    /// The name used in the file, the environment and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Scheduler => "scheduler",
            Role::Worker => "worker",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "scheduler" => Ok(Role::Scheduler),
            "worker" => Ok(Role::Worker),
            other => Err(format!(
                "unknown role `{other}`, expected `scheduler` or `worker`"
            )),
        }
    }
}

/// `[instance]`: this replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Instance {
    /// Unique id among replicas; empty means the host name (the pod name under Kubernetes).
    pub id: String,
    /// Roles; default both.
    pub roles: Vec<Role>,
}

impl Default for Instance {
    fn default() -> Self {
        Instance {
            id: String::new(),
            roles: vec![Role::Scheduler, Role::Worker],
        }
    }
}

impl Instance {
    /// Whether this replica has `role`.
    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

/// `[election]`: leader election on an etcd lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Election {
    /// Lease TTL: how long a dead leader keeps leadership at most; default 10 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub lease_ttl: Duration,
}

impl Default for Election {
    fn default() -> Self {
        Election {
            lease_ttl: Duration::from_secs(10),
        }
    }
}

/// `[scheduler]`: the leader's firing loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scheduler {
    /// Timer resolution; default 10 ms.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub tick: Duration,
    /// Missed fires older than this are not run (an alert is raised); default 10 min.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub catch_up_window: Duration,
    /// Clock skew against etcd beyond which a replica refuses to lead; default 2 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub max_clock_skew: Duration,
    /// How often the leader reads worker events; default 100 ms.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub events_interval: Duration,
    /// How often the leader writes changed task states to etcd; default 500 ms.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub flush_interval: Duration,
    /// How often the leader reads run-now requests; default 250 ms.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub trigger_interval: Duration,
    /// How long the leader retries enqueues Redis refuses before stepping down; default 30 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub enqueue_stall_limit: Duration,
    /// Enqueues per second at most; 0 (default) means no limit.
    pub enqueue_rate_limit: u32,
    /// Queue depth above which a backlog alert is raised; default
    /// [`ax_alerting::DEFAULT_QUEUE_BACKLOG_THRESHOLD`] (1000).
    pub backlog_alert_threshold: u64,
    /// Shards the task space is split into, each scheduled by one replica at a time; 1
    /// (default): one leader schedules everything. The same on every replica.
    pub shards: u32,
    /// What a task's shard is computed from: `task` (default) or `namespace`.
    pub placement: ax_scheduler_core::placement::PlaceBy,
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler {
            tick: ax_scheduler_core::timer::TimerConfig::default().tick,
            catch_up_window: ax_scheduler_core::misfire::DEFAULT_CATCH_UP_WINDOW,
            max_clock_skew: ax_scheduler::DEFAULT_MAX_CLOCK_SKEW,
            events_interval: ax_scheduler::DEFAULT_EVENTS_INTERVAL,
            flush_interval: ax_scheduler::DEFAULT_FLUSH_INTERVAL,
            trigger_interval: ax_scheduler::DEFAULT_TRIGGER_INTERVAL,
            enqueue_stall_limit: ax_scheduler::DEFAULT_ENQUEUE_STALL_LIMIT,
            enqueue_rate_limit: 0,
            backlog_alert_threshold: ax_alerting::DEFAULT_QUEUE_BACKLOG_THRESHOLD,
            shards: 1,
            placement: ax_scheduler_core::placement::PlaceBy::Task,
        }
    }
}

/// `[worker]`: the worker pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Worker {
    /// Executions run at once; default [`ax_worker::DEFAULT_CONCURRENCY`] (0 means the
    /// default too).
    pub concurrency: usize,
    /// Executions taken ahead of a free slot; default [`ax_worker::DEFAULT_PREFETCH`].
    pub prefetch: usize,
    /// Queues taken from; default `["default"]`.
    pub queues: Vec<String>,
    /// How long running executions may finish after a stop is asked; default 30 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub shutdown_grace: Duration,
    /// How long a worker must have stopped heartbeating before its executions go to another
    /// worker; default 30 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub visibility_timeout: Duration,
    /// Address blocks (CIDR, or one address) the `http` handler may call besides public
    /// addresses; default none.
    pub http_allow_cidrs: Vec<String>,
    /// Host names (`name`, `*.suffix`) the `http` handler may call whatever they resolve to;
    /// default none.
    pub http_allow_hosts: Vec<String>,
    /// Let the `command` handler run commands while the replica runs as root. Dangerous: a
    /// command then has every right on the machine; default false.
    pub commands_allow_root: bool,
    /// The commands the `command` handler runs, by the name tasks give
    /// (`[worker.commands.<name>]`); default none.
    pub commands: BTreeMap<String, ax_worker::CommandConfig>,
    /// Limits per queue (`[[worker.queue_limits]]`), enforced in Redis across all workers;
    /// default none. Give every replica the same.
    pub queue_limits: Vec<QueueLimit>,
}

/// `[[worker.queue_limits]]`: the limits of one queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueLimit {
    /// The queue.
    pub queue: String,
    /// Most executions of the queue running at once, across all workers; 0 (the default):
    /// no limit.
    #[serde(default)]
    pub max_running: u32,
    /// Most executions taken from the queue per second, across all workers (a token bucket
    /// holding one second's worth, at least one); 0 (the default): no limit.
    #[serde(default)]
    pub rate: f64,
}

impl Default for Worker {
    fn default() -> Self {
        Worker {
            concurrency: ax_worker::DEFAULT_CONCURRENCY,
            prefetch: ax_worker::DEFAULT_PREFETCH,
            queues: vec![ax_scheduler_core::task::DEFAULT_QUEUE.to_owned()],
            shutdown_grace: ax_worker::DEFAULT_SHUTDOWN_GRACE,
            visibility_timeout: ax_queue::DEFAULT_VISIBILITY_TIMEOUT,
            http_allow_cidrs: Vec::new(),
            http_allow_hosts: Vec::new(),
            commands_allow_root: false,
            commands: BTreeMap::new(),
            queue_limits: Vec::new(),
        }
    }
}

/// The `http` handler's allow lists, parsed.
pub type EgressAllow = (Vec<ax_worker::egress::IpNet>, Vec<ax_worker::HostPattern>);

impl Worker {
    /// `http_allow_cidrs` and `http_allow_hosts` parsed, or every entry that does not parse
    /// as `(key, problem)`.
    pub fn egress_allow(&self) -> Result<EgressAllow, Vec<(&'static str, String)>> {
        let mut errors = Vec::new();
        let mut cidrs = Vec::new();
        for text in &self.http_allow_cidrs {
            match ax_worker::egress::parse_allow_cidr(text) {
                Ok(net) => cidrs.push(net),
                Err(e) => errors.push(("worker.http_allow_cidrs", e.to_string())),
            }
        }
        let mut hosts = Vec::new();
        for text in &self.http_allow_hosts {
            match text.parse::<ax_worker::HostPattern>() {
                Ok(pattern) => hosts.push(pattern),
                Err(e) => errors.push(("worker.http_allow_hosts", e.to_string())),
            }
        }
        if errors.is_empty() {
            Ok((cidrs, hosts))
        } else {
            Err(errors)
        }
    }

    /// The `command` handler's configuration.
    pub fn commands_config(&self) -> ax_worker::CommandsConfig {
        ax_worker::CommandsConfig {
            commands: self.commands.clone(),
            allow_root: self.commands_allow_root,
        }
    }

    /// The concurrency to run with: `concurrency`, or the default for 0 (what older
    /// configurations and charts wrote for "the default").
    pub fn effective_concurrency(&self) -> usize {
        if self.concurrency == 0 {
            ax_worker::DEFAULT_CONCURRENCY
        } else {
            self.concurrency
        }
    }
}

/// One configured token: `[[http.tokens]]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// Who holds it (logged, and named in the audit); unique.
    pub name: String,
    /// What it may do.
    pub role: crate::api::Role,
    /// SHA-256 of the token, 64 hex digits (`ax token new` prints it; or
    /// `printf %s "$TOKEN" | sha256sum`).
    pub sha256: String,
}

/// `[http]`: the one HTTP port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http {
    /// `host:port` to listen on; default `0.0.0.0:8080`.
    pub listen: String,
    /// A plain admin token for `/api/v1`, named `api_token` (secret; for a token kept in a
    /// Kubernetes secret, `AX_API_TOKEN`); empty for none.
    pub api_token: String,
    /// Named tokens with roles, stored as SHA-256 hashes (`ax token new` makes one).
    pub tokens: Vec<TokenEntry>,
    /// Lets anyone who reaches the port use the whole API without a token, on a listener
    /// that is not loopback-only. Without a token and without this, such a replica refuses
    /// every API call; default false.
    pub insecure_open_api: bool,
    /// The base URL under which the jobs of `http.async` tasks reach this API
    /// (`https://ax.example.com`, behind whatever proxy or ingress): the completion URL
    /// each request of such a task carries is built from it. Empty for none: such tasks
    /// then fail, saying to set this.
    pub public_url: String,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            listen: "0.0.0.0:8080".to_owned(),
            api_token: String::new(),
            tokens: Vec::new(),
            insecure_open_api: false,
            public_url: String::new(),
        }
    }
}

/// `[audit]`: the audit log of changes made through ax.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Audit {
    /// How long a record is kept; default 90 d.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub retention: Duration,
    /// Most records kept (the oldest go first); default 100 000.
    pub max_records: usize,
}

impl Default for Audit {
    fn default() -> Self {
        Audit {
            retention: Duration::from_secs(90 * 24 * 3600),
            max_records: 100_000,
        }
    }
}

/// `[limits]`: bounds on what API and CLI callers may send, each refused with a message
/// naming it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest `/api/v1` request body, bytes; default 1 MiB.
    pub max_request_bytes: usize,
    /// Most tasks one namespace may hold (checked when the API or CLI creates a task);
    /// default 100 000.
    pub max_tasks_per_namespace: u64,
    /// Run-now requests per task per minute through this replica's API; default 60.
    pub triggers_per_task_per_minute: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 1024 * 1024,
            max_tasks_per_namespace: 100_000,
            triggers_per_task_per_minute: 60,
        }
    }
}

/// Alert severity, lowest first.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum AlertLevel {
    /// For the record.
    Info,
    /// Needs a look.
    #[default]
    Warn,
    /// Needs action now.
    Critical,
    /// The engine cannot do its job.
    Fatal,
}

/// `[alerts]`: alert channels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Alerts {
    /// Feishu bot webhook URL (secret: it carries the bot's token); empty disables Feishu.
    pub feishu_webhook: String,
    /// Feishu signing secret (secret); when set, messages are signed.
    pub feishu_secret: String,
    /// Generic JSON webhook URL; empty disables it.
    pub webhook_url: String,
    /// Alerts below this level are not sent; default `warn`.
    pub min_level: AlertLevel,
}

/// Overrides from command-line flags, the top layer. `None` leaves a key as the lower layers
/// set it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigOverrides {
    /// `--etcd-endpoints`.
    pub etcd_endpoints: Option<Vec<String>>,
    /// `--etcd-prefix`.
    pub etcd_prefix: Option<String>,
    /// `--redis-url`.
    pub redis_url: Option<String>,
    /// `--instance-id`.
    pub instance_id: Option<String>,
    /// `--roles`.
    pub roles: Option<Vec<Role>>,
    /// `--worker-concurrency`.
    pub worker_concurrency: Option<usize>,
    /// `--worker-queues`.
    pub worker_queues: Option<Vec<String>>,
    /// `--http-listen`.
    pub http_listen: Option<String>,
}

/// Everything [`Config::load`] needs, gathered at the edge of the process.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions<'a> {
    /// `--config`, if given (the file must exist).
    pub config_flag: Option<&'a Path>,
    /// The process environment (only `AX_*` variables are read).
    pub env: &'a HashMap<String, String>,
    /// Flag overrides.
    pub overrides: &'a ConfigOverrides,
    /// File read when neither `--config` nor `AX_CONFIG` names one, if it exists
    /// (the binary passes [`DEFAULT_CONFIG_PATH`]).
    pub default_path: Option<&'a Path>,
    /// The host name, used as instance id when none is configured.
    pub hostname: Option<&'a str>,
}

/// Settings that no longer exist, with what to do instead: `(key, variable, why)`. Left
/// silently ignored, a removed setting would change what a replica does without a word.
const REMOVED_SETTINGS: &[(&str, &str, &str)] = &[(
    "instance.namespaces",
    "AX_NAMESPACES",
    "removed: it filtered what the one leader fires, so a replica scoped to some namespaces \
     that won the election never fired the others (and dropped their run-now requests); every \
     leader now fires every namespace. Delete the setting; to keep teams' tasks apart, give \
     each installation its own `etcd.prefix` and `redis.key_prefix`",
)];

/// The first removed setting `text` (a config file) sets, as an error message.
fn removed_setting_in(text: &str) -> Option<String> {
    let table: toml::Table = text.parse().ok()?;
    REMOVED_SETTINGS.iter().find_map(|(key, _, why)| {
        let mut parts = key.split('.');
        let section = table.get(parts.next()?)?.as_table()?;
        section
            .contains_key(parts.next()?)
            .then(|| format!("`{key}` was {why}"))
    })
}

impl Config {
    /// Assembles and validates the effective configuration: defaults, then the file (from
    /// `--config`, `AX_CONFIG` or the default path), then the environment, then flags.
    pub fn load(opts: LoadOptions<'_>) -> Result<Config, ConfigError> {
        let mut config = match config_file_path(opts.config_flag, opts.env, opts.default_path) {
            Some(path) => Config::from_file(&path)?,
            None => Config::default(),
        };
        for (key, var, why) in REMOVED_SETTINGS {
            if opts.env.get(*var).is_some_and(|v| !v.trim().is_empty()) {
                return Err(ConfigError::Env {
                    var: (*var).to_owned(),
                    message: format!("sets `{key}`, which was {why}"),
                });
            }
        }
        config.apply_env(opts.env)?;
        config.apply_overrides(opts.overrides);
        if config.instance.id.is_empty() {
            if let Some(host) = opts.hostname.map(str::trim).filter(|h| !h.is_empty()) {
                config.instance.id = host.to_owned();
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a TOML file (no environment, no validation).
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse_toml(&text, path)
    }

    /// Parses TOML text (no environment, no validation). Unknown keys are errors.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        Config::parse_toml(text, Path::new("<string>"))
    }

    fn parse_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            // A removed setting is an unknown key to the parser; say what became of it.
            message: removed_setting_in(text)
                .unwrap_or_else(|| e.to_string().trim_end().to_owned()),
        })
    }

    /// Applies flag overrides.
    pub fn apply_overrides(&mut self, o: &ConfigOverrides) {
        if let Some(v) = &o.etcd_endpoints {
            self.etcd.endpoints = v.clone();
        }
        if let Some(v) = &o.etcd_prefix {
            self.etcd.prefix = v.clone();
        }
        if let Some(v) = &o.redis_url {
            self.redis.url = v.clone();
        }
        if let Some(v) = &o.instance_id {
            self.instance.id = v.clone();
        }
        if let Some(v) = &o.roles {
            self.instance.roles = v.clone();
        }
        if let Some(v) = o.worker_concurrency {
            self.worker.concurrency = v;
        }
        if let Some(v) = &o.worker_queues {
            self.worker.queues = v.clone();
        }
        if let Some(v) = &o.http_listen {
            self.http.listen = v.clone();
        }
    }

    /// The configuration as TOML, secrets masked: what `ax config print` shows.
    pub fn to_masked_toml(&self) -> String {
        // Serializing plain structs of strings, numbers and lists cannot fail; should a
        // future field make it fail, say so rather than print a partial config.
        toml::to_string_pretty(&self.masked())
            .unwrap_or_else(|e| format!("# cannot render the configuration: {e}\n"))
    }

    /// The Redis URL to connect with: `url` with `password` put in when one is set.
    pub fn redis_connection_url(&self) -> String {
        mask::with_url_password(&self.redis.url, &self.redis.password)
    }

    /// The Redis Cluster node URLs to connect with (`cluster_nodes`, each with `password`
    /// put in when one is set); empty for a single server.
    pub fn redis_cluster_urls(&self) -> Vec<String> {
        self.redis
            .cluster_nodes
            .iter()
            .map(|url| mask::with_url_password(url, &self.redis.password))
            .collect()
    }

    /// The Redis URLs in use (`redis.cluster_nodes` when set, else `redis.url`): what TLS
    /// settings and messages are about.
    pub fn redis_urls(&self) -> Vec<&str> {
        if self.redis.cluster_nodes.is_empty() {
            vec![self.redis.url.as_str()]
        } else {
            self.redis
                .cluster_nodes
                .iter()
                .map(String::as_str)
                .collect()
        }
    }
}

/// The file to read: `--config`, else `AX_CONFIG`, else `default_path` if it exists.
pub fn config_file_path(
    flag: Option<&Path>,
    env: &HashMap<String, String>,
    default_path: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(path) = flag {
        return Some(path.to_owned());
    }
    if let Some(path) = env.get(CONFIG_ENV_VAR).filter(|v| !v.trim().is_empty()) {
        return Some(PathBuf::from(path));
    }
    default_path.filter(|p| p.exists()).map(Path::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_contract() {
        let c = Config::default();
        assert_eq!(c.etcd.endpoints, ["http://127.0.0.1:2379"]);
        assert_eq!(c.etcd.prefix, "/scheduler");
        assert_eq!(c.etcd.timeout, Duration::from_secs(5));
        assert_eq!(c.redis.url, "redis://127.0.0.1:6379/0");
        assert_eq!(c.redis.key_prefix, "ax");
        assert_eq!(c.instance.roles, [Role::Scheduler, Role::Worker]);
        assert_eq!(c.election.lease_ttl, Duration::from_secs(10));
        assert_eq!(c.scheduler.tick, Duration::from_millis(10));
        assert_eq!(c.scheduler.catch_up_window, Duration::from_secs(600));
        assert_eq!(c.scheduler.max_clock_skew, Duration::from_secs(2));
        assert_eq!(c.scheduler.enqueue_rate_limit, 0);
        assert_eq!(c.scheduler.backlog_alert_threshold, 1000);
        assert_eq!(c.worker.concurrency, 64);
        assert_eq!(c.worker.queues, ["default"]);
        assert_eq!(c.worker.shutdown_grace, Duration::from_secs(30));
        assert_eq!(c.worker.visibility_timeout, Duration::from_secs(30));
        assert_eq!(c.scheduler.events_interval, Duration::from_millis(100));
        assert_eq!(c.scheduler.flush_interval, Duration::from_millis(500));
        assert_eq!(c.scheduler.trigger_interval, Duration::from_millis(250));
        assert_eq!(c.scheduler.enqueue_stall_limit, Duration::from_secs(30));
        assert_eq!(c.http.listen, "0.0.0.0:8080");
        assert_eq!(c.alerts.min_level, AlertLevel::Warn);
    }

    #[test]
    fn the_documented_defaults_are_the_defaults() {
        // The full file in docs/configuration.md is what users copy: it must say exactly
        // what ax does when a key is left out.
        let doc = include_str!("../../docs/configuration.md");
        let start = doc.find("```toml\n").expect("a toml block in the docs") + 8;
        let len = doc[start..].find("```").expect("the block ends");
        let text = &doc[start..start + len];
        assert_eq!(Config::from_toml_str(text).unwrap(), Config::default());
    }

    #[test]
    fn a_removed_setting_is_refused_with_what_to_do_instead() {
        let e = Config::from_toml_str("[instance]\nnamespaces = [\"billing\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`instance.namespaces` was removed"), "{e}");
        assert!(e.contains("etcd.prefix"), "{e}");
        // Other unknown keys keep the parser's message.
        let e = Config::from_toml_str("[instance]\nnamespace = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `namespace`"), "{e}");

        let env: HashMap<String, String> = [("AX_NAMESPACES".to_owned(), "billing".to_owned())]
            .into_iter()
            .collect();
        let e = Config::load(LoadOptions {
            config_flag: None,
            env: &env,
            overrides: &ConfigOverrides::default(),
            default_path: None,
            hostname: Some("h"),
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("AX_NAMESPACES") && e.contains("`instance.namespaces`"),
            "{e}"
        );
    }

    #[test]
    fn printed_toml_parses_back_to_the_same_config() {
        let mut c = Config::default();
        c.instance.id = "ax-0".into();
        c.scheduler.catch_up_window = Duration::from_millis(90_500);
        let back = Config::from_toml_str(&c.to_masked_toml()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn commands_are_a_table_of_named_commands() {
        let c = Config::from_toml_str(
            r#"
            [worker]
            commands_allow_root = true
            [worker.commands.backup]
            path = "/usr/local/bin/backup.sh"
            args = ["--quiet"]
            env = { BACKUP_DIR = "/data" }
            allow_env = ["TARGET"]
            working_dir = "/data"
            max_output_bytes = 8192
            kill_grace = "10s"
            [worker.commands.report]
            path = "/usr/local/bin/report"
            "#,
        )
        .unwrap();
        let w = &c.worker;
        assert!(w.commands_allow_root);
        let backup = &w.commands["backup"];
        assert_eq!(backup.path, Path::new("/usr/local/bin/backup.sh"));
        assert_eq!(backup.args, ["--quiet"]);
        assert_eq!(backup.env["BACKUP_DIR"], "/data");
        assert_eq!(backup.allow_env, ["TARGET"]);
        assert_eq!(backup.working_dir.as_deref(), Some(Path::new("/data")));
        assert_eq!(backup.max_output_bytes, 8192);
        assert_eq!(backup.kill_grace, Duration::from_secs(10));
        assert_eq!(
            w.commands["report"],
            ax_worker::CommandConfig::new("/usr/local/bin/report")
        );
        assert_eq!(
            Config::from_toml_str(&c.to_masked_toml()).unwrap().worker,
            {
                let mut w = w.clone();
                w.commands
                    .get_mut("backup")
                    .unwrap()
                    .env
                    .insert("BACKUP_DIR".into(), MASK.into());
                w
            }
        );
        let e = Config::from_toml_str("[worker.commands.x]\npath = \"/x\"\nshell = true\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `shell`"), "{e}");
        let e = Config::from_toml_str("[worker.commands.x]\nargs = []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `path`"), "{e}");
    }

    #[test]
    fn concurrency_zero_is_the_default() {
        let mut w = Worker::default();
        assert_eq!(w.effective_concurrency(), ax_worker::DEFAULT_CONCURRENCY);
        w.concurrency = 0;
        assert_eq!(w.effective_concurrency(), ax_worker::DEFAULT_CONCURRENCY);
        w.concurrency = 3;
        assert_eq!(w.effective_concurrency(), 3);
    }

    #[test]
    fn config_path_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let default = dir.path().join("ax.toml");
        let mut env = HashMap::new();
        assert_eq!(config_file_path(None, &env, Some(&default)), None);
        std::fs::write(&default, "").unwrap();
        assert_eq!(
            config_file_path(None, &env, Some(&default)),
            Some(default.clone())
        );
        env.insert(CONFIG_ENV_VAR.to_owned(), "/from/env.toml".to_owned());
        assert_eq!(
            config_file_path(None, &env, Some(&default)),
            Some(PathBuf::from("/from/env.toml"))
        );
        assert_eq!(
            config_file_path(Some(Path::new("/flag.toml")), &env, Some(&default)),
            Some(PathBuf::from("/flag.toml"))
        );
    }
}
