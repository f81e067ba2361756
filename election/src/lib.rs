//! Leader election, fencing tokens, task locks and instance records on etcd leases.
//!
//! One replica of the engine acts as leader at a time. It holds `{prefix}/leader`, a key
//! attached to a lease it renews every TTL/3 ([`Candidate::campaign`]). The key's create
//! revision is the [`Leadership::fencing_token`]: it only grows, so anything a leader writes
//! can carry it and a store can refuse writes from an older leader.
//!
//! The rule that keeps two leaders from acting at once: a holder stops trusting its lease
//! well before etcd could expire it. [`Leadership::lost`] fires when a renewal fails, the
//! lease is gone, the key is deleted or taken over, or no renewal succeeded within
//! TTL - TTL/3 of the last one sent; [`Leadership::is_valid`] also checks a monotonic
//! deadline directly, which matters after the process was paused (SIGSTOP, a long GC-like
//! stall, a frozen VM): timers are then overdue and the code that resumes first may run
//! before the keep-alive task notices. Check `is_valid()` right before every leader action.
//!
//! Every lease here is a [`Session`]: one lease kept alive in the background, on which keys
//! are created only if absent and released. Leadership is the leader key on a session; a
//! per-task lock ([`TaskLock`]) is a key under `{prefix}/locks/` on a session (one session
//! carries any number of locks); an instance record ([`register_instance`]) is a key on its
//! own session. All share the guarantee above.
//!
//! Leadership, a task lock and a shard's ownership ([`ShardGuard`]) are each a key created on
//! a session only if absent: a [`KeyHold`], which carries the key's fencing token and its
//! validity (`lost()`, `is_valid()`, `loss_reason()`) once for all three. Each exposes it as
//! `hold()`, so code acting under whichever key it was given checks it the same way.

mod campaign;
mod config;
mod error;
mod hold;
mod instances;
mod key_hold;
mod keys;
mod lock;
mod observe;
mod roster;
mod session;
mod shards;
mod validity;

pub use campaign::{Candidate, Leadership};
pub use config::{ElectionConfig, DEFAULT_PREFIX, DEFAULT_TTL, MIN_TTL};
pub use error::ElectionError;
pub use instances::{
    keep_registered, list_instances, list_instances_with_liveness, register_instance,
    InstanceLiveness, InstanceRecord, InstanceRegistration, RosterEntry,
};
pub use key_hold::KeyHold;
pub use keys::{instance_key, leader_key, lock_key, shard_owner_key};
pub use lock::{LockGuard, TaskLock};
pub use observe::{current_leader, observe, LeaderInfo, LeaderObserver};
pub use roster::{list_roster, sweep_roster, SweepReport, ROSTER_KEEP, ROSTER_MAX};
pub use session::Session;
pub use shards::{
    list_shard_owners, own_shards, ShardEvent, ShardGuard, ShardOwner, ShardOwnerRecord,
    ShardSettings,
};
pub use validity::LossReason;
