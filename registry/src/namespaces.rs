//! Paused namespaces: `{prefix}/paused/{namespace}`, one key per paused namespace.
//!
//! Written by the CLI or the API, read by the leader (at takeover, before it arms anything,
//! and then polled), which keeps the tasks of a paused namespace from firing. A key per
//! namespace makes pause and resume single writes that need no read, and the leader's read
//! one range; the value records who paused it and when, for `ax status`.

use ax_scheduler_core::UtcMillis;
use etcd_client::{DeleteOptions, GetOptions};
use serde::{Deserialize, Serialize};

use crate::error::{timed, RegistryError};
use crate::registry::Registry;

/// Who paused a namespace and when: the value of its key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespacePause {
    /// The namespace.
    #[serde(default)]
    pub namespace: String,
    /// When it was paused.
    pub paused_at: UtcMillis,
    /// Who paused it (an API token's name, `cli:user@host`).
    pub paused_by: String,
}

impl Registry {
    /// Pauses a namespace (again, if it was: the newer record wins).
    pub async fn pause_namespace(&self, pause: &NamespacePause) -> Result<(), RegistryError> {
        let key = self.keys().paused_namespace(&pause.namespace);
        // A struct of strings and an integer always serializes.
        let value = serde_json::to_vec(pause).unwrap_or_default();
        let mut kv = self.client().kv_client();
        timed(
            "namespace pause",
            self.config().request_timeout,
            kv.put(key, value, None),
        )
        .await?;
        tracing::info!(namespace = %pause.namespace, by = %pause.paused_by, "namespace paused");
        Ok(())
    }

    /// Resumes a namespace; false when it was not paused.
    pub async fn resume_namespace(&self, namespace: &str) -> Result<bool, RegistryError> {
        let key = self.keys().paused_namespace(namespace);
        let mut kv = self.client().kv_client();
        let resp = timed(
            "namespace resume",
            self.config().request_timeout,
            kv.delete(key, Some(DeleteOptions::new())),
        )
        .await?;
        if resp.deleted() > 0 {
            tracing::info!(namespace, "namespace resumed");
        }
        Ok(resp.deleted() > 0)
    }

    /// The paused namespaces, in name order.
    pub async fn paused_namespaces(&self) -> Result<Vec<NamespacePause>, RegistryError> {
        let prefix = self.keys().paused_prefix();
        let mut kv = self.client().kv_client();
        let resp = timed(
            "paused namespaces",
            self.config().request_timeout,
            kv.get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let key = String::from_utf8_lossy(kv.key());
                let namespace = key.strip_prefix(&prefix)?.to_owned();
                let mut pause = serde_json::from_slice::<NamespacePause>(kv.value()).unwrap_or(
                    NamespacePause {
                        namespace: String::new(),
                        paused_at: UtcMillis(0),
                        paused_by: String::new(),
                    },
                );
                // The key names the namespace; a hand-written value cannot unpause it.
                pause.namespace = namespace;
                Some(pause)
            })
            .collect())
    }
}
