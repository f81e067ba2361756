//! Rules the assembled configuration must satisfy.
//!
//! Checked once, after all layers are applied, so a value set in the file and corrected by a
//! flag is never reported. Every broken rule is reported, each line starting with its key.

use std::time::Duration;

use ax_scheduler_core::misfire::MAX_CATCH_UP_WINDOW;

/// The longest `scheduler.routine_state_delay`: well under the minute after which the
/// leader reads its own unacknowledged events again.
const MAX_ROUTINE_STATE_DELAY: std::time::Duration = std::time::Duration::from_secs(30);

/// The shortest `scheduler.repair_after`: well past the seconds an end takes from its settle
/// to the leader, even when a dead worker's end is relayed by another.
const MIN_REPAIR_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

use super::{Config, ConfigError, ReplicaRole};
use ax_control::config::checks::{self, positive, queue_name_problem};

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

impl Config {
    /// Checks every rule; `Err(ConfigError::Invalid)` lists all the problems.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut errors = Vec::new();
        let mut err = |key: &str, msg: String| errors.push(format!("{key}: {msg}"));
        // The order of the sections is the order of the problems in the message.
        self.check_etcd(&mut err);
        self.check_redis(&mut err);
        self.check_instance(&mut err);
        self.check_election(&mut err);
        self.check_scheduler(&mut err);
        self.check_worker(&mut err);
        self.check_http(&mut err);
        self.check_audit(&mut err);
        self.check_limits(&mut err);
        self.check_alerts(&mut err);

        if errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(errors))
        }
    }

    /// `[etcd]`.
    fn check_etcd(&self, err: &mut impl FnMut(&str, String)) {
        checks::check_etcd(&self.etcd, err);
    }

    /// `[redis]`.
    fn check_redis(&self, err: &mut impl FnMut(&str, String)) {
        checks::check_redis(&self.redis, err);
    }

    /// `[instance]`.
    fn check_instance(&self, err: &mut impl FnMut(&str, String)) {
        if self.instance.id.trim().is_empty() {
            err(
                "instance.id",
                "empty and the host name could not be read; set AX_INSTANCE_ID or --instance-id"
                    .into(),
            );
        } else if self.instance.id.contains('/') || self.instance.id.trim() != self.instance.id {
            err(
                "instance.id",
                format!(
                    "`{}` must not contain `/` or surrounding spaces (it is part of an etcd key)",
                    self.instance.id
                ),
            );
        }
        if self.instance.roles.is_empty() {
            err(
                "instance.roles",
                "must name at least one role (`scheduler`, `worker`)".into(),
            );
        }
    }

    /// `[election]`.
    fn check_election(&self, err: &mut impl FnMut(&str, String)) {
        checks::check_election(&self.election, err);
    }

    /// `[scheduler]`.
    fn check_scheduler(&self, err: &mut impl FnMut(&str, String)) {
        positive(err, "scheduler.tick", self.scheduler.tick);
        if self.scheduler.tick > Duration::from_secs(1) {
            err(
                "scheduler.tick",
                format!("{} is longer than 1s", show(self.scheduler.tick)),
            );
        }
        if !self.scheduler.tick.subsec_nanos().is_multiple_of(1_000_000) {
            err(
                "scheduler.tick",
                format!(
                    "{} is not a whole number of milliseconds (the timer counts in ms); 10ms is the usual choice",
                    show(self.scheduler.tick)
                ),
            );
        }
        positive(
            err,
            "scheduler.catch_up_window",
            self.scheduler.catch_up_window,
        );
        if self.scheduler.catch_up_window > MAX_CATCH_UP_WINDOW {
            err(
                "scheduler.catch_up_window",
                format!(
                    "{} is longer than the {} the engine honours",
                    show(self.scheduler.catch_up_window),
                    show(MAX_CATCH_UP_WINDOW)
                ),
            );
        }
        if self.scheduler.routine_state_delay > MAX_ROUTINE_STATE_DELAY {
            err(
                "scheduler.routine_state_delay",
                format!(
                    "{} is longer than {}: the worker events a delayed write holds stay \
                     unacknowledged in Redis that long",
                    show(self.scheduler.routine_state_delay),
                    show(MAX_ROUTINE_STATE_DELAY)
                ),
            );
        }
        for (key, value) in [
            ("scheduler.max_clock_skew", self.scheduler.max_clock_skew),
            ("scheduler.events_interval", self.scheduler.events_interval),
            ("scheduler.flush_interval", self.scheduler.flush_interval),
            (
                "scheduler.trigger_interval",
                self.scheduler.trigger_interval,
            ),
            (
                "scheduler.enqueue_stall_limit",
                self.scheduler.enqueue_stall_limit,
            ),
            (
                "scheduler.redis_unreachable_limit",
                self.scheduler.redis_unreachable_limit,
            ),
        ] {
            positive(err, key, value);
        }
        if self.scheduler.repair_after < MIN_REPAIR_AFTER {
            err(
                "scheduler.repair_after",
                format!(
                    "{} is shorter than {}: an end on its way (relayed within seconds) would be taken for lost",
                    show(self.scheduler.repair_after),
                    show(MIN_REPAIR_AFTER)
                ),
            );
        }

        let max_shards = ax_scheduler_core::placement::MAX_SHARDS;
        if self.scheduler.shards == 0 || self.scheduler.shards > max_shards {
            err(
                "scheduler.shards",
                format!(
                    "is {}; from 1 (one leader) to {max_shards}",
                    self.scheduler.shards
                ),
            );
        }
    }

    /// `[worker]`.
    fn check_worker(&self, err: &mut impl FnMut(&str, String)) {
        if self.instance.has_role(ReplicaRole::Worker) && self.worker.queues.is_empty() {
            err(
                "worker.queues",
                "must name at least one queue on a replica with the worker role".into(),
            );
        }
        for q in &self.worker.queues {
            if let Some(problem) = queue_name_problem(q) {
                err("worker.queues", problem);
            }
        }
        let mut limited = std::collections::HashSet::new();
        for (i, l) in self.worker.queue_limits.iter().enumerate() {
            let key = format!("worker.queue_limits[{i}]");
            if let Some(problem) = queue_name_problem(&l.queue) {
                err(&key, problem);
            }
            if !limited.insert(l.queue.as_str()) {
                err(&key, format!("queue `{}` has limits twice", l.queue));
            }
            if !l.rate.is_finite() || l.rate < 0.0 {
                err(
                    &key,
                    format!(
                        "rate {} must be a number of at least 0 (per second; 0: no limit)",
                        l.rate
                    ),
                );
            }
        }
        positive(
            err,
            "worker.visibility_timeout",
            self.worker.visibility_timeout,
        );
        if let Err(problems) = self.worker.egress_allow() {
            for (key, problem) in problems {
                err(key, problem);
            }
        }
        for (key, problem) in self.worker.commands_config().problems() {
            err(&key, problem);
        }
        for (name, d) in &self.worker.secret_destinations {
            let key = format!("worker.secret_destinations.{name}");
            if let Err(e) = ax_scheduler_core::secret_ref::check_name(name) {
                err(&key, e);
            }
            if let Err(e) = ax_worker::SecretRule::new(&d.hosts, d.in_url) {
                err(&format!("{key}.hosts"), e);
            }
        }
        let dir = &self.worker.secrets_dir;
        if !dir.is_empty() && !std::path::Path::new(dir).is_absolute() {
            err(
                "worker.secrets_dir",
                format!("`{dir}` must be an absolute path (where the secrets are mounted)"),
            );
        }
    }

    /// `[http]`.
    fn check_http(&self, err: &mut impl FnMut(&str, String)) {
        if !is_host_port(&self.http.listen) {
            err(
                "http.listen",
                format!(
                    "`{}` must be host:port (like `0.0.0.0:8080`)",
                    self.http.listen
                ),
            );
        }
        let mut names = std::collections::HashSet::new();
        for (i, t) in self.http.tokens.iter().enumerate() {
            let key = format!("http.tokens[{i}]");
            if t.name.trim().is_empty() {
                err(&key, "name must not be empty".into());
            } else if t.name == ax_control::api::API_TOKEN_NAME
                || t.name == ax_control::api::ANONYMOUS
            {
                err(&key, format!("name `{}` is reserved", t.name));
            } else if !names.insert(t.name.as_str()) {
                err(&key, format!("name `{}` is used twice", t.name));
            }
            if ax_control::api::parse_sha256(&t.sha256).is_none() {
                err(
                    &key,
                    format!(
                        "sha256 of `{}` must be 64 hex digits, the SHA-256 of the token (not \
                         the token itself): `ax token new` prints one",
                        t.name
                    ),
                );
            }
        }
        if self.http.insecure_open_api
            && (!self.http.tokens.is_empty() || !self.http.api_token.is_empty())
        {
            err(
                "http.insecure_open_api",
                "is set while API tokens are configured; tokens already open the API to \
                 their holders: remove it"
                    .into(),
            );
        }

        self.check_http_edge(err);
        let public = self.http.public_url.trim();
        if !(public.is_empty() || public.starts_with("http://") || public.starts_with("https://")) {
            err(
                "http.public_url",
                format!("`{public}` must start with http:// or https://"),
            );
        }
    }

    /// `[http]`: the API token's length, the origins and hosts the API answers, and the
    /// header deadline.
    fn check_http_edge(&self, err: &mut impl FnMut(&str, String)) {
        let chars = self.http.api_token.chars().count();
        if chars > 0 && chars < MIN_API_TOKEN_CHARS {
            err(
                "http.api_token",
                format!(
                    "is {chars} characters long; an API token must have at least \
                     {MIN_API_TOKEN_CHARS} (`openssl rand -hex 32` makes one)"
                ),
            );
        }
        for o in &self.http.allowed_origins {
            if let Err(why) = super::origin::normal_origin(o) {
                err("http.allowed_origins", format!("`{o}`: {why}"));
            }
        }
        for h in &self.http.allowed_hosts {
            if let Err(why) = super::origin::normal_host(h) {
                err("http.allowed_hosts", format!("`{h}`: {why}"));
            }
        }
        positive(
            err,
            "http.header_read_timeout",
            self.http.header_read_timeout,
        );
        positive(err, "http.request_timeout", self.http.request_timeout);
        positive(err, "http.write_timeout", self.http.write_timeout);
        if self.http.max_connections == 0 {
            err("http.max_connections", "must be at least 1".into());
        }
        if self.http.max_connections_per_peer == 0 {
            err("http.max_connections_per_peer", "must be at least 1".into());
        }
    }

    /// `[audit]`.
    fn check_audit(&self, err: &mut impl FnMut(&str, String)) {
        checks::check_audit(&self.audit, err);
    }

    /// `[limits]`.
    fn check_limits(&self, err: &mut impl FnMut(&str, String)) {
        checks::check_limits(&self.limits, err);
    }

    /// `[alerts]`.
    fn check_alerts(&self, err: &mut impl FnMut(&str, String)) {
        for (key, url) in [
            ("alerts.feishu_webhook", &self.alerts.feishu_webhook),
            ("alerts.webhook_url", &self.alerts.webhook_url),
        ] {
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            if !url.is_empty() && !scheme_ok {
                // The Feishu URL is a secret: do not echo it.
                err(key, "must start with http:// or https://".into());
            }
        }
        if !self.alerts.feishu_secret.is_empty() && self.alerts.feishu_webhook.is_empty() {
            err(
                "alerts.feishu_secret",
                "is set but alerts.feishu_webhook is not".into(),
            );
        }
    }
}

/// The shortest `http.api_token` accepted: a token a person could guess or type from
/// memory is no credential.
const MIN_API_TOKEN_CHARS: usize = 32;

fn is_host_port(s: &str) -> bool {
    if s.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains(['/', ' ']) && port.parse::<u16>().is_ok()
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Config {
        let mut c = Config::default();
        c.instance.id = "ax-0".into();
        c
    }

    fn errors(c: &Config) -> Vec<String> {
        match c.validate() {
            Err(ConfigError::Invalid(e)) => e,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn defaults_with_an_id_are_valid() {
        valid().validate().unwrap();
    }

    #[test]
    fn a_tick_must_be_whole_milliseconds() {
        let mut c = valid();
        c.scheduler.tick = Duration::from_micros(1500);
        assert!(errors(&c).iter().any(|e| e.starts_with("scheduler.tick:")));
        c.scheduler.tick = Duration::from_millis(5);
        c.validate().unwrap();
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let mut c = valid();
        c.etcd.endpoints.clear();
        c.redis.url = "http://:pw@localhost:6379".into();
        c.instance.id.clear();
        c.instance.roles.clear();
        c.election.lease_ttl = Duration::from_millis(500);
        c.scheduler.tick = Duration::ZERO;
        c.http.listen = "8080".into();
        c.scheduler.catch_up_window = Duration::from_secs(3 * 3600);
        let e = errors(&c);
        for key in [
            "etcd.endpoints:",
            "redis.url:",
            "instance.id:",
            "instance.roles:",
            "election.lease_ttl:",
            "scheduler.tick:",
            "scheduler.catch_up_window:",
            "http.listen:",
        ] {
            assert!(
                e.iter().any(|l| l.starts_with(key)),
                "{key} missing in {e:#?}"
            );
        }
        // A password in a rejected URL is not echoed.
        assert!(!e.iter().any(|l| l.contains("pw@")), "{e:#?}");
    }

    #[test]
    fn redis_schemes() {
        for (url, ok) in [
            ("redis://127.0.0.1:6379/0", true),
            ("rediss://:pw@redis.example:6380", true),
            ("redis://", false),
            ("http://127.0.0.1:6379", false),
            ("127.0.0.1:6379", false),
            ("unix:///tmp/redis.sock", false),
        ] {
            let mut c = valid();
            c.redis.url = url.into();
            assert_eq!(c.validate().is_ok(), ok, "{url}");
        }
    }

    #[test]
    fn redis_cluster_nodes() {
        for (nodes, ca, ok) in [
            (vec!["redis://a:7000", "redis://b:7001"], false, true),
            (vec!["rediss://a:7000", "rediss://b:7001"], true, true),
            (vec!["rediss://a:7000", "redis://b:7001"], true, false),
            (vec!["redis://a:7000"], true, false),
            (vec!["a:7000"], false, false),
        ] {
            let mut c = valid();
            // The nodes replace the URL: a bad one there does not matter.
            c.redis.url = "unused".into();
            c.redis.cluster_nodes = nodes.iter().map(|s| s.to_string()).collect();
            if ca {
                c.redis.ca_file = "/ca.pem".into();
            }
            let e = c
                .validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert_eq!(e.is_empty(), ok, "{nodes:?}: {e}");
            if !ok {
                assert!(e.contains("redis.cluster_nodes"), "{e}");
            }
        }
    }

    #[test]
    fn etcd_endpoints() {
        for (eps, ok) in [
            (vec!["http://a:2379", "https://b:2379"], true),
            (vec!["a:2379"], true),
            (vec!["grpc://a:2379"], false),
            (vec![""], false),
        ] {
            let mut c = valid();
            c.etcd.endpoints = eps.iter().map(|s| s.to_string()).collect();
            assert_eq!(c.validate().is_ok(), ok, "{eps:?}");
        }
    }

    #[test]
    fn listen_addresses() {
        for (addr, ok) in [
            ("0.0.0.0:8080", true),
            ("[::]:8080", true),
            ("localhost:9000", true),
            ("8080", false),
            (":8080", false),
            ("host:port", false),
        ] {
            let mut c = valid();
            c.http.listen = addr.into();
            assert_eq!(c.validate().is_ok(), ok, "{addr}");
        }
    }

    #[test]
    fn tls_files_go_together_and_prefix_shape() {
        let mut c = valid();
        c.etcd.cert_file = "client.crt".into();
        assert!(errors(&c)[0].starts_with("etcd.cert_file:"));
        c.etcd.key_file = "client.key".into();
        c.etcd.ca_file = "ca.crt".into();
        c.validate().unwrap();
        for p in ["scheduler", "/scheduler/", ""] {
            c.etcd.prefix = p.into();
            assert!(errors(&c)[0].starts_with("etcd.prefix:"), "{p}");
        }
    }

    #[test]
    fn the_execution_history_needs_a_retention_and_room() {
        let mut c = valid();
        c.redis.execution_history_retention = Duration::ZERO;
        c.redis.execution_history_max_entries = 0;
        let e = errors(&c);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("redis.execution_history_retention:"));
        assert!(e[1].starts_with("redis.execution_history_max_entries:"));
    }

    #[test]
    fn redis_tls_files_go_together_and_need_rediss() {
        let mut c = valid();
        c.redis.url = "rediss://redis:6380/0".into();
        c.redis.cert_file = "client.crt".into();
        assert_eq!(errors(&c).len(), 1);
        assert!(errors(&c)[0].starts_with("redis.cert_file:"));
        c.redis.key_file = "client.key".into();
        c.validate().unwrap();
        c.redis.ca_file = "ca.crt".into();
        c.validate().unwrap();

        c.redis.url = "redis://redis:6379/0".into();
        let e = errors(&c);
        assert!(
            e[0].starts_with("redis.ca_file:") && e[0].contains("rediss://"),
            "{e:?}"
        );
        assert!(
            e[1].starts_with("redis.cert_file:") && e[1].contains("rediss://"),
            "{e:?}"
        );
    }

    #[test]
    fn an_etcd_client_certificate_needs_the_ca() {
        let mut c = valid();
        c.etcd.cert_file = "client.crt".into();
        c.etcd.key_file = "client.key".into();
        let e = errors(&c);
        assert!(
            e[0].starts_with("etcd.cert_file:") && e[0].contains("etcd.ca_file"),
            "{e:?}"
        );
        c.etcd.ca_file = "ca.crt".into();
        c.validate().unwrap();
    }

    #[test]
    fn egress_allow_lists_name_the_bad_entry_and_its_key() {
        let mut c = valid();
        c.worker.http_allow_cidrs = vec!["127.0.0.0/8".into(), "10.0.0.0/33".into()];
        c.worker.http_allow_hosts = vec!["localhost".into(), "*.svc.cluster.local".into()];
        let e = errors(&c);
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(
            e[0].starts_with("worker.http_allow_cidrs: `10.0.0.0/33` is not an address block"),
            "{e:#?}"
        );
        c.worker.http_allow_cidrs = vec!["::1".into()];
        c.worker.http_allow_hosts = vec!["10.0.0.1".into(), "api.*.example".into()];
        let e = errors(&c);
        assert_eq!(e.len(), 2, "{e:#?}");
        assert!(e[0].starts_with("worker.http_allow_hosts: `10.0.0.1` is an address"));
        assert!(e[1].starts_with("worker.http_allow_hosts: `api.*.example` is not a host name"));
        c.worker.http_allow_hosts = vec!["LocalHost".into()];
        c.validate().unwrap();
    }

    #[test]
    fn the_secrets_dir_is_an_absolute_path() {
        let mut c = valid();
        c.worker.secrets_dir = "secrets".into();
        let e = errors(&c);
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(e[0].starts_with("worker.secrets_dir: `secrets` must be an absolute path"));
        c.worker.secrets_dir = "/etc/ax-task-secrets".into();
        c.validate().unwrap();
    }

    #[test]
    fn a_secret_destination_names_hosts_that_parse() {
        let mut c = valid();
        let d = |hosts: &[&str]| crate::config::SecretDestination {
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            in_url: false,
        };
        c.worker.secret_destinations.insert(
            "slack".into(),
            d(&["hooks.slack.com", "*.example.org", "10.0.0.5"]),
        );
        c.validate().unwrap();
        c.worker.secret_destinations.insert("empty".into(), d(&[]));
        c.worker
            .secret_destinations
            .insert("bad".into(), d(&["a b"]));
        c.worker
            .secret_destinations
            .insert("../x".into(), d(&["ok.example"]));
        let e = errors(&c);
        assert_eq!(e.len(), 3, "{e:#?}");
        for key in [
            "worker.secret_destinations.empty.hosts",
            "worker.secret_destinations.bad.hosts",
            "worker.secret_destinations.../x",
        ] {
            assert!(e.iter().any(|x| x.starts_with(key)), "{key} in {e:#?}");
        }
    }

    #[test]
    fn command_problems_name_their_key() {
        let mut c = valid();
        c.worker.commands.insert(
            "backup".into(),
            ax_worker::CommandConfig {
                allow_env: vec!["AX_TASK".into()],
                ..ax_worker::CommandConfig::new("backup.sh")
            },
        );
        let e = errors(&c);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].starts_with("worker.commands.backup.path: `backup.sh` must be an absolute path"),
            "{e:?}"
        );
        assert!(e[1].starts_with("worker.commands.backup.allow_env: `AX_TASK` is reserved"));
    }

    #[test]
    fn worker_only_rules_apply_to_workers() {
        let mut c = valid();
        c.worker.queues.clear();
        assert!(errors(&c)[0].starts_with("worker.queues:"));
        c.instance.roles = vec![ReplicaRole::Scheduler];
        c.validate().unwrap();
    }
}
