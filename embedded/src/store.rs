//! The durable store: one redb file holding the persisted jobs, their dispatcher states, the
//! executions in flight and the dead letters, written by one thread with group commit.
//!
//! Why this shape: a submit must not return before its job is on disk, and one fsync per
//! submit would cap a kernel at a few hundred submits a second. So every change goes, in the
//! order the engine made it, through one channel to a writer thread that takes everything
//! waiting, writes it in one transaction, commits it durably once, and only then answers the
//! submits in that batch. Changes nobody waits for (a state, an attempt started) ride in the
//! same batches; their order with the acknowledged ones is the channel's.
//!
//! What is kept is what a restart needs and nothing more: a job's [`TaskSpec`] (its schedule,
//! options, handler name and payload), the [`TaskState`] the dispatcher last wrote for it
//! (so the restart plans missed fires from where it was), each execution in flight with its
//! attempt (so what was running runs again, at least once) and the dead letters. The file
//! opens with a format mark in its own table: a redb file of some other program, or one that
//! is not redb at all, is refused with its path instead of read as jobs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use ax_scheduler_core::{ExecutionId, TaskSpec, TaskState, UtcMillis};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::dead::DeadLetter;
use crate::error::{EmbeddedError, Result};
use crate::job_id::JobId;

/// The store's format mark, in [`META`] under `format`.
const FORMAT: &str = "ax-embedded/1";
const META: TableDefinition<&str, &str> = TableDefinition::new("ax_embedded_meta");
const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("jobs");
const STATES: TableDefinition<u64, &[u8]> = TableDefinition::new("states");
/// Executions in flight, keyed by job and execution id.
const RUNNING: TableDefinition<(u64, u128), &[u8]> = TableDefinition::new("running");
const DEAD: TableDefinition<u64, &[u8]> = TableDefinition::new("dead");

/// Most changes one transaction takes: a bound on a batch's latency under a flood.
const MAX_BATCH: usize = 16_384;

/// How long a busy writer waits for more changes before it commits. The submitters it just
/// answered come back within microseconds; without the wait, a writer taking only what is
/// already queued splits them into two alternating half batches, each paying a whole
/// fsync. It stops waiting as soon as as many submits as it last answered are in; an idle
/// writer (the last batch had one waiter or none) commits at once.
const LINGER: Duration = Duration::from_micros(200);

/// An execution in flight as stored: its next attempt, and when it is due if it waits for a
/// retry.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct StoredAttempt {
    pub(crate) execution: ExecutionId,
    pub(crate) attempt: u32,
    pub(crate) fire_at: UtcMillis,
    #[serde(default)]
    pub(crate) first_started: Option<UtcMillis>,
    #[serde(default)]
    pub(crate) retry_at: Option<UtcMillis>,
}

/// One change to the file.
#[derive(Debug)]
pub(crate) enum Op {
    /// Encoded by the writer, off the submitter's path (a spec is shared, never changed in
    /// place: a change makes a new one).
    PutJob(JobId, Arc<TaskSpec>),
    /// The job and everything of it (state, executions, dead letter).
    DeleteJob(JobId),
    PutState(JobId, Box<TaskState>),
    PutRunning(JobId, StoredAttempt),
    DeleteRunning(JobId, ExecutionId),
    PutDead(JobId, Vec<u8>),
    DeleteDead(JobId),
}

struct Batch {
    ops: Vec<Op>,
    ack: Option<oneshot::Sender<Result<(), String>>>,
}

/// The engine's end of the writer: changes go in, in order.
#[derive(Debug)]
pub(crate) struct StoreHandle {
    tx: mpsc::Sender<Batch>,
    path: PathBuf,
    writer: std::thread::JoinHandle<()>,
}

/// What a restart finds in the file.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub(crate) jobs: Vec<(JobId, TaskSpec)>,
    pub(crate) states: HashMap<JobId, TaskState>,
    pub(crate) running: Vec<(JobId, StoredAttempt)>,
    pub(crate) dead: Vec<DeadLetter>,
    /// Jobs left out because their options or schedule are out of bounds.
    pub(crate) skipped: usize,
}

/// The checks a submitted job passes, for a job read back: its options and its schedule.
fn check_stored(spec: &TaskSpec) -> std::result::Result<(), ax_scheduler_core::ValidationErrors> {
    spec.options().check()?;
    spec.schedule.compile().map(|_| ()).map_err(|e| match e {
        ax_scheduler_core::CoreError::Invalid(errors) => errors,
        other => vec![ax_scheduler_core::FieldError::new(
            "schedule",
            other.to_string(),
        )]
        .into(),
    })
}

/// An error of the store's file, naming it.
fn store_error(path: &Path, retryable: bool, e: impl std::fmt::Display) -> EmbeddedError {
    EmbeddedError::Store {
        path: path.to_path_buf(),
        reason: e.to_string(),
        retryable,
    }
}

/// Opens (or creates) the store at `path` and reads what it holds.
pub(crate) fn open(path: &Path) -> Result<(Database, Loaded)> {
    create_private(path).map_err(|e| store_error(path, true, format!("cannot create: {e}")))?;
    let db = Database::builder()
        .set_check_integrity_on_open(true)
        .create(path)
        .map_err(|e| store_error(path, false, format!("not a usable store file: {e}")))?;
    check_format(&db, path)?;
    let loaded = load(&db).map_err(|e| store_error(path, false, e))?;
    Ok((db, loaded))
}

/// Creates the file readable by its owner only, if it is not there: jobs' payloads are the
/// application's data, and redb would create it with the process umask (often 0644).
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Marks a new file as this crate's store, or checks the mark of an existing one.
fn check_format(db: &Database, path: &Path) -> Result<()> {
    let txn = db.begin_write().map_err(|e| store_error(path, true, e))?;
    let tables = txn.list_tables().map_err(|e| store_error(path, false, e))?;
    let names: Vec<String> = tables.map(|t| t.name().to_owned()).collect();
    {
        let mut meta = txn
            .open_table(META)
            .map_err(|e| store_error(path, false, e))?;
        let found = meta
            .get("format")
            .map_err(|e| store_error(path, false, e))?
            .map(|v| v.value().to_owned());
        match found {
            Some(f) if f == FORMAT => {}
            Some(f) => {
                return Err(store_error(
                    path,
                    false,
                    format!("store format `{f}`, this build reads `{FORMAT}`"),
                ));
            }
            None if names.is_empty() => {
                meta.insert("format", FORMAT)
                    .map_err(|e| store_error(path, false, e))?;
            }
            None => {
                return Err(store_error(
                    path,
                    false,
                    format!("a redb file of another program (tables {names:?}), not an ax-embedded store"),
                ));
            }
        }
    }
    txn.commit().map_err(|e| store_error(path, true, e))
}

fn load(db: &Database) -> std::result::Result<Loaded, String> {
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let mut loaded = Loaded::default();
    let text = |e: redb::StorageError| e.to_string();
    if let Ok(table) = txn.open_table(JOBS) {
        for row in table.iter().map_err(text)? {
            let (k, v) = row.map_err(text)?;
            let spec: TaskSpec =
                serde_json::from_slice(v.value()).map_err(|e| format!("job {}: {e}", k.value()))?;
            if let Err(problems) = check_stored(&spec) {
                // A row the kernel would not accept from a caller (another version's bounds,
                // an edited file) is left out: one bad job must not stop the rest.
                tracing::warn!(job = k.value(), %problems, "stored job out of bounds; skipped");
                loaded.skipped += 1;
                continue;
            }
            loaded.jobs.push((JobId(k.value()), spec));
        }
    }
    if let Ok(table) = txn.open_table(STATES) {
        for row in table.iter().map_err(text)? {
            let (k, v) = row.map_err(text)?;
            let state: TaskState = serde_json::from_slice(v.value())
                .map_err(|e| format!("state {}: {e}", k.value()))?;
            loaded.states.insert(JobId(k.value()), state);
        }
    }
    if let Ok(table) = txn.open_table(RUNNING) {
        for row in table.iter().map_err(text)? {
            let (k, v) = row.map_err(text)?;
            let (job, _) = k.value();
            let attempt: StoredAttempt = serde_json::from_slice(v.value())
                .map_err(|e| format!("execution of job {job}: {e}"))?;
            loaded.running.push((JobId(job), attempt));
        }
    }
    if let Ok(table) = txn.open_table(DEAD) {
        for row in table.iter().map_err(text)? {
            let (k, v) = row.map_err(text)?;
            let letter: DeadLetter = serde_json::from_slice(v.value())
                .map_err(|e| format!("dead letter {}: {e}", k.value()))?;
            loaded.dead.push(letter);
        }
    }
    Ok(loaded)
}

impl StoreHandle {
    /// Starts the writer thread on `db`.
    pub(crate) fn start(db: Database, path: &Path) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let shown = path.to_path_buf();
        let file = path.to_path_buf();
        let runtime = tokio::runtime::Handle::try_current().ok();
        let writer = std::thread::Builder::new()
            .name("ax-embedded-store".into())
            .spawn(move || write_loop(Some(db), &file, rx, runtime.as_ref()))
            .map_err(|e| store_error(&shown, true, format!("no writer thread: {e}")))?;
        Ok(StoreHandle {
            tx,
            path: path.to_path_buf(),
            writer,
        })
    }

    /// Lets the writer finish what it was sent and close the file (blocks until it has).
    pub(crate) fn close(self) {
        drop(self.tx);
        if self.writer.join().is_err() {
            tracing::error!(path = %self.path.display(), "the store's writer panicked");
        }
    }

    /// Sends `ops`; the answer says when they are on disk (drop it to not wait).
    pub(crate) fn send(&self, ops: Vec<Op>) -> oneshot::Receiver<Result<(), String>> {
        let (ack, answer) = oneshot::channel();
        let batch = Batch {
            ops,
            ack: Some(ack),
        };
        if let Err(mpsc::SendError(batch)) = self.tx.send(batch) {
            if let Some(ack) = batch.ack {
                let _ = ack.send(Err("the store's writer stopped".to_owned()));
            }
        }
        answer
    }

    /// The store's file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// The writer: everything waiting becomes one durable transaction, then its waiters are
/// answered. Ends when the kernel closes its handle, and closes the file.
///
/// A write that fails (a full disk) fails every submit of its batch, and its changes are
/// kept to be written first by the next transaction, so the file still receives every
/// change in the engine's order: the failed submits' own deletions follow them. redb refuses
/// every write after an I/O error until the file is opened again, so the writer drops the
/// database and reopens it before its next transaction; once space is freed, writes succeed
/// again without a restart.
fn write_loop(
    mut db: Option<Database>,
    path: &Path,
    rx: mpsc::Receiver<Batch>,
    runtime: Option<&tokio::runtime::Handle>,
) {
    let mut expect = 0;
    let mut retained: Vec<Op> = Vec::new();
    while let Ok(first) = rx.recv() {
        let (batches, count) = gather(&rx, first, expect);
        let result = commit(&mut db, path, &retained, &batches);
        if let Err(e) = &result {
            tracing::error!(error = %e, changes = count + retained.len(), "store write failed");
        }
        let failed = result.is_err();
        if !failed {
            retained.clear();
        }
        let mut acks = Vec::with_capacity(batches.len());
        for batch in batches {
            if failed {
                retained.extend(batch.ops);
            }
            acks.extend(batch.ack.filter(|a| !a.is_closed()));
        }
        if failed {
            compact(&mut retained);
        }
        expect = if acks.len() > 1 { acks.len() } else { 0 };
        answer(acks, result, runtime);
    }
}

/// Answers the submits of a batch. Many at once are answered from a task on the kernel's
/// runtime: a worker wakes tasks of its own runtime through its local queue, where this
/// thread would wake each one through the runtime's shared queue and its lock, which costs
/// more than the batch's write.
fn answer(
    acks: Vec<oneshot::Sender<Result<(), String>>>,
    result: std::result::Result<(), String>,
    runtime: Option<&tokio::runtime::Handle>,
) {
    let send = move || {
        for ack in acks {
            let _ = ack.send(result.clone());
        }
    };
    match runtime {
        Some(rt) => drop(rt.spawn(async move { send() })),
        None => send(),
    }
}

/// Writes `retained` then `batches` in one transaction, reopening the file first if the last
/// write failed; a failure leaves it closed.
fn commit(
    db: &mut Option<Database>,
    path: &Path,
    retained: &[Op],
    batches: &[Batch],
) -> std::result::Result<(), String> {
    if db.is_none() {
        let reopened = Database::builder()
            .create(path)
            .map_err(|e| format!("reopening after a failed write: {e}"))?;
        *db = Some(reopened);
    }
    let Some(open) = db.as_ref() else {
        return Err("the store's file is closed".to_owned());
    };
    let result = write(open, retained, batches).map_err(|e| e.to_string());
    if result.is_err() {
        *db = None;
    }
    result
}

/// Drops the retained changes that a later deletion of their job makes moot, so that a long
/// outage keeps one deletion per failed submit rather than its whole job.
fn compact(retained: &mut Vec<Op>) {
    let mut deleted = std::collections::HashSet::new();
    let mut kept: Vec<Op> = Vec::with_capacity(retained.len());
    for op in std::mem::take(retained).into_iter().rev() {
        let job = match &op {
            Op::DeleteJob(id) => {
                if !deleted.insert(*id) {
                    continue;
                }
                None
            }
            Op::PutJob(id, _)
            | Op::PutState(id, _)
            | Op::PutRunning(id, _)
            | Op::DeleteRunning(id, _)
            | Op::PutDead(id, _)
            | Op::DeleteDead(id) => Some(*id),
        };
        if job.is_none_or(|id| !deleted.contains(&id)) {
            kept.push(op);
        }
    }
    kept.reverse();
    *retained = kept;
}

/// The batches of one transaction: `first` and what follows it, up to [`MAX_BATCH`]
/// changes; lingers up to [`LINGER`] for `expect` submits to be in. Returns them and their
/// number of changes.
fn gather(rx: &mpsc::Receiver<Batch>, first: Batch, expect: usize) -> (Vec<Batch>, usize) {
    let deadline = (expect > 0).then(|| Instant::now() + LINGER);
    let waits = |b: &Batch| usize::from(b.ack.as_ref().is_some_and(|a| !a.is_closed()));
    let mut count = first.ops.len();
    let mut waiters = waits(&first);
    let mut batches = vec![first];
    while count < MAX_BATCH {
        let left = match deadline {
            Some(d) if waiters < expect => d.saturating_duration_since(Instant::now()),
            _ => Duration::ZERO,
        };
        let next = if left.is_zero() {
            rx.try_recv().ok()
        } else {
            rx.recv_timeout(left).ok()
        };
        let Some(batch) = next else { break };
        count += batch.ops.len();
        waiters += waits(&batch);
        batches.push(batch);
    }
    (batches, count)
}

fn write(
    db: &Database,
    retained: &[Op],
    batches: &[Batch],
) -> std::result::Result<(), redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    {
        let mut jobs = txn.open_table(JOBS)?;
        let mut states = txn.open_table(STATES)?;
        let mut running = txn.open_table(RUNNING)?;
        let mut dead = txn.open_table(DEAD)?;
        let mut buf = Vec::new();
        for op in retained.iter().chain(batches.iter().flat_map(|b| &b.ops)) {
            match op {
                Op::PutJob(id, spec) => drop(jobs.insert(id.0, encode(&mut buf, &**spec))?),
                Op::DeleteJob(id) => {
                    jobs.remove(id.0)?;
                    states.remove(id.0)?;
                    dead.remove(id.0)?;
                    running.retain_in((id.0, 0)..=(id.0, u128::MAX), |_, _| false)?;
                }
                Op::PutState(id, state) => drop(states.insert(id.0, encode(&mut buf, &**state))?),
                Op::PutRunning(id, attempt) => {
                    let key = (id.0, attempt.execution.as_u128());
                    running.insert(key, encode(&mut buf, attempt))?;
                }
                Op::DeleteRunning(id, execution) => {
                    running.remove((id.0, execution.as_u128()))?;
                }
                Op::PutDead(id, bytes) => drop(dead.insert(id.0, bytes.as_slice())?),
                Op::DeleteDead(id) => drop(dead.remove(id.0)?),
            }
        }
    }
    txn.commit()?;
    Ok(())
}

/// `value` as JSON in `buf` (reused across a batch, so a change costs no allocation).
fn encode<'b>(buf: &'b mut Vec<u8>, value: &impl Serialize) -> &'b [u8] {
    buf.clear();
    // What is stored is plain data (strings, numbers, JSON values): it always serializes.
    if serde_json::to_writer(&mut *buf, value).is_err() {
        buf.clear();
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use ax_scheduler_core::{RetryPolicy, Schedule};
    use std::time::Duration;

    #[cfg(unix)]
    #[test]
    fn a_new_store_is_private_to_its_owner() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ax-store-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jobs.redb");
        let _ = std::fs::remove_file(&path);
        drop(open(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        // And it opens again as the store it is.
        drop(open(&path).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stored_job_out_of_bounds_is_refused_as_a_submitted_one_is() {
        let ok = TaskSpec::new(
            "embedded",
            "1",
            "h",
            Schedule::Every(Duration::from_secs(5)),
        );
        check_stored(&ok).unwrap();
        let mut huge = ok.clone();
        huge.retry = std::sync::Arc::new(RetryPolicy {
            initial_interval: Duration::from_secs(u64::MAX),
            max_interval: Duration::from_secs(u64::MAX),
            ..RetryPolicy::default()
        });
        assert!(check_stored(&huge)
            .unwrap_err()
            .has("retry.initial_interval"));
        let mut fast = ok;
        fast.schedule = Schedule::Every(Duration::from_millis(1));
        assert!(check_stored(&fast).unwrap_err().has("schedule.every"));
    }
}
