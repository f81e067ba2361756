//! The section structs of the configuration, one per `[section]` of the file.
//!
//! Plain data that serde reads and writes: every struct denies unknown keys and takes its
//! missing keys from its [`Default`], so a partial file is complete once parsed. The
//! defaults themselves live in `defaults`, where they read as one table; the methods here
//! only interpret a section's own values.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use ax_control::config::{Audit, Election, Etcd, Limits, QueueLimit, Redis};

/// What a replica does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaRole {
    /// Joins the election; the leader fires tasks.
    Scheduler,
    /// Runs executions from the queues.
    Worker,
}

impl ReplicaRole {
    /// The name used in the file, the environment and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaRole::Scheduler => "scheduler",
            ReplicaRole::Worker => "worker",
        }
    }
}

impl std::str::FromStr for ReplicaRole {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "scheduler" => Ok(ReplicaRole::Scheduler),
            "worker" => Ok(ReplicaRole::Worker),
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
    pub roles: Vec<ReplicaRole>,
}

impl Instance {
    /// Whether this replica has `role`.
    pub fn has_role(&self, role: ReplicaRole) -> bool {
        self.roles.contains(&role)
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
    /// How long a periodic task's routine runs (successes after a success) wait to be
    /// written together; default 10 s, zero writes every run.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub routine_state_delay: Duration,
    /// How often the leader reads run-now requests; default 250 ms.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub trigger_interval: Duration,
    /// How long the leader retries enqueues Redis refuses before stepping down; default 30 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub enqueue_stall_limit: Duration,
    /// How long a leader Redis does not answer keeps its key before giving it up; default 5 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub redis_unreachable_limit: Duration,
    /// How long after its fire a task still executing is in doubt (its end looked for, and
    /// repaired as lost when none is coming); default 60 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub repair_after: Duration,
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

/// `[worker]`: the worker pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Worker {
    /// Executions run at once; default [`ax_worker::DEFAULT_CONCURRENCY`] (0 means the
    /// default too).
    pub concurrency: usize,
    /// Executions taken ahead of a free slot; default [`ax_worker::DEFAULT_PREFETCH`].
    pub prefetch: usize,
    /// Start at half the concurrency and ramp up, also when a backlog arrives; default true.
    pub slow_start: bool,
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
    /// The directory the `http` handler reads `${secret:NAME}` references from, one file
    /// per name (a mounted Kubernetes Secret); default none: such tasks fail, saying so.
    pub secrets_dir: String,
    /// Where each secret may be sent (`[worker.secret_destinations.<name>]`); a secret
    /// without an entry is sent nowhere. Default none.
    pub secret_destinations: BTreeMap<String, SecretDestination>,
}

/// `[worker.secret_destinations.<name>]`: the hosts one secret may be sent to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretDestination {
    /// Host names (`api.example.com`), `*.suffix` patterns or addresses the request carrying
    /// the secret may go to.
    pub hosts: Vec<String>,
    /// Whether a task may place the secret inside a URL (its host, path or query) rather
    /// than in a header or as the whole URL; default false.
    #[serde(default)]
    pub in_url: bool,
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

    /// Where the `http` handler reads secret references from.
    pub fn secret_source(&self) -> ax_worker::SecretSource {
        if self.secrets_dir.is_empty() {
            return ax_worker::SecretSource::none();
        }
        // Rules that do not parse are refused when the configuration is checked.
        let rules = self
            .secret_destinations
            .iter()
            .filter_map(|(name, d)| {
                ax_worker::SecretRule::new(&d.hosts, d.in_url)
                    .ok()
                    .map(|rule| (name.clone(), rule))
            })
            .collect();
        ax_worker::SecretSource::dir(&self.secrets_dir).with_rules(rules)
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
    pub role: ax_control::api::TokenRole,
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
    /// File holding `api_token` (a mounted Secret); empty for none.
    pub api_token_file: String,
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
    /// Origins (`https://console.example.com`) besides the API's own and `http.public_url`'s
    /// whose web pages may call `/api/v1`; a request with any other `Origin` is refused.
    /// Default none.
    pub allowed_origins: Vec<String>,
    /// Host names (optionally `host:port`) a loopback-only replica answers `/api/v1` under,
    /// besides `localhost`, `127.x.x.x` and `[::1]` (a port-forward or tunnel's name).
    /// Default none.
    pub allowed_hosts: Vec<String>,
    /// How long a connection may take to send a request's headers before it is closed;
    /// default 10 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub header_read_timeout: Duration,
    /// Longest a request may take from its head to its answer, body read included; past it
    /// the answer is `408`. Default 30 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub request_timeout: Duration,
    /// Longest a write to a connection may wait for the client to read; past it the
    /// connection is closed. Default 30 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub write_timeout: Duration,
    /// Most connections open at once; one more is closed as it is accepted. Default 1024.
    pub max_connections: usize,
    /// Most connections open at once from one peer address; default 256 (behind a proxy
    /// or ingress every client shares its address: raise it there).
    pub max_connections_per_peer: usize,
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
    /// File holding `feishu_webhook`; empty for none.
    pub feishu_webhook_file: String,
    /// File holding `feishu_secret`; empty for none.
    pub feishu_secret_file: String,
    /// File holding `webhook_url`; empty for none.
    pub webhook_url_file: String,
    /// Alerts below this level are not sent; default `warn`.
    pub min_level: AlertLevel,
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::config::{Config, MASK};

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
}
