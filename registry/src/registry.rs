//! Register, update, unregister and read task specs and state records.
//!
//! Every write that depends on what is stored is a transaction conditioned on what was
//! read: register creates only if the key is absent (`create_revision == 0`) or replaces
//! only the exact value whose version it compared (`mod_revision == read`); update applies
//! the caller's closure to the spec it read and writes only if the key has not moved since,
//! re-reading and re-applying up to [`UPDATE_ATTEMPTS`] times. Losing a race is therefore
//! never silent.
//!
//! State writes can be fenced: given the leader's fencing token, the transaction also
//! requires `{prefix}/leader` to still have that create revision, so a deposed leader's
//! late write is refused by etcd itself. The state records' types, reads and writes are in
//! the `states` submodule.

use std::collections::HashSet;

use ax_scheduler_core::TaskSpec;
use etcd_client::{Client, Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp};

use crate::config::RegistryConfig;
use crate::decode::{decode_task, raw_version, Decoded, StoredTask, TaskListing};
use crate::error::{timed, RegistryError};
use crate::keys::Keys;

mod finals;
mod states;

pub use finals::LedgerWriter;
pub use states::{StateFence, StateListing, StoredState, UndecodableState};

/// Attempts an [`Registry::update`] makes before reporting [`RegistryError::Conflict`].
pub const UPDATE_ATTEMPTS: u32 = 3;
/// Most operations etcd accepts in one transaction (its default `--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// What a successful register did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// The task was new.
    Created {
        /// Revision of the write.
        revision: i64,
    },
    /// A lower version was replaced.
    Replaced {
        /// The version replaced.
        previous_version: u64,
        /// Revision of the write.
        revision: i64,
    },
    /// The stored spec already says the same (same version, same content; `created_at` is
    /// the registration's own stamp and does not count): nothing was written.
    Unchanged {
        /// Revision at which the stored spec was last written.
        revision: i64,
    },
}

/// Where the next page of a paged task listing starts: the revision its first page was read
/// at (so that all pages are one snapshot), and the last key already listed. How a cursor
/// travels to a client (and is checked on its way back) is the API's business: the
/// registry only refuses one whose key is outside the listing's range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageCursor {
    /// The store revision of the first page.
    pub revision: i64,
    /// The last task key listed.
    pub after: String,
}

/// One page of a task listing with the states of its tasks, read at one revision.
#[derive(Clone, Debug, Default)]
pub struct TaskPage {
    /// The tasks of the page, valid and invalid apart.
    pub listing: TaskListing,
    /// The state records of the page's tasks.
    pub states: StateListing,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<PageCursor>,
}

/// How full etcd's database is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreUsage {
    /// Size of the database file, the figure etcd's quota applies to (bytes).
    pub db_bytes: i64,
    /// The quota (`--quota-backend-bytes`) when etcd reports it (3.6 and later).
    pub quota_bytes: Option<i64>,
}

/// Reads the database size (and quota, where reported) of the etcd member `client` talks to.
pub async fn store_usage(
    client: &Client,
    timeout: std::time::Duration,
) -> Result<StoreUsage, RegistryError> {
    let mut maintenance = client.maintenance_client();
    let status = timed("status", timeout, maintenance.status()).await?;
    Ok(StoreUsage {
        db_bytes: status.db_size(),
        quota_bytes: Some(status.db_size_quota()).filter(|q| *q > 0),
    })
}

/// The task registry on one etcd prefix.
#[derive(Clone)]
pub struct Registry {
    client: Client,
    config: RegistryConfig,
    keys: Keys,
}

impl Registry {
    /// A registry on `client` with `config`.
    pub fn new(client: Client, config: RegistryConfig) -> Self {
        let keys = Keys::new(&config.prefix);
        Registry {
            client,
            config,
            keys,
        }
    }

    /// The key layout in use.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The settings in use.
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    fn invalid(spec: &TaskSpec, errors: ax_scheduler_core::ValidationErrors) -> RegistryError {
        RegistryError::Invalid {
            namespace: spec.namespace.to_string(),
            id: spec.id.to_string(),
            errors,
        }
    }

    async fn get_kv(&self, key: String) -> Result<Option<KeyValue>, RegistryError> {
        let mut kv = self.client.kv_client();
        let mut resp = timed("get", self.config.request_timeout, kv.get(key, None)).await?;
        Ok(resp.take_kvs().into_iter().next())
    }

    /// The id of the etcd cluster this registry talks to and its current revision (from a
    /// response header). Fencing tokens are revisions of one cluster: the queue binds its
    /// fences to this id.
    pub async fn cluster(&self) -> Result<(u64, i64), RegistryError> {
        let mut kv = self.client.kv_client();
        let resp = timed(
            "cluster id",
            self.config.request_timeout,
            kv.get(
                self.keys.leader(),
                Some(etcd_client::GetOptions::new().with_count_only()),
            ),
        )
        .await?;
        Ok(resp
            .header()
            .map_or((0, 0), |h| (h.cluster_id(), h.revision())))
    }

    async fn txn(
        &self,
        op: &'static str,
        txn: Txn,
    ) -> Result<etcd_client::TxnResponse, RegistryError> {
        let mut kv = self.client.kv_client();
        timed(op, self.config.request_timeout, kv.txn(txn)).await
    }

    /// Registers `spec` under `{prefix}/tasks/{namespace}/{id}`: created if absent; an
    /// existing spec is replaced only by a higher `version`; offering the stored spec again is
    /// [`RegisterOutcome::Unchanged`] and writes nothing; anything else with a version not
    /// above the stored one is [`RegistryError::VersionNotHigher`]. The spec is validated
    /// first.
    pub async fn register(&self, spec: &TaskSpec) -> Result<RegisterOutcome, RegistryError> {
        spec.validate().map_err(|e| Self::invalid(spec, e))?;
        let key = self.keys.task(&spec.namespace, &spec.id);
        let value = spec.to_json();
        for _ in 0..UPDATE_ATTEMPTS {
            let create = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)])
                .or_else([TxnOp::get(key.clone(), None)]);
            let resp = self.txn("task register", create).await?;
            let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
            if resp.succeeded() {
                tracing::info!(task_id = %spec.id, namespace = %spec.namespace, version = spec.version, "task registered");
                return Ok(RegisterOutcome::Created { revision });
            }
            let Some(existing) = first_get_kv(&resp) else {
                // Deleted between the compare and the read: try creating again.
                continue;
            };
            let existing_version = match decode_task(&self.keys, &existing) {
                Decoded::Task(t) if same_spec(&t.spec, spec) => {
                    return Ok(RegisterOutcome::Unchanged {
                        revision: existing.mod_revision(),
                    });
                }
                Decoded::Task(t) => t.spec.version,
                Decoded::Invalid(_) => raw_version(existing.value()),
            };
            if spec.version <= existing_version {
                return Err(RegistryError::VersionNotHigher {
                    namespace: spec.namespace.to_string(),
                    id: spec.id.to_string(),
                    existing: existing_version,
                    offered: spec.version,
                });
            }
            let replace = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    existing.mod_revision(),
                )])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
            let resp = self.txn("task replace", replace).await?;
            if resp.succeeded() {
                let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
                tracing::info!(task_id = %spec.id, namespace = %spec.namespace, version = spec.version, previous_version = existing_version, "task replaced");
                return Ok(RegisterOutcome::Replaced {
                    previous_version: existing_version,
                    revision,
                });
            }
        }
        Err(RegistryError::Conflict {
            namespace: spec.namespace.to_string(),
            id: spec.id.to_string(),
            attempts: UPDATE_ATTEMPTS,
        })
    }

    /// Reads the spec, applies `change` to it and writes it back only if the key did not
    /// change in between; on a conflict re-reads and re-applies, up to [`UPDATE_ATTEMPTS`]
    /// times. The result is validated; `namespace` and `id` cannot be changed.
    pub async fn update<F>(
        &self,
        namespace: &str,
        id: &str,
        mut change: F,
    ) -> Result<StoredTask, RegistryError>
    where
        F: FnMut(&mut TaskSpec),
    {
        let key = self.keys.task(namespace, id);
        for attempt in 1..=UPDATE_ATTEMPTS {
            let current =
                self.get_stored(namespace, id)
                    .await?
                    .ok_or_else(|| RegistryError::NotFound {
                        namespace: namespace.to_string(),
                        id: id.to_string(),
                    })?;
            let mut spec = current.spec;
            change(&mut spec);
            spec.namespace = namespace.into();
            spec.id = id.into();
            spec.validate().map_err(|e| Self::invalid(&spec, e))?;
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    current.mod_revision,
                )])
                .and_then([TxnOp::put(key.clone(), spec.to_json(), None)]);
            let resp = self.txn("task update", txn).await?;
            if resp.succeeded() {
                let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
                return Ok(StoredTask {
                    spec,
                    mod_revision: revision,
                    create_revision: current.create_revision,
                });
            }
            tracing::debug!(
                task_id = id,
                namespace,
                attempt,
                "task update conflicted; retrying"
            );
        }
        Err(RegistryError::Conflict {
            namespace: namespace.to_string(),
            id: id.to_string(),
            attempts: UPDATE_ATTEMPTS,
        })
    }

    /// Removes a task and its state record in one transaction; `false` if it did not exist.
    pub async fn unregister(&self, namespace: &str, id: &str) -> Result<bool, RegistryError> {
        let txn = Txn::new().and_then([
            TxnOp::delete(self.keys.task(namespace, id), None),
            TxnOp::delete(self.keys.state(namespace, id), None),
        ]);
        let resp = self.txn("task unregister", txn).await?;
        let deleted = resp.op_responses().into_iter().next().map(|r| match r {
            etcd_client::TxnOpResponse::Delete(d) => d.deleted() > 0,
            _ => false,
        });
        // Its finals too, so the same id registered again before a leader saw the delete
        // starts afresh (the leader drops them as well when it sees the delete).
        let key = ax_scheduler_core::TaskKey::new(namespace, id);
        self.drop_finals(&[key], &mut LedgerWriter::new(None))
            .await?;
        Ok(deleted.unwrap_or(false))
    }

    async fn get_stored(
        &self,
        namespace: &str,
        id: &str,
    ) -> Result<Option<StoredTask>, RegistryError> {
        let Some(kv) = self.get_kv(self.keys.task(namespace, id)).await? else {
            return Ok(None);
        };
        match decode_task(&self.keys, &kv) {
            Decoded::Task(t) => Ok(Some(t)),
            Decoded::Invalid(bad) => Err(RegistryError::Invalid {
                namespace: bad.namespace,
                id: bad.id,
                errors: bad.errors,
            }),
        }
    }

    /// Reads one task; `None` if absent, [`RegistryError::Invalid`] if its value is not a
    /// valid spec.
    pub async fn get(
        &self,
        namespace: &str,
        id: &str,
    ) -> Result<Option<StoredTask>, RegistryError> {
        self.get_stored(namespace, id).await
    }

    /// How many tasks (valid or not) a namespace holds: one count-only range, no values read.
    pub async fn count_tasks(&self, namespace: &str) -> Result<u64, RegistryError> {
        let prefix = self.keys.namespace_prefix(namespace);
        let mut kv = self.client.kv_client();
        let resp = timed(
            "task count",
            self.config.request_timeout,
            kv.get(
                prefix.clone(),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            ),
        )
        .await?;
        Ok(u64::try_from(resp.count()).unwrap_or(0))
    }

    /// Lists every task (or one namespace's) at one revision, valid and invalid apart.
    pub async fn list(&self, namespace: Option<&str>) -> Result<TaskListing, RegistryError> {
        let prefix = match namespace {
            Some(ns) => self.keys.namespace_prefix(ns),
            None => self.keys.tasks_prefix(),
        };
        let (revision, kvs) = self.list_range(&prefix).await?;
        let mut listing = TaskListing {
            revision,
            ..TaskListing::default()
        };
        for kv in &kvs {
            match decode_task(&self.keys, kv) {
                Decoded::Task(t) => listing.tasks.push(t),
                Decoded::Invalid(i) => listing.invalid.push(i),
            }
        }
        Ok(listing)
    }

    /// One page of at most `limit` tasks (or one namespace's) in key order, with their
    /// states, starting after `from` (at its revision) or at the start. A listing continued
    /// after etcd compacted its revision fails with [`RegistryError::ListingExpired`].
    pub async fn list_page(
        &self,
        namespace: Option<&str>,
        from: Option<&PageCursor>,
        limit: usize,
    ) -> Result<TaskPage, RegistryError> {
        let prefix = match namespace {
            Some(ns) => self.keys.namespace_prefix(ns),
            None => self.keys.tasks_prefix(),
        };
        let start = match from {
            // A range starting below the prefix would return keys that are no tasks at all
            // (another application's, in a shared etcd).
            Some(c) if !c.after.starts_with(&prefix) => {
                return Err(RegistryError::CursorOutsideListing {
                    after: c.after.clone(),
                    range: prefix,
                })
            }
            Some(c) => {
                let mut k = c.after.clone().into_bytes();
                k.push(0);
                k
            }
            None => prefix.clone().into_bytes(),
        };
        let revision = from.map(|c| c.revision);
        let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
        let (rev, more, kvs) = self
            .range_at(start, prefix_end(prefix.as_bytes()), revision, limit)
            .await?;
        let mut page = TaskPage::default();
        page.listing.revision = rev;
        for kv in &kvs {
            match decode_task(&self.keys, kv) {
                Decoded::Task(t) => page.listing.tasks.push(t),
                Decoded::Invalid(i) => page.listing.invalid.push(i),
            }
        }
        if let (Some(first), Some(last)) = (kvs.first(), kvs.last()) {
            // The states of exactly these tasks: the same key range under the state prefix.
            let state_key = |kv: &KeyValue| {
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                let rest = key
                    .strip_prefix(&self.keys.tasks_prefix())
                    .unwrap_or(&key)
                    .to_owned();
                format!("{}{rest}", self.keys.states_prefix())
            };
            let mut end = state_key(last).into_bytes();
            end.push(0);
            let (_, _, states) = self
                .range_at(state_key(first).into_bytes(), end, Some(rev), 0)
                .await?;
            page.states = self.decode_states(&states);
            // The one-shots' finals are in the ledger: the buckets of the page's one-shots.
            let one_shots: HashSet<(&str, &str)> = page
                .listing
                .tasks
                .iter()
                .filter(|t| !t.spec.schedule.is_periodic())
                .map(|t| (&*t.spec.namespace, &*t.spec.id))
                .collect();
            let mut buckets: Vec<u32> = one_shots
                .iter()
                .map(|(ns, id)| ax_scheduler_core::finals::bucket_of_task(ns, id))
                .collect();
            buckets.sort_unstable();
            buckets.dedup();
            self.merge_finals(&mut page.states, Some(&buckets), |ns, id| {
                one_shots.contains(&(ns, id))
            })
            .await?;
        }
        if more {
            page.next = kvs.last().map(|kv| PageCursor {
                revision: rev,
                after: String::from_utf8_lossy(kv.key()).into_owned(),
            });
        }
        Ok(page)
    }

    /// One range read `[start, end)` in key order at `revision` (or the newest), at most
    /// `limit` keys (0: no limit). Returns the revision read at, whether more keys follow,
    /// and the keys.
    async fn range_at(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        revision: Option<i64>,
        limit: i64,
    ) -> Result<(i64, bool, Vec<KeyValue>), RegistryError> {
        // No sort asked: etcd returns a range in key order, and a sorted request makes etcd
        // 3.4 ignore the limit and read the whole rest of the range for every page (a listing
        // of a million tasks took minutes instead of seconds).
        let mut opts = GetOptions::new().with_range(end).with_limit(limit);
        if let Some(r) = revision {
            opts = opts.with_revision(r);
        }
        let mut kv = self.client.kv_client();
        let mut resp = match timed(
            "list",
            self.config.request_timeout,
            kv.get(start, Some(opts)),
        )
        .await
        {
            Ok(r) => r,
            Err(RegistryError::Etcd { source, .. })
                if revision.is_some() && source.to_string().contains("compacted") =>
            {
                return Err(RegistryError::ListingExpired {
                    revision: revision.unwrap_or_default(),
                })
            }
            Err(e) => return Err(e),
        };
        let rev = revision.unwrap_or_else(|| resp.header().map(|h| h.revision()).unwrap_or(0));
        let more = resp.more();
        Ok((rev, more, resp.take_kvs()))
    }

    /// Every key-value under `prefix`, read page by page at the first page's revision so the
    /// result is one consistent snapshot.
    pub(crate) async fn list_range(
        &self,
        prefix: &str,
    ) -> Result<(i64, Vec<KeyValue>), RegistryError> {
        let end = prefix_end(prefix.as_bytes());
        // Pages are sized in bytes (see `next_page_limit`), so the client takes responses
        // above its default 4 MiB.
        let mut kv = self
            .client
            .kv_client()
            .max_decoding_message_size(usize::MAX);
        let mut out = Vec::new();
        let mut from = prefix.as_bytes().to_vec();
        let mut revision = 0;
        let mut limit = self.config.list_page_size;
        loop {
            // In key order without asking (see `range_at`).
            let mut opts = GetOptions::new().with_range(end.clone()).with_limit(limit);
            if revision > 0 {
                opts = opts.with_revision(revision);
            }
            let mut resp = timed(
                "list",
                self.config.request_timeout,
                kv.get(from.clone(), Some(opts)),
            )
            .await?;
            if revision == 0 {
                revision = resp.header().map(|h| h.revision()).unwrap_or(0);
            }
            let more = resp.more();
            let page = resp.take_kvs();
            let bytes: usize = page
                .iter()
                .map(|kv| kv.key().len() + kv.value().len())
                .sum();
            limit = next_page_limit(self.config.list_page_size, bytes, page.len());
            let last = page.last().map(|kv| kv.key().to_vec());
            out.extend(page);
            match (more, last) {
                (true, Some(mut last)) => {
                    last.push(0);
                    from = last;
                }
                _ => return Ok((revision, out)),
            }
        }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }
}

fn first_get_kv(resp: &etcd_client::TxnResponse) -> Option<KeyValue> {
    resp.op_responses().into_iter().find_map(|r| match r {
        etcd_client::TxnOpResponse::Get(mut g) => g.take_kvs().into_iter().next(),
        _ => None,
    })
}

/// The end of the range of keys starting with `prefix` (etcd's prefix convention).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Bytes a listing asks for per page, once it knows how large the keys are.
const LIST_PAGE_BYTES: usize = 8 << 20;

/// Most keys in one listing page.
const LIST_PAGE_MAX: i64 = 100_000;

/// The next page's key limit: about [`LIST_PAGE_BYTES`] at the size the last page's keys had,
/// never below the configured page size. Every page costs etcd 3.4 a walk of the whole rest
/// of the range (it collects every revision before applying the limit), so a listing of N
/// keys in pages of P costs N²/2P: a million small tasks in pages of 1 000 took minutes, and
/// outlived the compaction of the revision it was reading at.
fn next_page_limit(configured: i64, page_bytes: usize, page_len: usize) -> i64 {
    if page_len == 0 {
        return configured;
    }
    let per_key = (page_bytes / page_len).max(1);
    let fits = i64::try_from(LIST_PAGE_BYTES / per_key).unwrap_or(LIST_PAGE_MAX);
    fits.clamp(configured.min(LIST_PAGE_MAX), LIST_PAGE_MAX)
}

/// Whether `offered` only repeats `stored`: `created_at` is stamped at registration (the
/// offered copy may carry none, or a newer one) and is not part of what the user wrote.
fn same_spec(stored: &TaskSpec, offered: &TaskSpec) -> bool {
    stored.version == offered.version
        && TaskSpec {
            created_at: stored.created_at,
            ..offered.clone()
        } == *stored
}

#[cfg(test)]
mod tests;
