//! Where the cluster is, and the queue settings every process of it must share.
//!
//! The queue settings are the queue crate's own ([`QueueConfig`]): the key prefix, priority
//! aging, queue limits and partitions must be the same in every process that serves or
//! enqueues into a queue, so the SDK takes them as the cluster has them rather than a
//! second, smaller set of names that could disagree.

use ax_control::ClusterConfig;
use ax_queue::{Queue, QueueConfig};

use crate::error::{Error, Result};

/// How to reach a cluster.
#[derive(Clone)]
pub struct Config {
    redis: Redis,
    queue: QueueConfig,
    etcd: Vec<String>,
    etcd_prefix: Option<String>,
    /// The replicas' configuration this one was read from, if it was: the client's backend
    /// is built from it, so etcd's user, TLS and the limits are the replicas' too.
    file: Option<Box<ClusterConfig>>,
}

// Shown without the Redis URLs and the file's settings: they may carry passwords.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("key_prefix", &self.queue.prefix)
            .field("etcd", &self.etcd)
            .field("etcd_prefix", &self.etcd_prefix)
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
enum Redis {
    Single(String),
    Cluster(Vec<String>),
}

impl Config {
    /// A cluster whose queues are on the Redis server at `url` (`redis://host:port/db`, or
    /// `rediss://` for TLS), with the default queue settings.
    pub fn redis(url: impl Into<String>) -> Self {
        Config {
            redis: Redis::Single(url.into()),
            queue: QueueConfig::default(),
            etcd: Vec::new(),
            etcd_prefix: None,
            file: None,
        }
    }

    /// A cluster whose queues are on the Redis Cluster that `nodes` belong to.
    pub fn redis_cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Config {
            redis: Redis::Cluster(nodes.into_iter().map(Into::into).collect()),
            queue: QueueConfig::default(),
            etcd: Vec::new(),
            etcd_prefix: None,
            file: None,
        }
    }

    /// The cluster as the replicas' `ax.toml` at `path` describes it: Redis (the URL or the
    /// cluster nodes, the password, the TLS files), the queue settings every process must
    /// share (key prefix, limits, partitions, history), etcd (endpoints, prefix, user, TLS).
    /// The file is read as `ax serve --config` reads it, without the environment: a setting
    /// given only as an `AX_*` variable is not seen. Secret files it names are read now.
    pub fn from_ax_toml(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let cluster = ClusterConfig::from_ax_toml(path)?;
        let mut queue = cluster.queue_config();
        queue.tls = ax_control::connect::redis_tls(&cluster)?;
        let redis = if cluster.redis.cluster_nodes.is_empty() {
            Redis::Single(cluster.redis.connection_url())
        } else {
            Redis::Cluster(cluster.redis.cluster_urls())
        };
        Ok(Config {
            redis,
            queue,
            etcd: cluster.etcd.endpoints.clone(),
            etcd_prefix: Some(cluster.etcd.prefix.clone()),
            file: Some(Box::new(cluster)),
        })
    }

    /// The key prefix of the cluster's Redis keys (`redis.key_prefix`; default `ax`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.queue.prefix = prefix.into();
        self
    }

    /// All queue settings at once, as the cluster's replicas have them (`[redis]` in
    /// `ax.toml`: priority aging, limits, partitions, TLS material).
    pub fn queue_settings(mut self, settings: QueueConfig) -> Self {
        self.queue = settings;
        self
    }

    /// The cluster's etcd endpoints (`http://host:2379`), which the [`crate::Client`]
    /// needs; a worker given them publishes its instance record there (it needs Redis
    /// only).
    pub fn etcd(mut self, endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.etcd = endpoints.into_iter().map(Into::into).collect();
        self
    }

    /// The cluster's etcd key prefix (`etcd.prefix`; default `/scheduler`).
    pub fn etcd_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.etcd_prefix = Some(prefix.into());
        self
    }

    /// The cluster's configuration the client's backend is built from, with what this one
    /// says.
    pub(crate) fn cluster_config(&self) -> Result<ClusterConfig> {
        if self.etcd.is_empty() {
            return Err(Error::Config(
                "the client needs the cluster's etcd endpoints (Config::etcd)".into(),
            ));
        }
        let mut cluster = match &self.file {
            // Redis's place, password and TLS stay the file's, as the replicas read them.
            Some(file) => (**file).clone(),
            None => {
                let mut cluster = ClusterConfig::default();
                match &self.redis {
                    Redis::Single(url) => cluster.redis.url = url.clone(),
                    Redis::Cluster(nodes) => cluster.redis.cluster_nodes = nodes.clone(),
                }
                cluster
            }
        };
        cluster.etcd.endpoints = self.etcd.clone();
        if let Some(prefix) = &self.etcd_prefix {
            cluster.etcd.prefix = prefix.clone();
        }
        cluster.redis.key_prefix = self.queue.prefix.clone();
        Ok(cluster)
    }

    /// With etcd named ([`Config::etcd`]), publishes the worker's instance record (its id,
    /// handlers and queues, as a replica publishes its own) until `stop` fires, so `ax status`
    /// lists it and `ax task put` checks a task's handler against what it serves. Without
    /// etcd, nothing: a worker needs Redis only.
    pub(crate) async fn announce(
        &self,
        worker_id: &str,
        handlers: Vec<String>,
        queues: Vec<String>,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<Option<tokio::task::JoinHandle<()>>> {
        if self.etcd.is_empty() {
            return Ok(None);
        }
        let cluster = self.cluster_config()?;
        let etcd = ax_control::connect::connect_etcd(&cluster).await?;
        let record = ax_election::InstanceRecord {
            instance_id: worker_id.to_owned(),
            roles: vec!["worker".to_owned()],
            handlers,
            queues,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            address: None,
            host: None,
            pid: Some(std::process::id()),
            started_at: self.queue.clock.now(),
        };
        let election = ax_control::connect::election_config(&cluster);
        Ok(Some(tokio::spawn(ax_election::keep_registered(
            etcd, election, record, stop,
        ))))
    }

    /// Connects to Redis.
    pub(crate) async fn connect_queue(&self) -> Result<Queue> {
        let queue = match &self.redis {
            Redis::Single(url) => Queue::connect(url, self.queue.clone()).await?,
            Redis::Cluster(nodes) if nodes.is_empty() => {
                return Err(Error::Config("no Redis cluster nodes given".into()))
            }
            Redis::Cluster(nodes) => Queue::connect_cluster(nodes, self.queue.clone()).await?,
        };
        Ok(queue)
    }
}
