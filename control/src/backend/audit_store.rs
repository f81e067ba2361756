//! The audit log in etcd: one key per record, `{prefix}/audit/{at:013}-{random}`, written
//! by the API, the CLI and the leader (for changes written to etcd without ax).
//!
//! Keys sort by time, so a page newest first is one descending range read and retention is
//! one range delete of the keys before the cutoff. That delete rides in the same
//! transaction as each new record, so a log nobody writes to does not grow and needs no loop
//! of its own. A record younger than the retention is never deleted, whatever the volume:
//! otherwise a caller could push the record of its own change out with a flood of cheap
//! ones. The count (a count-only read after each write) is watched instead: past
//! `audit.max_records` the store sets `scheduler_audit_over_capacity` and warns, and a change
//! that must be audited is refused (503, [`AuditStore::check_room`]) until records expire or
//! the limit is raised: the log is bounded in count, and each record in bytes
//! ([`MAX_RECORD_BYTES`]: a larger detail is replaced by its size and hash), so no caller can
//! fill etcd through it.
//!
//! The count alone bounds the bytes only loosely (100 000 records of 16 KiB are 1.6 GB, most
//! of a default etcd quota), and etcd cannot sum the sizes of a range. So the log is also
//! bounded by `audit.max_bytes`, measured by size class: a record of at most
//! [`SMALL_RECORD_BYTES`] counts that much, a larger one [`MAX_RECORD_BYTES`], and each larger
//! one has an empty marker key under `{prefix}/audit-large/` with the same suffix, written
//! and deleted with it; the same count-only read, over both prefixes in one transaction, gives
//! an upper bound of the bytes.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetOptions, SortOrder, SortTarget, Txn, TxnOp};

use super::errors;
use crate::api::{ApiError, MAX_LIST_LIMIT};
use crate::audit::{AuditPage, AuditQuery, AuditRecord, DEFAULT_AUDIT_PAGE};

pub use crate::audit::{MAX_RECORD_BYTES, SMALL_RECORD_BYTES};

/// What the store last learned of its count: not counted yet, under the limit, over it.
const ROOM_UNKNOWN: u8 = 0;
const ROOM_UNDER: u8 = 1;
const ROOM_OVER: u8 = 2;

/// How big the log is: its records, and an upper bound of their bytes by size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LogSize {
    records: usize,
    bytes: u64,
}

impl LogSize {
    /// `records` records, `large` of them larger than [`SMALL_RECORD_BYTES`].
    fn of(records: u64, large: u64) -> Self {
        let large = large.min(records);
        let (small_b, large_b) = (SMALL_RECORD_BYTES as u64, MAX_RECORD_BYTES as u64);
        LogSize {
            records: usize::try_from(records).unwrap_or(usize::MAX),
            bytes: (records - large)
                .saturating_mul(small_b)
                .saturating_add(large.saturating_mul(large_b)),
        }
    }
}

/// The audit log's records in etcd.
#[derive(Clone)]
pub struct AuditStore {
    etcd: Client,
    prefix: String,
    /// Where the markers of the records larger than [`SMALL_RECORD_BYTES`] go.
    large_prefix: String,
    retention: Duration,
    max_records: usize,
    max_bytes: u64,
    request_timeout: Duration,
    /// Told whether the log is over its count after each write (a replica exports it as
    /// `scheduler_audit_over_capacity`); the flag beside it makes the warning once a crossing.
    over_capacity: Option<CapacityWatch>,
    /// [`ROOM_UNKNOWN`], [`ROOM_UNDER`] or [`ROOM_OVER`]: set by each count, shared by clones.
    room: Arc<AtomicU8>,
}

/// Whether the log is over `audit.max_records`, told to whoever watches it after each write.
/// Clones share their state: a replica gives one to each of its stores (the API's and the
/// leader's), so a crossing is warned of once, as one gauge shows it.
#[derive(Clone)]
pub struct CapacityWatch {
    report: Arc<dyn Fn(bool) + Send + Sync>,
    over: Arc<AtomicBool>,
}

impl CapacityWatch {
    /// A watch telling `report` whether the log is over its count.
    pub fn new(report: impl Fn(bool) + Send + Sync + 'static) -> Self {
        CapacityWatch {
            report: Arc::new(report),
            over: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl AuditStore {
    /// The log under `{prefix}/audit/`, keeping records for `retention`, at most
    /// `max_records` of them, in at most `max_bytes` (by size class).
    pub fn new(
        etcd: Client,
        prefix: &str,
        retention: Duration,
        (max_records, max_bytes): (usize, u64),
        request_timeout: Duration,
    ) -> Self {
        AuditStore {
            etcd,
            prefix: format!("{prefix}/audit/"),
            large_prefix: format!("{prefix}/audit-large/"),
            retention,
            max_records: max_records.max(1),
            max_bytes,
            request_timeout,
            over_capacity: None,
            room: Arc::new(AtomicU8::new(ROOM_UNKNOWN)),
        }
    }

    /// The same log, telling `watch` after each write whether it is over its count.
    pub fn with_capacity_watch(mut self, watch: CapacityWatch) -> Self {
        self.over_capacity = Some(watch);
        self
    }

    /// The log as `config` sets it up.
    pub fn of(etcd: Client, config: &crate::config::ClusterConfig) -> Self {
        AuditStore::new(
            etcd,
            &config.etcd.prefix,
            config.audit.retention,
            (config.audit.max_records, config.audit.max_bytes),
            config.etcd.timeout,
        )
    }

    /// Refuses a change that must be audited while the log is over `audit.max_records`
    /// (503): counted once by a fresh store, then after each write; while over, each call
    /// counts again, so the refusals end as soon as records expire.
    pub async fn check_room(&self) -> Result<(), ApiError> {
        if self.room.load(Ordering::Relaxed) == ROOM_UNDER {
            return Ok(());
        }
        let size = self.check_capacity().await?;
        if !self.is_over(size) {
            return Ok(());
        }
        Err(ApiError::Unavailable(format!(
            "the audit log holds {} records in up to {} bytes, more than audit.max_records ({}) \
             or audit.max_bytes ({}), all younger than audit.retention ({}); changes are \
             refused until records expire: raise the limit or shorten audit.retention, and \
             find who writes so much",
            size.records,
            size.bytes,
            self.max_records,
            self.max_bytes,
            humantime::format_duration(self.retention)
        )))
    }

    fn is_over(&self, size: LogSize) -> bool {
        size.records > self.max_records || size.bytes > self.max_bytes
    }

    /// Writes `record`, deletes the records older than the retention, and checks the count.
    pub async fn write(&self, record: &AuditRecord) -> Result<(), ApiError> {
        let prefix = self.prefix.clone();
        let suffix: u32 = rand::random();
        let name = format!("{:013}-{suffix:08x}", record.at.0.max(0));
        let value = encode_bounded(record)?;
        let retention_ms = i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX);
        let cutoff = format!("{:013}", record.at.0.saturating_sub(retention_ms).max(0));
        let large = &self.large_prefix;
        let mut ops = vec![
            TxnOp::delete(
                prefix.clone(),
                Some(etcd_client::DeleteOptions::new().with_range(format!("{prefix}{cutoff}"))),
            ),
            TxnOp::delete(
                large.clone(),
                Some(etcd_client::DeleteOptions::new().with_range(format!("{large}{cutoff}"))),
            ),
        ];
        if value.len() > SMALL_RECORD_BYTES {
            ops.push(TxnOp::put(format!("{large}{name}"), "", None));
        }
        ops.push(TxnOp::put(format!("{prefix}{name}"), value, None));
        let txn = Txn::new().and_then(ops);
        let mut kv = self.etcd.kv_client();
        tokio::time::timeout(self.request_timeout, kv.txn(txn))
            .await
            .map_err(|_| ApiError::Unavailable("etcd audit write timed out".into()))?
            .map_err(|e| errors::etcd("audit write", e))?;
        self.check_capacity().await.map(|_| ())
    }

    /// Counts the records (and the larger ones) and says when they are more than
    /// `max_records` or take more than `max_bytes`. None is deleted for it: every record is
    /// younger than the retention (the older ones went with the write), and a young record
    /// is kept whatever the volume.
    async fn check_capacity(&self) -> Result<LogSize, ApiError> {
        let count_only = || Some(GetOptions::new().with_prefix().with_count_only());
        let txn = Txn::new().and_then([
            TxnOp::get(self.prefix.clone(), count_only()),
            TxnOp::get(self.large_prefix.clone(), count_only()),
        ]);
        let mut kv = self.etcd.kv_client();
        let counted = tokio::time::timeout(self.request_timeout, kv.txn(txn))
            .await
            .map_err(|_| ApiError::Unavailable("etcd audit count timed out".into()))?
            .map_err(|e| errors::etcd("audit count", e))?;
        let counts: Vec<u64> = counted
            .op_responses()
            .into_iter()
            .map(|r| match r {
                etcd_client::TxnOpResponse::Get(g) => u64::try_from(g.count()).unwrap_or(0),
                _ => 0,
            })
            .collect();
        let size = LogSize::of(
            counts.first().copied().unwrap_or(0),
            counts.get(1).copied().unwrap_or(0),
        );
        let count = size.records;
        let over = self.is_over(size);
        let room = if over { ROOM_OVER } else { ROOM_UNDER };
        self.room.store(room, Ordering::Relaxed);
        if let Some(watch) = &self.over_capacity {
            if over && !watch.over.load(Ordering::Relaxed) {
                tracing::warn!(
                    records = count,
                    bytes = size.bytes,
                    max_records = self.max_records,
                    max_bytes = self.max_bytes,
                    retention = %humantime::format_duration(self.retention),
                    "the audit log holds more records than audit.max_records or bytes than \
                     audit.max_bytes, all younger than audit.retention, so none is deleted; \
                     shorten the retention or find who writes so much"
                );
            }
            watch.over.store(over, Ordering::Relaxed);
            (watch.report)(over);
        } else if over {
            tracing::warn!(
                records = count,
                bytes = size.bytes,
                max_records = self.max_records,
                max_bytes = self.max_bytes,
                "the audit log holds more records than audit.max_records or bytes than \
                 audit.max_bytes; none younger than audit.retention is deleted"
            );
        }
        Ok(size)
    }

    /// A page of records, newest first.
    pub async fn page(&self, query: &AuditQuery) -> Result<AuditPage, ApiError> {
        let limit = query.limit.unwrap_or(DEFAULT_AUDIT_PAGE);
        if limit == 0 || limit > MAX_LIST_LIMIT {
            return Err(ApiError::invalid(format!(
                "limit: {limit} is outside 1 to {MAX_LIST_LIMIT}"
            )));
        }
        let prefix = self.prefix.clone();
        let start = match query.since {
            Some(t) => format!("{prefix}{:013}", t.0.max(0)),
            None => prefix.clone(),
        };
        // Continue below the last key shown; the first page ends at the prefix's end.
        let end = match &query.continue_token {
            Some(last) if last.starts_with(&prefix) => last.clone(),
            Some(_) => return Err(ApiError::invalid("continue: not a token of this listing")),
            None => prefix_end(&prefix),
        };
        let mut items = Vec::new();
        let mut range_end = end;
        let mut more = true;
        // Reads go on until `limit` records of the actor are found or the range is done,
        // each bounded, and so is the whole scan (etcd cannot filter by value): a rare
        // actor gets a continue token rather than a read of the whole log.
        for _ in 0..MAX_READS {
            let options = GetOptions::new()
                .with_range(range_end.clone())
                .with_sort(SortTarget::Key, SortOrder::Descend)
                .with_limit(i64::try_from(limit).unwrap_or(1000));
            // A page is bounded in records, not bytes (a spec's diff, a burst of direct
            // writes' task names), so the client takes responses above its default 4 MiB.
            let mut kv = self.etcd.kv_client().max_decoding_message_size(usize::MAX);
            let resp =
                tokio::time::timeout(self.request_timeout, kv.get(start.clone(), Some(options)))
                    .await
                    .map_err(|_| ApiError::Unavailable("etcd audit read timed out".into()))?
                    .map_err(|e| errors::etcd("audit read", e))?;
            let kvs = resp.kvs();
            let mut read = 0;
            for kv in kvs {
                read += 1;
                range_end = String::from_utf8_lossy(kv.key()).into_owned();
                let Ok(record) = serde_json::from_slice::<AuditRecord>(kv.value()) else {
                    continue;
                };
                if !query.admits_actor(&record.actor) {
                    continue;
                }
                items.push(record);
                if items.len() == limit {
                    break;
                }
            }
            more = resp.more() || read < kvs.len();
            if items.len() == limit || !more {
                break;
            }
        }
        Ok(AuditPage {
            continue_token: more.then_some(range_end),
            items,
        })
    }
}

/// Range reads one page request makes at most.
const MAX_READS: usize = 10;

/// The smallest key after every key starting with `prefix`.
fn prefix_end(prefix: &str) -> String {
    let mut end = prefix.as_bytes().to_vec();
    // The prefix ends in `/`, so its last byte can be incremented.
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    String::from_utf8_lossy(&end).into_owned()
}

/// The record as JSON, at most [`MAX_RECORD_BYTES`]: past it the detail is replaced by its
/// size and SHA-256, which still tells two changes apart.
fn encode_bounded(record: &AuditRecord) -> Result<Vec<u8>, ApiError> {
    let encode = |r: &AuditRecord| {
        serde_json::to_vec(r)
            .map_err(|e| ApiError::Internal(format!("cannot encode an audit record: {e}")))
    };
    let value = encode(record)?;
    if value.len() <= MAX_RECORD_BYTES {
        return Ok(value);
    }
    let detail = record
        .detail
        .as_ref()
        .map(|d| serde_json::to_vec(d).unwrap_or_default())
        .unwrap_or_default();
    let mut smaller = record.clone();
    smaller.detail = Some(serde_json::json!({
        "omitted": format!("a detail of {} bytes, over the record's {MAX_RECORD_BYTES}-byte limit", detail.len()),
        "bytes": detail.len(),
        "sha256": crate::operations::sha256_hex(&detail),
    }));
    // The other fields are bounded by the names they hold (an actor, an action, a target).
    encode(&smaller)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_log_s_bytes_are_bounded_by_its_size_classes() {
        let small = SMALL_RECORD_BYTES as u64;
        let large = MAX_RECORD_BYTES as u64;
        assert_eq!(LogSize::of(0, 0).bytes, 0);
        assert_eq!(LogSize::of(10, 0).bytes, 10 * small);
        assert_eq!(LogSize::of(10, 3).bytes, 7 * small + 3 * large);
        // More markers than records (a record deleted by hand): every record counted large.
        assert_eq!(LogSize::of(2, 5).bytes, 2 * large);
        assert_eq!(LogSize::of(u64::MAX, u64::MAX).bytes, u64::MAX);
    }
    use super::*;
    use ax_scheduler_core::UtcMillis;

    fn record(detail: serde_json::Value) -> AuditRecord {
        AuditRecord {
            at: UtcMillis(1),
            actor: "ops".into(),
            via: "api".into(),
            action: "task.put".into(),
            target: "ns/t".into(),
            detail: Some(detail),
            revision: Some(7),
        }
    }

    #[test]
    fn a_record_is_bounded_in_bytes_and_keeps_a_hash_of_what_it_left_out() {
        let small = record(serde_json::json!({"diff": "x"}));
        assert_eq!(
            encode_bounded(&small).unwrap(),
            serde_json::to_vec(&small).unwrap()
        );
        let huge = record(serde_json::json!({"diff": "y".repeat(10 * MAX_RECORD_BYTES)}));
        let bytes = encode_bounded(&huge).unwrap();
        assert!(bytes.len() <= MAX_RECORD_BYTES, "{}", bytes.len());
        let back: AuditRecord = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.action, "task.put");
        assert_eq!(back.revision, Some(7));
        let detail = back.detail.unwrap();
        assert!(detail["bytes"].as_u64().unwrap() > 10 * MAX_RECORD_BYTES as u64);
        assert_eq!(detail["sha256"].as_str().unwrap().len(), 64);
    }
}
