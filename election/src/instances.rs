//! Instance records: `{prefix}/instances/{instance_id}`, one per live replica, on a lease.
//!
//! They tell operators and the leader which replicas run, in which roles and with which
//! handlers. A record vanishes by itself when its replica stops renewing, so the list is
//! never stale by more than one TTL. Each record is a plain put on its own [`Session`]: it
//! is not created-if-absent, because a replica restarting under the same id simply replaces
//! its old record.
//!
//! Beside each record, `{prefix}/roster/{instance_id}` keeps the same record with no lease
//! ([`RosterEntry`]). A roster entry whose record is gone is a replica that died without
//! deregistering; [`sweep_roster`] stamps when it was first seen gone and forgets it
//! [`ROSTER_KEEP`] later, so the roster stays bounded whatever the churn of pod names.

use ax_scheduler_core::UtcMillis;
use etcd_client::{Client, GetOptions, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::keys::{instance_key, instances_prefix, roster_key};
use crate::session::Session;
use crate::validity::LossReason;

/// What a replica publishes about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// Unique id of the replica.
    pub instance_id: String,
    /// Roles it runs (`scheduler`, `worker`, ...).
    pub roles: Vec<String>,
    /// Handlers its workers serve.
    #[serde(default)]
    pub handlers: Vec<String>,
    /// Queues its workers take from (`worker.queues`); empty for a replica without the
    /// worker role.
    #[serde(default)]
    pub queues: Vec<String>,
    /// Software version.
    pub version: String,
    /// Address of its HTTP endpoint, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Host it runs on (the pod name under Kubernetes), so an operator can find the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its process id on that host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// When it started.
    pub started_at: UtcMillis,
}

/// A replica's roster entry: its last record, kept without a lease, and when it was first
/// seen without a live record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RosterEntry {
    /// The record the replica last registered.
    pub record: InstanceRecord,
    /// When a sweep first found its live record gone; absent while it is live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gone_at: Option<UtcMillis>,
}

/// A published instance record, kept alive until dropped or deregistered.
pub struct InstanceRegistration {
    session: Session,
    key: String,
    roster_key: String,
}

impl InstanceRegistration {
    /// Fires when the record's lease is lost or in doubt; register again to republish.
    pub fn lost(&self) -> CancellationToken {
        self.session.lost()
    }

    /// Why the registration ended, once it has.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.session.loss_reason()
    }

    /// Removes the record now (revoking its session's lease, else deleting the key), and its
    /// roster entry: a replica that stops cleanly is not shown as gone.
    pub async fn deregister(self) -> Result<(), ElectionError> {
        let client = self.session.client().clone();
        let t = self.session.request_timeout();
        let mut kv = client.kv_client();
        let closed = self.session.close().await.is_ok();
        if !closed {
            timed("instance delete", t, kv.delete(self.key, None)).await?;
        }
        timed("roster delete", t, kv.delete(self.roster_key, None)).await?;
        Ok(())
    }
}

/// Publishes `record` under `{prefix}/instances/{instance_id}` on a fresh lease.
pub async fn register_instance(
    client: &Client,
    config: &ElectionConfig,
    record: &InstanceRecord,
) -> Result<InstanceRegistration, ElectionError> {
    let t = config.request_timeout;
    let key = instance_key(&config.prefix, &record.instance_id);
    let session = Session::open(client, config).await?;
    // A record of strings and integers always serializes.
    let value = serde_json::to_vec(record).unwrap_or_default();
    let entry = serde_json::to_vec(&RosterEntry {
        record: record.clone(),
        gone_at: None,
    })
    .unwrap_or_default();
    let mut kv = client.kv_client();
    // The roster entry outlives the lease, so a replica that dies quietly is shown as gone
    // rather than dropping off the list.
    let put = Txn::new().and_then([
        TxnOp::put(
            key.clone(),
            value,
            Some(PutOptions::new().with_lease(session.lease_id())),
        ),
        TxnOp::put(roster_key(&config.prefix, &record.instance_id), entry, None),
    ]);
    if let Err(e) = timed("instance put", t, kv.txn(put)).await {
        let _ = session.close().await;
        return Err(e);
    }
    Ok(InstanceRegistration {
        session,
        key,
        roster_key: roster_key(&config.prefix, &record.instance_id),
    })
}

/// How long [`keep_registered`] waits before it publishes again after a failure or a loss.
const REREGISTER_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Keeps `record` published until `cancel` fires, then removes it: registers, and registers
/// again (after a short wait) whenever the lease is lost (etcd restarted, a partition) or
/// the put failed. Failures are logged, never returned: a process runs on without its record
/// and publishes it as soon as etcd answers again.
pub async fn keep_registered(
    client: Client,
    config: ElectionConfig,
    record: InstanceRecord,
    cancel: CancellationToken,
) {
    loop {
        match register_instance(&client, &config, &record).await {
            Ok(registration) => {
                let lost = registration.lost();
                tokio::select! {
                    _ = cancel.cancelled() => {
                        if let Err(e) = registration.deregister().await {
                            tracing::warn!(error = %e, "could not deregister the instance");
                        }
                        return;
                    }
                    _ = lost.cancelled() => {
                        tracing::warn!(reason = ?registration.loss_reason(), "instance registration lost; registering again");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot register the instance; retrying"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(REREGISTER_DELAY) => {}
        }
    }
}

/// A live instance record with how long ago its replica last renewed the record's lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceLiveness {
    /// The record.
    pub record: InstanceRecord,
    /// Time since the replica's last lease renewal (its heartbeat), to the second etcd
    /// counts in; `None` when etcd could not say (the lease just expired, or the call
    /// failed).
    pub heartbeat_age: Option<std::time::Duration>,
}

/// The live instance records with their heartbeat ages, sorted by instance id.
///
/// etcd keeps no renewal time, but a lease's remaining TTL restarts at its granted TTL on
/// every keep-alive, so granted minus remaining is the time since the last one. One lease
/// query per replica: fine for a status page, not for a hot path.
pub async fn list_instances_with_liveness(
    client: &Client,
    config: &ElectionConfig,
) -> Result<Vec<InstanceLiveness>, ElectionError> {
    let resp = instance_keys(client, config).await?;
    let mut out = Vec::with_capacity(resp.kvs().len());
    for kv in resp.kvs() {
        let record = decode_record(kv)?;
        let heartbeat_age = if kv.lease() == 0 {
            None
        } else {
            let mut leases = client.lease_client();
            timed(
                "instance lease ttl",
                config.request_timeout,
                leases.time_to_live(kv.lease(), None),
            )
            .await
            .ok()
            .and_then(|t| {
                let age = t.granted_ttl().checked_sub(t.ttl())?;
                (t.ttl() >= 0).then(|| std::time::Duration::from_secs(age.unsigned_abs()))
            })
        };
        out.push(InstanceLiveness {
            record,
            heartbeat_age,
        });
    }
    Ok(out)
}

/// Every instance key, in key (instance id) order.
async fn instance_keys(
    client: &Client,
    config: &ElectionConfig,
) -> Result<etcd_client::GetResponse, ElectionError> {
    let mut kv = client.kv_client();
    timed(
        "instances list",
        config.request_timeout,
        kv.get(
            instances_prefix(&config.prefix),
            Some(GetOptions::new().with_prefix()),
        ),
    )
    .await
}

fn decode_record(kv: &etcd_client::KeyValue) -> Result<InstanceRecord, ElectionError> {
    serde_json::from_slice(kv.value()).map_err(|source| ElectionError::Decode {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        source,
    })
}

/// Lists the live instance records, sorted by instance id.
pub async fn list_instances(
    client: &Client,
    config: &ElectionConfig,
) -> Result<Vec<InstanceRecord>, ElectionError> {
    let resp = instance_keys(client, config).await?;
    resp.kvs().iter().map(decode_record).collect()
}
