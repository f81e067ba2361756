//! Why a takeover failed: the one error type of the role.
//!
//! The role never ends on an error; a failed takeover is logged with this error and tried
//! again after a backoff. The split that matters to an operator is [`Error::is_permanent`]:
//! a refused fence stays refused until someone reseats it, everything else may pass by
//! itself.

use ax_election::ElectionError;
use ax_queue::QueueError;
use ax_registry::RegistryError;

/// Why a takeover (or a campaign) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// etcd refused or timed out while the term loaded what it starts from.
    #[error("{what}: {source}")]
    Registry {
        /// What the term was doing.
        what: &'static str,
        /// etcd's error.
        source: RegistryError,
    },
    /// Redis refused or timed out while the term raised a fence.
    #[error("cannot raise the fence of queue {queue}: {source}")]
    Fence {
        /// The queue.
        queue: String,
        /// Redis's error.
        source: QueueError,
    },
    /// A queue's fence refuses this leader's token; the text says how to reseat it.
    #[error("{0}")]
    FenceRefused(String),
    /// The paused namespaces could not be read in time.
    #[error("cannot read the paused namespaces")]
    PausedUnknown,
    /// The key was lost before the takeover was done.
    #[error("authority lost while taking over")]
    AuthorityLost,
    /// The campaign for the leader key failed.
    #[error("campaign failed: {0}")]
    Campaign(#[from] ElectionError),
}

impl Error {
    /// Whether trying again cannot help until an operator acts.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Error::FenceRefused(_))
    }
}
