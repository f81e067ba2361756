//! Instance records: `{prefix}/instances/{instance_id}`, one per live replica, on a lease.
//!
//! They tell operators and the leader which replicas run, in which roles and with which
//! handlers. A record vanishes by itself when its replica stops renewing, so the list is
//! never stale by more than one TTL. Each record is a plain put on its own [`Session`]: it
//! is not created-if-absent, because a replica restarting under the same id simply replaces
//! its old record.

use ax_scheduler_core::UtcMillis;
use etcd_client::{Client, GetOptions, PutOptions};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::hold::LossReason;
use crate::keys::{instance_key, instances_prefix};
use crate::session::Session;

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
    session: Session,
    key: String,
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

    /// Removes the record now (revoking its session's lease, else deleting the key).
    pub async fn deregister(self) -> Result<(), ElectionError> {
        let client = self.session.client().clone();
        let t = self.session.request_timeout();
        if self.session.close().await.is_err() {
            let mut kv = client.kv_client();
            timed("instance delete", t, kv.delete(self.key, None)).await?;
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
    let t = config.request_timeout;
    let key = instance_key(&config.prefix, &record.instance_id);
    let session = Session::open(client, config).await?;
    // A record of strings and integers always serializes.
    let value = serde_json::to_vec(record).unwrap_or_default();
    let mut kv = client.kv_client();
    if let Err(e) = timed(
        "instance put",
        t,
        kv.put(
            key.clone(),
            value,
            Some(PutOptions::new().with_lease(session.lease_id())),
        ),
    )
    .await
    {
        let _ = session.close().await;
        return Err(e);
    }
    Ok(InstanceRegistration { session, key })
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
