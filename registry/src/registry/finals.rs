//! The finals ledger in etcd (see [`ax_scheduler_core::finals`] for why it exists): sheets
//! under `{prefix}/finals/{bucket}/`, each a JSON list of one-shots' final states.
//!
//! An entry's age is the etcd revision it was first written at: the sheet's mod revision,
//! or, once a compaction rewrote it, the `rev` it carries (a rewrite must never make an entry
//! look newer than a state key written since). Readers merge: a task's state is the newer of
//! its state key and its entry. Rewrites (a deleted task's entries dropped, a bucket
//! compacted) are conditioned on the sheets they replace being unchanged, so two writers
//! rewriting one bucket (shard owners share buckets) cannot bring back what the other
//! dropped; the loser reads again.

use std::collections::{HashMap, HashSet};

use ax_scheduler_core::finals::{self, COMPACT_SHEETS, SHEET_ENTRIES};
use ax_scheduler_core::{TaskKey, TaskState};
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use super::states::{StateFence, StateListing, StoredState};
use super::{Registry, MAX_TXN_OPS};
use crate::error::RegistryError;

/// Most bytes of sheets one transaction writes (one request, under etcd's 1.5 MiB).
const REWRITE_BYTES: usize = 1024 * 1024;

/// Attempts a rewrite makes when another writer changed the bucket meanwhile.
const REWRITE_ATTEMPTS: u32 = 5;

/// One entry of a sheet.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Entry {
    ns: String,
    id: String,
    /// The revision the entry was first written at, once a rewrite moved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rev: Option<i64>,
    state: TaskState,
}

#[derive(Debug, Serialize, Deserialize)]
struct Sheet {
    finals: Vec<Entry>,
}

/// A sheet as read: its key, mod revision and entries.
#[derive(Debug)]
struct StoredSheet {
    key: String,
    mod_revision: i64,
    entries: Vec<Entry>,
}

impl StoredSheet {
    fn entry_revision(&self, e: &Entry) -> i64 {
        e.rev.unwrap_or(self.mod_revision)
    }
}

/// What a writer of the ledger carries across its writes: its fence and its sheet count.
#[derive(Debug)]
pub struct LedgerWriter {
    fence: Option<StateFence>,
    token: i64,
    seq: u64,
}

impl LedgerWriter {
    /// A writer fenced on `fence` (or unfenced, for tests and tools: token 0).
    pub fn new(fence: Option<StateFence>) -> Self {
        let token = fence.as_ref().map_or(0, StateFence::token);
        LedgerWriter {
            fence,
            token,
            seq: 0,
        }
    }

    fn compares(&self) -> Vec<Compare> {
        self.fence
            .as_ref()
            .map(|f| vec![f.compare()])
            .unwrap_or_default()
    }
}

fn encode(entries: &[Entry]) -> Vec<u8> {
    // Strings, numbers and enums always serialize.
    serde_json::to_vec(&SheetRef { finals: entries }).unwrap_or_default()
}

#[derive(Serialize)]
struct SheetRef<'a> {
    finals: &'a [Entry],
}

/// An [`Entry`] being written for the first time (no `rev`), borrowing the flush's data.
#[derive(Serialize)]
struct NewEntry<'a> {
    ns: &'a str,
    id: &'a str,
    state: &'a TaskState,
}

#[derive(Serialize)]
struct NewSheet<'a, 'b> {
    finals: &'b [NewEntry<'a>],
}

impl Registry {
    /// Writes `states` (one-shots' finals) to the ledger, a sheet per bucket and
    /// [`SHEET_ENTRIES`], in fenced transactions of up to about a mebibyte. Returns the
    /// buckets written.
    pub async fn put_finals(
        &self,
        states: &[(TaskKey, TaskState)],
        writer: &mut LedgerWriter,
    ) -> Result<Vec<u32>, RegistryError> {
        // Borrowed: a flush hands over thousands of finals, and a copy of each cost the
        // leader as much as encoding it.
        let entries = states.iter().map(|(k, s)| NewEntry {
            ns: &k.namespace,
            id: &k.id,
            state: s,
        });
        let sheets = finals::sheets(
            entries,
            |e| finals::bucket_of_task(e.ns, e.id),
            |e| new_entry_size(e.ns, e.id, e.state),
        );
        let mut buckets = Vec::new();
        // Several sheets to a transaction, up to about a mebibyte: each transaction is a
        // raft proposal of its own, which costs etcd more than the bytes it carries.
        let mut ops = Vec::new();
        let mut bytes = 0;
        for (bucket, entries) in sheets {
            let value = serde_json::to_vec(&NewSheet { finals: &entries }).unwrap_or_default();
            if !ops.is_empty() && (bytes + value.len() > REWRITE_BYTES || ops.len() >= MAX_TXN_OPS)
            {
                let txn = Txn::new()
                    .when(writer.compares())
                    .and_then(std::mem::take(&mut ops));
                self.fenced_txn(txn, writer).await?;
                bytes = 0;
            }
            writer.seq += 1;
            bytes += value.len();
            ops.push(TxnOp::put(
                self.keys.finals_sheet(bucket, writer.token, writer.seq),
                value,
                None,
            ));
            if buckets.last() != Some(&bucket) {
                buckets.push(bucket);
            }
        }
        if !ops.is_empty() {
            let txn = Txn::new().when(writer.compares()).and_then(ops);
            self.fenced_txn(txn, writer).await?;
        }
        Ok(buckets)
    }

    async fn fenced_txn(&self, txn: Txn, writer: &LedgerWriter) -> Result<bool, RegistryError> {
        let resp = self.txn("finals write", txn).await?;
        if resp.succeeded() {
            return Ok(true);
        }
        // Failed: the fence (refused) or a sheet's compare (changed meanwhile).
        if let Some(f) = &writer.fence {
            let held = self.get_kv(f.key().to_owned()).await?;
            if held.is_none_or(|kv| kv.create_revision() != f.token()) {
                return Err(RegistryError::Fenced { token: f.token() });
            }
        }
        Ok(false)
    }

    /// The sheets of `bucket` (or of every bucket); one that cannot be decoded is skipped
    /// with a warning (it holds no entry a reader can use).
    async fn read_sheets(&self, bucket: Option<u32>) -> Result<Vec<StoredSheet>, RegistryError> {
        let prefix = match bucket {
            Some(b) => self.keys.finals_bucket(b),
            None => self.keys.finals_prefix(),
        };
        let (_, kvs) = self.list_range(&prefix).await?;
        let mut out = Vec::with_capacity(kvs.len());
        for kv in kvs {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            match serde_json::from_slice::<Sheet>(kv.value()) {
                Ok(sheet) => out.push(StoredSheet {
                    key,
                    mod_revision: kv.mod_revision(),
                    entries: sheet.finals,
                }),
                Err(e) => {
                    tracing::warn!(key, error = %e, "finals sheet cannot be decoded; skipped")
                }
            }
            tokio::task::coop::consume_budget().await;
        }
        Ok(out)
    }

    /// Merges the ledger's entries into `listing` where they are newer than the state key
    /// read (or there is none), for the tasks `wanted` keeps. `bucket`: read only that one.
    pub(super) async fn merge_finals(
        &self,
        listing: &mut StateListing,
        buckets: Option<&[u32]>,
        wanted: impl Fn(&str, &str) -> bool,
    ) -> Result<(), RegistryError> {
        let sheets = match buckets {
            None => self.read_sheets(None).await?,
            Some(bs) => {
                let mut all = Vec::new();
                for b in bs {
                    all.extend(self.read_sheets(Some(*b)).await?);
                }
                all
            }
        };
        if sheets.is_empty() {
            return Ok(());
        }
        let mut at: HashMap<(String, String), usize> = listing
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| ((s.namespace.clone(), s.id.clone()), i))
            .collect();
        for sheet in &sheets {
            for e in &sheet.entries {
                if !wanted(&e.ns, &e.id) {
                    continue;
                }
                let rev = sheet.entry_revision(e);
                let stored = StoredState {
                    namespace: e.ns.clone(),
                    id: e.id.clone(),
                    state: e.state.clone(),
                    mod_revision: rev,
                };
                match at.get(&(e.ns.clone(), e.id.clone())) {
                    Some(&i) if listing.states[i].mod_revision >= rev => {}
                    Some(&i) => listing.states[i] = stored,
                    None => {
                        at.insert((e.ns.clone(), e.id.clone()), listing.states.len());
                        listing.states.push(stored);
                    }
                }
            }
        }
        listing
            .states
            .sort_by(|a, b| (&a.namespace, &a.id).cmp(&(&b.namespace, &b.id)));
        Ok(())
    }

    /// Drops the entries of `deleted` tasks from the ledger: each sheet holding one is
    /// rewritten without it (or deleted, if nothing else is left), so a task created again
    /// under the same id starts afresh.
    pub async fn drop_finals(
        &self,
        deleted: &[TaskKey],
        writer: &mut LedgerWriter,
    ) -> Result<(), RegistryError> {
        let mut by_bucket: HashMap<u32, HashSet<(&str, &str)>> = HashMap::new();
        for k in deleted {
            by_bucket
                .entry(finals::bucket(k))
                .or_default()
                .insert((&k.namespace, &k.id));
        }
        for (bucket, gone) in by_bucket {
            self.rewrite_bucket(bucket, writer, |e| {
                !gone.contains(&(e.ns.as_str(), e.id.as_str()))
            })
            .await?;
        }
        Ok(())
    }

    /// Compacts `bucket` if it holds more than [`COMPACT_SHEETS`] sheets: entries a later
    /// state key superseded are dropped, and the sheets less than half full (with those
    /// more than half dead) are merged. Returns whether it rewrote anything.
    pub async fn compact_finals(
        &self,
        bucket: u32,
        writer: &mut LedgerWriter,
    ) -> Result<bool, RegistryError> {
        // Counted first: reading (and decoding) a bucket that needs nothing is the common case.
        if self.count_sheets(bucket).await? <= COMPACT_SHEETS {
            return Ok(false);
        }
        for _ in 0..REWRITE_ATTEMPTS {
            let sheets = self.read_sheets(Some(bucket)).await?;
            if sheets.len() <= COMPACT_SHEETS {
                return Ok(false);
            }
            let state_revs = self.state_revisions(&sheets).await?;
            let live = |s: &StoredSheet, e: &Entry| {
                let own = state_revs.get(&(e.ns.clone(), e.id.clone())).copied();
                own.is_none_or(|r| r < s.entry_revision(e))
            };
            // The sheets worth rewriting, as many as one request carries.
            let mut chosen: Vec<&StoredSheet> = Vec::new();
            let mut bytes = 0;
            for s in &sheets {
                let alive: Vec<&Entry> = s.entries.iter().filter(|e| live(s, e)).collect();
                let size: usize = alive.iter().map(|e| entry_size(e)).sum();
                let worth =
                    s.entries.len() < SHEET_ENTRIES / 2 || alive.len() * 2 < s.entries.len();
                if !worth || bytes + size > REWRITE_BYTES {
                    continue;
                }
                bytes += size;
                chosen.push(s);
                if chosen.len() >= MAX_TXN_OPS / 2 {
                    break;
                }
            }
            if chosen.len() < 2 {
                return Ok(false);
            }
            let kept: Vec<Entry> = chosen
                .iter()
                .flat_map(|s| {
                    s.entries.iter().filter(|e| live(s, e)).map(|e| Entry {
                        rev: Some(s.entry_revision(e)),
                        ..e.clone()
                    })
                })
                .collect();
            if self.replace_sheets(bucket, &chosen, kept, writer).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn count_sheets(&self, bucket: u32) -> Result<usize, RegistryError> {
        let mut kv = self.client.kv_client();
        let opts = GetOptions::new().with_prefix().with_count_only();
        let resp = crate::error::timed(
            "finals count",
            self.config.request_timeout,
            kv.get(self.keys.finals_bucket(bucket), Some(opts)),
        )
        .await?;
        Ok(usize::try_from(resp.count()).unwrap_or(usize::MAX))
    }

    /// Rewrites the sheets of `bucket` that hold an entry `keep` refuses, without those.
    async fn rewrite_bucket(
        &self,
        bucket: u32,
        writer: &mut LedgerWriter,
        keep: impl Fn(&Entry) -> bool,
    ) -> Result<(), RegistryError> {
        for _ in 0..REWRITE_ATTEMPTS {
            let sheets = self.read_sheets(Some(bucket)).await?;
            let mut all_done = true;
            for sheet in &sheets {
                if sheet.entries.iter().all(&keep) {
                    continue;
                }
                let kept: Vec<Entry> = sheet
                    .entries
                    .iter()
                    .filter(|e| keep(e))
                    .map(|e| Entry {
                        rev: Some(sheet.entry_revision(e)),
                        ..e.clone()
                    })
                    .collect();
                if !self.replace_sheets(bucket, &[sheet], kept, writer).await? {
                    all_done = false;
                    break;
                }
            }
            if all_done {
                return Ok(());
            }
        }
        Err(RegistryError::Conflict {
            namespace: self.keys.finals_bucket(bucket),
            id: String::new(),
            attempts: REWRITE_ATTEMPTS,
        })
    }

    /// Replaces `old` sheets by sheets of `entries`, in one transaction conditioned on the
    /// fence and on every old sheet being unchanged. `false`: one changed meanwhile.
    async fn replace_sheets(
        &self,
        bucket: u32,
        old: &[&StoredSheet],
        entries: Vec<Entry>,
        writer: &mut LedgerWriter,
    ) -> Result<bool, RegistryError> {
        let mut compares = writer.compares();
        let mut ops = Vec::new();
        for s in old {
            compares.push(Compare::mod_revision(
                s.key.as_str(),
                CompareOp::Equal,
                s.mod_revision,
            ));
            ops.push(TxnOp::delete(s.key.as_str(), None));
        }
        for (_, sheet) in finals::sheets(entries, entry_bucket, entry_size) {
            writer.seq += 1;
            let key = self.keys.finals_sheet(bucket, writer.token, writer.seq);
            ops.push(TxnOp::put(key, encode(&sheet), None));
        }
        self.fenced_txn(Txn::new().when(compares).and_then(ops), writer)
            .await
    }

    /// The mod revisions of the state keys of the tasks in `sheets` (those that have one).
    async fn state_revisions(
        &self,
        sheets: &[StoredSheet],
    ) -> Result<HashMap<(String, String), i64>, RegistryError> {
        let tasks: HashSet<(&str, &str)> = sheets
            .iter()
            .flat_map(|s| s.entries.iter().map(|e| (e.ns.as_str(), e.id.as_str())))
            .collect();
        let tasks: Vec<(&str, &str)> = tasks.into_iter().collect();
        let mut out = HashMap::new();
        for chunk in tasks.chunks(MAX_TXN_OPS) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(ns, id)| {
                    let opts = GetOptions::new().with_keys_only();
                    TxnOp::get(self.keys.state(ns, id), Some(opts))
                })
                .collect();
            let resp = self
                .txn("state revisions", Txn::new().and_then(ops))
                .await?;
            for op in resp.op_responses() {
                if let etcd_client::TxnOpResponse::Get(get) = op {
                    for kv in get.kvs() {
                        let key = String::from_utf8_lossy(kv.key()).into_owned();
                        out.insert(self.state_key_parts(&key), kv.mod_revision());
                    }
                }
            }
        }
        Ok(out)
    }
}

fn entry_bucket(e: &Entry) -> u32 {
    finals::bucket_of_task(&e.ns, &e.id)
}

/// About the bytes an entry takes in its sheet.
fn entry_size(e: &Entry) -> usize {
    new_entry_size(&e.ns, &e.id, &e.state)
}

fn new_entry_size(ns: &str, id: &str, state: &TaskState) -> usize {
    // A state's fixed fields are about 300 bytes of JSON; its one free-text field is added.
    64 + ns.len() + id.len() + 300 + state.last_error.as_ref().map_or(0, String::len)
}
