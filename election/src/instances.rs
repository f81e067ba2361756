//! Instance records: `{prefix}/instances/{instance_id}`, one per live replica, on a lease.
//!
//! They tell operators and the leader which replicas run, in which roles and with which
//! handlers. A record vanishes by itself when its replica stops renewing, so the list is
//! never stale by more than one TTL.

use ax_scheduler_core::UtcMillis;
use etcd_client::{Client, GetOptions, PutOptions};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::hold::{LeaseHold, LossReason};
use crate::keys::{instance_key, instances_prefix};

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
    /// Software version.
    pub version: String,
    /// Address of its HTTP endpoint, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// When it started.
    pub started_at: UtcMillis,
}

/// A published instance record, kept alive until dropped or deregistered.
pub struct InstanceRegistration {
    hold: LeaseHold,
    client: Client,
    key: String,
    request_timeout: std::time::Duration,
}

impl InstanceRegistration {
    /// Fires when the record's lease is lost or in doubt; register again to republish.
    pub fn lost(&self) -> CancellationToken {
        self.hold.lost()
    }

    /// Why the registration ended, once it has.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.hold.loss_reason()
    }

    /// Removes the record now.
    pub async fn deregister(mut self) -> Result<(), ElectionError> {
        self.hold.stop_without_revoke(LossReason::Released).await;
        let mut lease = self.client.lease_client();
        let revoked = timed(
            "lease revoke",
            self.request_timeout,
            lease.revoke(self.hold.lease_id()),
        )
        .await;
        if revoked.is_err() {
            let mut kv = self.client.kv_client();
            timed(
                "instance delete",
                self.request_timeout,
                kv.delete(self.key.clone(), None),
            )
            .await?;
        }
        Ok(())
    }
}

/// Publishes `record` under `{prefix}/instances/{instance_id}` on a fresh lease.
pub async fn register_instance(
    client: &Client,
    config: &ElectionConfig,
    record: &InstanceRecord,
) -> Result<InstanceRegistration, ElectionError> {
    config.validate()?;
    let t = config.request_timeout;
    let key = instance_key(&config.prefix, &record.instance_id);
    let sent_at = Instant::now();
    let mut lease = client.lease_client();
    let lease_id = timed("lease grant", t, lease.grant(config.ttl_secs(), None))
        .await?
        .id();
    // A record of strings and integers always serializes.
    let value = serde_json::to_vec(record).unwrap_or_default();
    let mut kv = client.kv_client();
    if let Err(e) = timed(
        "instance put",
        t,
        kv.put(
            key.clone(),
            value,
            Some(PutOptions::new().with_lease(lease_id)),
        ),
    )
    .await
    {
        let _ = timed("lease revoke", t, lease.revoke(lease_id)).await;
        return Err(e);
    }
    let hold = LeaseHold::start(
        client.clone(),
        lease_id,
        config.effective_ttl(),
        t,
        None,
        sent_at,
    );
    Ok(InstanceRegistration {
        hold,
        client: client.clone(),
        key,
        request_timeout: t,
    })
}

/// Lists the live instance records, sorted by instance id.
pub async fn list_instances(
    client: &Client,
    config: &ElectionConfig,
) -> Result<Vec<InstanceRecord>, ElectionError> {
    let mut kv = client.kv_client();
    let resp = timed(
        "instances list",
        config.request_timeout,
        kv.get(
            instances_prefix(&config.prefix),
            Some(GetOptions::new().with_prefix()),
        ),
    )
    .await?;
    resp.kvs()
        .iter()
        .map(|kv| {
            serde_json::from_slice(kv.value()).map_err(|source| ElectionError::Decode {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                source,
            })
        })
        .collect()
}
