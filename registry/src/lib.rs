//! The etcd task registry: where users register tasks and the engine keeps their state.
//!
//! Layout (the user-facing contract, documented in `docs/etcd-layout.md`), built in
//! [`keys`]: task specs at `{prefix}/tasks/{namespace}/{id}`, runtime state at
//! `{prefix}/state/{namespace}/{id}`, run-now requests at
//! `{prefix}/triggers/{namespace}/{id}/{execution_id}` ([`TriggerRequest`]), plus the
//! election's keys.
//!
//! [`Registry`] registers with compare-and-swap (a higher spec `version` replaces, an equal
//! or lower one is refused), updates with optimistic concurrency on the key's mod revision,
//! and reads and writes state records. [`Registry::watch`] lists every task and then
//! follows changes as a stream of [`RegistryEvent`]s that survives connection loss, etcd
//! restarts and compaction without losing or repeating a change.

mod config;
mod decode;
mod error;
pub mod keys;
mod namespaces;
mod registry;
mod trigger;
mod watch;

pub use config::RegistryConfig;
pub use decode::{InvalidTask, StoredTask, TaskListing};
pub use error::RegistryError;
pub use keys::Keys;
pub use namespaces::NamespacePause;
pub use registry::{
    store_usage, LedgerWriter, PageCursor, RegisterOutcome, Registry, StateFence, StateListing,
    StoreUsage, StoredState, TaskPage, UndecodableState, MAX_TXN_OPS, UPDATE_ATTEMPTS,
};
pub use trigger::{PendingTrigger, TriggerRequest};
pub use watch::{RegistryEvent, TaskWatcher};
