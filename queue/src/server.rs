//! What ax needs to know about the Redis server itself: which process it is, and whether it
//! keeps what it is given.
//!
//! ax's queue state (ready, processing and delayed lists, dedupe keys, fences) lives only in
//! Redis. A server without persistence loses all of it on a restart while etcd still says
//! the fires happened, and an evicting `maxmemory-policy` drops keys under memory pressure.
//! The engine reads this at start (and warns) and watches the run id, which changes on every
//! restart, to notice a restart it did not see (fences must be raised again). `CONFIG` may
//! be disabled on managed servers: then the settings are unknown, not wrong.

use crate::error::Result;
use crate::queue::{check_queue, Queue};

/// The facts about the server, as far as it tells them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// Changes on every restart of the server process.
    pub run_id: String,
    /// AOF on, or an RDB `save` schedule set; `None` when `CONFIG` is not allowed.
    pub persistent: Option<bool>,
    /// `maxmemory-policy`; `None` when `CONFIG` is not allowed.
    pub maxmemory_policy: Option<String>,
}

impl ServerInfo {
    /// What an operator should fix, one sentence each; empty when nothing.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.persistent == Some(false) {
            out.push(
                "Redis has neither AOF nor RDB persistence: a restart loses every queued, \
                 running and delayed execution and the fences (set appendonly yes)"
                    .to_owned(),
            );
        }
        if let Some(policy) = &self.maxmemory_policy {
            if policy != "noeviction" {
                out.push(format!(
                    "Redis maxmemory-policy is `{policy}`: under memory pressure it evicts \
                     queue keys; set it to noeviction (ax then retries refused writes)"
                ));
            }
        }
        out
    }
}

fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    })
}

/// The run id in an `INFO` reply: one server's text, or a cluster's map of primary address
/// to text (then `address=run_id` of each, sorted, joined by commas).
fn run_id_of(info: redis::Value) -> String {
    let text =
        |v: &redis::Value| -> String { redis::from_redis_value::<String>(v).unwrap_or_default() };
    match info {
        redis::Value::Map(nodes) => {
            let mut ids: Vec<String> = nodes
                .iter()
                .map(|(addr, v)| {
                    let id = info_field(&text(v), "run_id").unwrap_or_default();
                    format!("{}={id}", text(addr))
                })
                .collect();
            ids.sort();
            ids.join(",")
        }
        other => info_field(&text(&other), "run_id").unwrap_or_default(),
    }
}

impl Queue {
    /// The server's run id alone (one `INFO server`): what a leader watches to notice a
    /// restart. On a cluster, the run ids of all primaries, by address: a failover (a replica
    /// promoted, which may lack the newest writes) changes it as a restart does.
    pub async fn run_id(&self) -> Result<String> {
        let mut conn = self.conn();
        let info: redis::Value = self
            .run(
                "server_info",
                redis::cmd("INFO").arg("server").query_async(&mut conn),
            )
            .await?;
        Ok(run_id_of(info))
    }

    /// One round trip to the node that holds `queue`'s keys (`EXISTS` of its fence key), or
    /// to any node (`PING`) without a queue: whether Redis is in reach for what a leader
    /// does. Unlike [`Queue::run_id`], which asks every primary of a cluster, one node down
    /// (its slots failed over) does not make it fail.
    pub async fn ping(&self, queue: Option<&str>) -> Result<()> {
        let mut conn = self.conn();
        match queue {
            Some(q) => {
                check_queue(q)?;
                let _: i64 = self
                    .run(
                        "ping",
                        redis::cmd("EXISTS")
                            .arg(self.keys().fence(q, None))
                            .query_async(&mut conn),
                    )
                    .await?;
            }
            None => {
                let _: String = self
                    .run("ping", redis::cmd("PING").query_async(&mut conn))
                    .await?;
            }
        }
        Ok(())
    }

    /// Reads the server's run id and, where `CONFIG` is allowed, its persistence and
    /// eviction settings.
    pub async fn server_info(&self) -> Result<ServerInfo> {
        let run_id = self.run_id().await?;
        let config = |name: &'static str| {
            let mut conn = self.conn();
            async move {
                let mut cmd = redis::cmd("CONFIG");
                cmd.arg("GET").arg(name);
                let pair: Result<Vec<String>> =
                    self.run("server_info", cmd.query_async(&mut conn)).await;
                pair.ok().and_then(|p| p.into_iter().nth(1))
            }
        };
        let aof = config("appendonly").await;
        let save = config("save").await;
        let persistent = match (aof, save) {
            (Some(aof), Some(save)) => Some(aof == "yes" || !save.trim().is_empty()),
            _ => None,
        };
        Ok(ServerInfo {
            run_id,
            persistent,
            maxmemory_policy: config("maxmemory-policy").await,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_name_what_to_fix_and_unknown_is_not_wrong() {
        let safe = ServerInfo {
            run_id: "a".into(),
            persistent: Some(true),
            maxmemory_policy: Some("noeviction".into()),
        };
        assert!(safe.warnings().is_empty());
        let unknown = ServerInfo {
            persistent: None,
            maxmemory_policy: None,
            ..safe.clone()
        };
        assert!(unknown.warnings().is_empty());
        let risky = ServerInfo {
            persistent: Some(false),
            maxmemory_policy: Some("allkeys-lru".into()),
            ..safe
        };
        let w = risky.warnings();
        assert_eq!(w.len(), 2);
        assert!(
            w[0].contains("appendonly yes") && w[1].contains("allkeys-lru"),
            "{w:?}"
        );
    }

    #[test]
    fn info_fields_are_read_by_name() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\n";
        assert_eq!(info_field(info, "run_id").as_deref(), Some("abc123"));
        assert_eq!(info_field(info, "run"), None);
    }

    #[test]
    fn a_clusters_run_id_names_every_primary() {
        let info = |id: &str| {
            redis::Value::BulkString(format!("# Server\r\nrun_id:{id}\r\n").into_bytes())
        };
        let addr = |a: &str| redis::Value::BulkString(a.as_bytes().to_vec());
        let single = run_id_of(info("abc"));
        assert_eq!(single, "abc");
        let cluster = redis::Value::Map(vec![(addr("h2:2"), info("b")), (addr("h1:1"), info("a"))]);
        assert_eq!(run_id_of(cluster), "h1:1=a,h2:2=b");
    }
}
