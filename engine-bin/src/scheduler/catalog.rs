//! The registry as this replica last saw it: what a takeover starts from.
//!
//! Every replica with the scheduler role keeps it, leading or not, by applying the registry
//! watch's events, so a new leader arms its dispatcher from memory instead of listing the
//! registry while nothing fires. Invalid specs are kept with their errors (the leader writes
//! them to the task's state); the invalid count is kept as entries change, since counting on
//! every event made loading N tasks cost O(N^2).

use std::collections::HashMap;
use std::sync::Arc;

use ax_registry::RegistryEvent;
use ax_scheduler_core::{FieldError, TaskKey, TaskSpec};
use tracing::{debug, warn};

use super::LeaderSettings;
use crate::metrics::{Metrics, BACKEND_ETCD};

#[derive(Clone, Debug)]
pub(super) enum CatalogEntry {
    Valid {
        spec: Arc<TaskSpec>,
        revision: i64,
    },
    Invalid {
        errors: Vec<FieldError>,
        revision: i64,
    },
}

/// The registry as last seen: what a takeover starts from.
#[derive(Default)]
pub(super) struct Catalog {
    pub(super) entries: HashMap<TaskKey, CatalogEntry>,
    /// How many entries are invalid, kept as entries change: counting them on every event
    /// made loading N tasks cost O(N^2) (minutes at 100 000 tasks).
    pub(super) invalid: usize,
    pub(super) synced: bool,
}

fn in_scope(settings: &LeaderSettings, namespace: &str) -> bool {
    settings.namespaces.is_empty() || settings.namespaces.iter().any(|n| n == namespace)
}

/// Applies a registry event to the catalog; returns the key and entry it changed (`None`
/// entry for a delete), or nothing for bookkeeping events.
pub(super) fn apply_event(
    settings: &LeaderSettings,
    catalog: &mut Catalog,
    metrics: &Metrics,
    event: RegistryEvent,
) -> Option<(TaskKey, Option<CatalogEntry>)> {
    let changed = match event {
        RegistryEvent::Put {
            namespace,
            id,
            spec,
            mod_revision,
            ..
        } => {
            let key = TaskKey::new(namespace, id);
            let entry = CatalogEntry::Valid {
                spec: Arc::new(spec),
                revision: mod_revision,
            };
            Some((key, Some(entry)))
        }
        RegistryEvent::Invalid {
            namespace,
            id,
            errors,
            mod_revision,
            ..
        } => {
            warn!(
                task_id = %format!("{namespace}/{id}"),
                errors = %errors,
                "invalid task spec; the task is INVALID until it is fixed"
            );
            let key = TaskKey::new(namespace, id);
            let entry = CatalogEntry::Invalid {
                errors: errors.errors,
                revision: mod_revision,
            };
            Some((key, Some(entry)))
        }
        RegistryEvent::Delete { namespace, id, .. } => Some((TaskKey::new(namespace, id), None)),
        RegistryEvent::Synced { revision } => {
            debug!(revision, tasks = catalog.entries.len(), "registry synced");
            catalog.synced = true;
            None
        }
        RegistryEvent::Reconnecting { error, attempt } => {
            metrics
                .backend_errors_total
                .with_label_values(&[BACKEND_ETCD])
                .inc();
            warn!(%error, attempt, "registry watch reconnecting");
            None
        }
    };
    let (key, entry) = changed?;
    if !in_scope(settings, &key.namespace) {
        return None;
    }
    let old = match &entry {
        Some(e) => catalog.entries.insert(key.clone(), e.clone()),
        None => catalog.entries.remove(&key),
    };
    let is_invalid = |e: &CatalogEntry| matches!(e, CatalogEntry::Invalid { .. });
    if old.as_ref().is_some_and(is_invalid) {
        catalog.invalid -= 1;
    }
    if entry.as_ref().is_some_and(is_invalid) {
        catalog.invalid += 1;
    }
    metrics
        .invalid_specs
        .set(i64::try_from(catalog.invalid).unwrap_or(i64::MAX));
    Some((key, entry))
}
