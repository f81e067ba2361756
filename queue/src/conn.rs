//! One connection type for a single Redis server and for a Redis Cluster.
//!
//! A single server is reached through a `ConnectionManager` (one multiplexed socket that
//! reconnects by itself); a cluster through the redis crate's async cluster connection (one
//! multiplexed socket per node, commands routed by the slot of their first key, `MOVED` and
//! `ASK` followed, the slot map refreshed after a failover). [`Connection`] is either, and
//! implements `redis::aio::ConnectionLike`, so every command, script and pipeline of this
//! crate is written once for both.
//!
//! The one thing a cluster cannot do as a single server does is a pipeline whose commands
//! live in several slots (the cluster client refuses it: `CROSSSLOT`). Each script of the queue
//! touches one slot (the keys of one queue share a hash tag, see `keys.rs`), but some
//! pipelines gather commands of several queues or tasks (a batch of enqueues, an attempt's
//! event with its history). A cluster connection therefore splits such a pipeline by slot:
//! commands without a key (`SCRIPT LOAD`) first, in order, to every primary; then one
//! pipeline per slot, all at once, each in its original order; the replies are put back in
//! the order of the commands. Within one slot nothing changes; across slots a pipeline never
//! was atomic, on a single server either.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Arg, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::config::{QueueConfig, RedisTls};
use crate::error::{QueueError, Result};
use crate::millis::ms;

/// Number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// The cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the
/// first `{` and the next `}`, when not empty), else of the whole key, modulo 16384.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS
}

/// CRC16 with the XMODEM parameters (polynomial 0x1021, initial 0), as Redis Cluster uses.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Where the queue's Redis is.
#[derive(Clone)]
pub(crate) enum Client {
    /// One server (with its replicas, if any, behind it).
    Single(redis::Client),
    /// A Redis Cluster, known by some of its nodes.
    Cluster(ClusterClient),
}

/// A connection to a single Redis or to a Redis Cluster. Cheap to clone (clones share the
/// socket or sockets); use it as any `redis::aio::ConnectionLike`.
#[derive(Clone)]
pub enum Connection {
    /// A single server.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Client {
    /// A client of the single server at `url`.
    pub(crate) fn single(url: &str, tls: Option<&RedisTls>) -> Result<Self> {
        let Some(tls) = tls else {
            return redis::Client::open(url)
                .map(Client::Single)
                .map_err(QueueError::redis("connect"));
        };
        check_tls_url(url)?;
        // The client parses the PEM here, so an error is bad material, not a network failure.
        redis::Client::build_with_tls(url, certificates(tls))
            .map(Client::Single)
            .map_err(|e| QueueError::InvalidConfig(format!("TLS certificates or key: {e}")))
    }

    /// A client of the cluster that `nodes` (some of its nodes' URLs, any of them enough to
    /// find the rest) belong to.
    pub(crate) fn cluster(nodes: &[String], cfg: &QueueConfig) -> Result<Self> {
        if nodes.is_empty() {
            return Err(QueueError::InvalidConfig(
                "a Redis Cluster needs at least one node URL".into(),
            ));
        }
        let mut builder = ClusterClient::builder(nodes.iter().map(String::as_str))
            .connection_timeout(cfg.connect_timeout)
            .response_timeout(cfg.command_timeout)
            .retries(u32::try_from(cfg.reconnect_retries).unwrap_or(u32::MAX))
            .max_retry_wait(ms(cfg.reconnect_max_delay));
        if let Some(tls) = &cfg.tls {
            for url in nodes {
                check_tls_url(url)?;
            }
            builder = builder.certs(certificates(tls));
        }
        builder.build().map(Client::Cluster).map_err(|e| {
            if cfg.tls.is_some() {
                QueueError::InvalidConfig(format!("TLS certificates or key: {e}"))
            } else {
                QueueError::redis("connect")(e)
            }
        })
    }

    /// A new connection whose commands may take up to `response_timeout` (longer than the
    /// command timeout for a connection that blocks), bounded by twice the connect timeout.
    pub(crate) async fn connect(
        &self,
        cfg: &QueueConfig,
        response_timeout: Duration,
        op: &'static str,
    ) -> Result<Connection> {
        let limit = cfg.connect_timeout.saturating_mul(2);
        let made = match self {
            Client::Single(client) => {
                let mcfg = ConnectionManagerConfig::new()
                    .set_response_timeout(response_timeout)
                    .set_connection_timeout(cfg.connect_timeout)
                    .set_number_of_retries(cfg.reconnect_retries)
                    .set_max_delay(ms(cfg.reconnect_max_delay));
                let fut = ConnectionManager::new_with_config(client.clone(), mcfg);
                match tokio::time::timeout(limit, fut).await {
                    Ok(r) => r.map(Connection::Single),
                    Err(_) => return Err(QueueError::Timeout { op, after: limit }),
                }
            }
            Client::Cluster(client) => {
                let ccfg = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(cfg.connect_timeout)
                    .set_response_timeout(response_timeout);
                let fut = client.get_async_connection_with_config(ccfg);
                match tokio::time::timeout(limit, fut).await {
                    Ok(r) => r.map(Connection::Cluster),
                    Err(_) => return Err(QueueError::Timeout { op, after: limit }),
                }
            }
        };
        made.map_err(QueueError::redis(op))
    }
}

// Checked here rather than left to the client, whose own message does not say that the
// certificates were given for a plain connection.
fn check_tls_url(url: &str) -> Result<()> {
    if url.starts_with("rediss://") {
        Ok(())
    } else {
        Err(QueueError::InvalidConfig(
            "TLS settings are given but the URL is not rediss://".into(),
        ))
    }
}

fn certificates(tls: &RedisTls) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls.client.as_ref().map(|id| redis::ClientTlsConfig {
            client_cert: id.cert.clone(),
            client_key: id.key.clone(),
        }),
        root_cert: tls.ca.clone(),
    }
}

impl Connection {
    /// Sends `cmd` to the primary that serves the slot of `key` (on a single server: to
    /// the server). For commands that name no key but concern one (`WAIT` after a write).
    pub(crate) async fn query_at<T: redis::FromRedisValue>(
        &mut self,
        key: &str,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match self {
            Connection::Single(c) => cmd.query_async(c).await,
            Connection::Cluster(c) => {
                let route = Route::new(slot(key.as_bytes()), SlotAddr::Master);
                let value = c
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                redis::from_owned_redis_value(value)
            }
        }
    }
}

/// The slot of the first key `cmd` names, `None` for a command without keys. Covers the
/// commands this crate pipelines: a script call names its keys after their count, the rest
/// name their key first.
fn command_slot(cmd: &Cmd) -> Option<u16> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .map(|a| match a {
            Arg::Simple(b) => b,
            Arg::Cursor => &[][..],
        })
        .collect();
    let name = args.first()?.to_ascii_uppercase();
    let key = match name.as_slice() {
        b"EVALSHA" | b"EVAL" | b"EVALSHA_RO" | b"EVAL_RO" | b"FCALL" | b"FCALL_RO" => {
            let count: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            if count == 0 {
                return None;
            }
            args.get(3)?
        }
        b"SCRIPT" | b"INFO" | b"CONFIG" | b"PING" | b"WAIT" | b"TIME" | b"CLIENT" | b"CLUSTER"
        | b"MULTI" | b"EXEC" | b"DISCARD" => return None,
        _ => args.get(1)?,
    };
    Some(slot(key))
}

/// A pipeline's commands by where they go, as indices into it.
struct Split {
    /// Commands without a key, sent first by their own routing.
    keyless: Vec<usize>,
    /// The commands of each slot, in their order.
    by_slot: BTreeMap<u16, Vec<usize>>,
}

/// How a cluster connection sends `pipeline`: `None` when it can go as it is (one slot at
/// most, or a transaction, which must be one slot anyway).
fn split(pipeline: &Pipeline) -> Option<Split> {
    if pipeline.is_transaction() {
        return None;
    }
    let mut keyless = Vec::new();
    let mut by_slot: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, cmd) in pipeline.cmd_iter().enumerate() {
        match command_slot(cmd) {
            Some(s) => by_slot.entry(s).or_default().push(i),
            None => keyless.push(i),
        }
    }
    (by_slot.len() > 1).then_some(Split { keyless, by_slot })
}

async fn split_pipeline(
    conn: &mut ClusterConnection,
    pipeline: &Pipeline,
    split: Split,
) -> RedisResult<Vec<Value>> {
    let Split { keyless, by_slot } = split;
    let cmds: Vec<&Cmd> = pipeline.cmd_iter().collect();
    let mut out: Vec<Option<Value>> = vec![None; cmds.len()];
    for i in keyless {
        // A keyless command's own routing (`SCRIPT LOAD`: every primary).
        out[i] = Some(conn.req_packed_command(cmds[i]).await?);
    }
    let sends = by_slot.into_values().map(|indices| {
        let mut sub = redis::pipe();
        for &i in &indices {
            sub.add_command(cmds[i].clone());
        }
        let mut conn = conn.clone();
        async move {
            let replies = conn.req_packed_commands(&sub, 0, indices.len()).await?;
            Ok::<_, redis::RedisError>((indices, replies))
        }
    });
    for (indices, replies) in futures::future::try_join_all(sends).await? {
        if replies.len() != indices.len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::ResponseError,
                "pipeline split by slot",
                format!("{} replies for {} commands", replies.len(), indices.len()),
            )));
        }
        for (i, reply) in indices.into_iter().zip(replies) {
            out[i] = Some(reply);
        }
    }
    // Every index was in exactly one group, each of which filled all of its own.
    Ok(out.into_iter().map(|v| v.unwrap_or(Value::Nil)).collect())
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(c) => match split(cmd) {
                None => c.req_packed_commands(cmd, offset, count),
                Some(parts) => Box::pin(async move { split_pipeline(c, cmd, parts).await }),
            },
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        // An empty tag is no tag: the whole key is hashed.
        assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn pipelines_are_split_by_the_slot_of_their_first_key() {
        let mut one = redis::pipe();
        one.lpush("{a}:x", 1).ltrim("{a}:x", 0, 9).get("{a}:y");
        assert!(split(&one).is_none());
        let mut many = redis::pipe();
        many.cmd("SCRIPT").arg("LOAD").arg("return 1");
        many.cmd("EVALSHA")
            .arg("abc")
            .arg(2)
            .arg("{q1}:a")
            .arg("{q1}:b");
        many.cmd("EVALSHA").arg("abc").arg(1).arg("{q2}:a").arg("x");
        many.lpush("{q1}:c", 1);
        let parts = split(&many).expect("two slots");
        assert_eq!(parts.keyless, vec![0]);
        assert_eq!(parts.by_slot.get(&slot(b"q1")), Some(&vec![1, 3]));
        assert_eq!(parts.by_slot.get(&slot(b"q2")), Some(&vec![2]));
        let mut tx = redis::pipe();
        tx.atomic().set("{a}", 1).set("{b}", 2);
        assert!(split(&tx).is_none(), "a transaction goes as it is");
    }
}
