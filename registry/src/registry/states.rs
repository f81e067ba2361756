//! State records: a task's runtime state at `{prefix}/state/{namespace}/{id}`, read and
//! written apart from its spec. Writes can be fenced by the writer's fencing token (the
//! create revision of the leader key or of a shard's owner key) so that etcd itself refuses
//! a deposed writer's late write; reads list a record that cannot be decoded apart instead
//! of failing, since one bad record must not hide the others from a takeover.

use ax_scheduler_core::{TaskKey, TaskState};
use etcd_client::{Compare, CompareOp, DeleteOptions, KeyValue, Txn, TxnOp};

use super::{Registry, MAX_TXN_OPS};
use crate::error::{timed, RegistryError};

/// A task's runtime state with its etcd revision.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredState {
    /// Namespace.
    pub namespace: String,
    /// Task id.
    pub id: String,
    /// The state.
    pub state: TaskState,
    /// Revision of its last write.
    pub mod_revision: i64,
}

/// A state record that cannot be decoded (written by hand, or by a version of ax that knows
/// a status this one does not). It is reported and passed over; the leader's next write of
/// the task's state replaces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UndecodableState {
    /// Namespace.
    pub namespace: String,
    /// Task id.
    pub id: String,
    /// Why it cannot be read.
    pub error: String,
}

/// What a fenced state write compares: the key whose create revision is the writer's
/// fencing token (the leader key, or a shard's owner key). Built by
/// [`Registry::leader_fence`] and [`Registry::shard_fence`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateFence {
    key: String,
    token: i64,
}

impl StateFence {
    /// The fencing token.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The key whose create revision is the token.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The compare a fenced transaction carries.
    pub(super) fn compare(&self) -> Compare {
        Compare::create_revision(self.key.as_str(), CompareOp::Equal, self.token)
    }
}

/// Every state record under a prefix: the readable ones and the ones that are not.
#[derive(Clone, Debug, Default)]
pub struct StateListing {
    /// Decoded states, in key order.
    pub states: Vec<StoredState>,
    /// Records that could not be decoded, in key order.
    pub undecodable: Vec<UndecodableState>,
}

impl Registry {
    pub(super) fn state_put(&self, namespace: &str, id: &str, state: &TaskState) -> TxnOp {
        // A struct of numbers, strings and enums always serializes.
        let value = serde_json::to_vec(state).unwrap_or_default();
        TxnOp::put(self.keys.state(namespace, id), value, None)
    }

    /// The fence of the one leader: `{prefix}/leader` with create revision `token`.
    pub fn leader_fence(&self, token: i64) -> StateFence {
        StateFence {
            key: self.keys.leader(),
            token,
        }
    }

    /// The fence of a shard's owner: `{prefix}/shards/owners/{shard}` with create revision
    /// `token`.
    pub fn shard_fence(&self, shard: u32, token: i64) -> StateFence {
        StateFence {
            key: self.keys.shard_owner(shard),
            token,
        }
    }

    /// Writes a task's state. With `fence`, the write happens only while the fence's key
    /// still has its create revision (the writer's fencing token), else
    /// [`RegistryError::Fenced`]. Returns the write's revision.
    pub async fn put_state(
        &self,
        namespace: &str,
        id: &str,
        state: &TaskState,
        fence: Option<&StateFence>,
    ) -> Result<i64, RegistryError> {
        self.put_states(&[(TaskKey::new(namespace, id), state.clone())], fence)
            .await
    }

    /// Writes several states in one transaction (chunks of [`MAX_TXN_OPS`] each, in order,
    /// if there are more), fenced like [`Registry::put_state`]. Returns the last revision.
    pub async fn put_states(
        &self,
        states: &[(TaskKey, TaskState)],
        fence: Option<&StateFence>,
    ) -> Result<i64, RegistryError> {
        let mut revision = 0;
        let compare: Vec<Compare> = fence
            .map(|f| {
                vec![Compare::create_revision(
                    f.key.as_str(),
                    CompareOp::Equal,
                    f.token,
                )]
            })
            .unwrap_or_default();
        for chunk in states.chunks(MAX_TXN_OPS) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(key, st)| self.state_put(&key.namespace, &key.id, st))
                .collect();
            let txn = Txn::new().when(compare.clone()).and_then(ops);
            let resp = self.txn("state put", txn).await?;
            if !resp.succeeded() {
                return Err(RegistryError::Fenced {
                    token: fence.map_or(0, |f| f.token),
                });
            }
            revision = resp.header().map(|h| h.revision()).unwrap_or(revision);
        }
        Ok(revision)
    }

    /// Reads the states of `keys` (those that have one), [`MAX_TXN_OPS`] gets to a
    /// transaction. A shard owner's takeover reads its own tasks' states this way: listing
    /// every state to keep a shard's would cost each takeover the whole installation.
    pub async fn get_states(&self, keys: &[TaskKey]) -> Result<StateListing, RegistryError> {
        let mut listing = StateListing::default();
        for chunk in keys.chunks(MAX_TXN_OPS) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|k| TxnOp::get(self.keys.state(&k.namespace, &k.id), None))
                .collect();
            let resp = self.txn("state get", Txn::new().and_then(ops)).await?;
            for op in resp.op_responses() {
                if let etcd_client::TxnOpResponse::Get(get) = op {
                    for kv in get.kvs() {
                        self.decode_into(kv, &mut listing);
                    }
                }
            }
            tokio::task::coop::consume_budget().await;
        }
        let wanted: std::collections::HashSet<(&str, &str)> =
            keys.iter().map(|k| (&*k.namespace, &*k.id)).collect();
        let mut buckets: Vec<u32> = keys.iter().map(ax_scheduler_core::finals::bucket).collect();
        buckets.sort_unstable();
        buckets.dedup();
        let all = buckets.len() >= ax_scheduler_core::finals::BUCKETS as usize / 2;
        self.merge_finals(&mut listing, (!all).then_some(&buckets[..]), |ns, id| {
            wanted.contains(&(ns, id))
        })
        .await?;
        Ok(listing)
    }

    /// Reads a task's state (the newer of its state key and its ledger entry); `None` if
    /// none was written.
    pub async fn get_state(
        &self,
        namespace: &str,
        id: &str,
    ) -> Result<Option<StoredState>, RegistryError> {
        let mut listing = StateListing::default();
        let mut unreadable = None;
        if let Some(kv) = self.get_kv(self.keys.state(namespace, id)).await? {
            match self.decode_state(&kv) {
                Ok(state) => listing.states.push(state),
                Err(e) => unreadable = Some((e, kv.mod_revision())),
            }
        }
        let bucket = [ax_scheduler_core::finals::bucket_of_task(namespace, id)];
        self.merge_finals(&mut listing, Some(&bucket), |ns, i| {
            ns == namespace && i == id
        })
        .await?;
        match (listing.states.pop(), unreadable) {
            // An unreadable record older than the ledger's entry is superseded by it.
            (Some(s), Some((_, rev))) if s.mod_revision > rev => Ok(Some(s)),
            (_, Some((e, _))) => Err(e),
            (s, None) => Ok(s),
        }
    }

    fn decode_state(&self, kv: &KeyValue) -> Result<StoredState, RegistryError> {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let state = serde_json::from_slice(kv.value()).map_err(|source| RegistryError::Decode {
            key: key.clone(),
            source,
        })?;
        let (namespace, id) = self.state_key_parts(&key);
        Ok(StoredState {
            namespace,
            id,
            state,
            mod_revision: kv.mod_revision(),
        })
    }

    pub(super) fn state_key_parts(&self, key: &str) -> (String, String) {
        let rest = key.strip_prefix(&self.keys.states_prefix()).unwrap_or(key);
        let (namespace, id) = rest.split_once('/').unwrap_or(("", rest));
        (namespace.to_string(), id.to_string())
    }

    /// Lists every state record (or one namespace's), in key order, with the ledger's finals
    /// merged in. One record that cannot
    /// be decoded must not hide the others (a takeover reads them all): it is listed apart.
    pub async fn list_states(
        &self,
        namespace: Option<&str>,
    ) -> Result<StateListing, RegistryError> {
        let prefix = match namespace {
            Some(ns) => self.keys.namespace_states_prefix(ns),
            None => self.keys.states_prefix(),
        };
        let (_, kvs) = self.list_range(&prefix).await?;
        let mut listing = StateListing::default();
        for kv in &kvs {
            self.decode_into(kv, &mut listing);
            // A takeover reads a million states, seconds of parsing that must not keep the
            // runtime from its timers and sockets (the new leader's lease keep-alive).
            tokio::task::coop::consume_budget().await;
        }
        self.merge_finals(&mut listing, None, |ns, _| {
            namespace.is_none_or(|n| n == ns)
        })
        .await?;
        Ok(listing)
    }

    /// Decodes state records; one that cannot be decoded is listed apart.
    pub(super) fn decode_states(&self, kvs: &[KeyValue]) -> StateListing {
        let mut listing = StateListing::default();
        for kv in kvs {
            self.decode_into(kv, &mut listing);
        }
        listing
    }

    /// Decodes one state record into `listing`, or lists it apart.
    fn decode_into(&self, kv: &KeyValue, listing: &mut StateListing) {
        match self.decode_state(kv) {
            Ok(state) => listing.states.push(state),
            Err(e) => {
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                let (namespace, id) = self.state_key_parts(&key);
                listing.undecodable.push(UndecodableState {
                    namespace,
                    id,
                    error: e.to_string(),
                });
            }
        }
    }

    /// Deletes a task's state record.
    pub async fn delete_state(&self, namespace: &str, id: &str) -> Result<(), RegistryError> {
        let mut kv = self.client.kv_client();
        timed(
            "state delete",
            self.config.request_timeout,
            kv.delete(self.keys.state(namespace, id), Some(DeleteOptions::new())),
        )
        .await?;
        Ok(())
    }
}
