//! The registry as this replica last saw it: what a takeover starts from.
//!
//! Every replica with the scheduler role keeps it, leading or not, by applying the registry
//! watch's events, so a new leader arms its dispatcher from memory instead of listing the
//! registry while nothing fires. Invalid specs are kept with their errors (the leader writes
//! them to the task's state); the invalid count is kept as entries change, since counting on
//! every event made loading N tasks cost O(N^2). So are the tasks per queue: once synced, the
//! catalog publishes the queue names in the replica's [`QueueSet`] whenever one appears or
//! goes, for the API to read instead of every spec.

use std::collections::HashMap;
use std::sync::Arc;

use ax_registry::RegistryEvent;
use ax_scheduler_core::placement::Placement;
use ax_scheduler_core::queue_set::{QueueCounts, QueueSet};
use ax_scheduler_core::{FieldError, Interner, TaskKey, TaskSpec};
use tracing::{debug, warn};

use super::authority::Scope;
use crate::metrics::{Backend, RoleMetrics};

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

impl CatalogEntry {
    /// The entry as a term of `placement` schedules it: a task whose parent is scheduled in
    /// another shard is invalid there, with the reason (its spec alone is fine).
    pub(super) fn placed(self, placement: &Placement, key: &TaskKey) -> CatalogEntry {
        match &self {
            CatalogEntry::Valid { spec, revision } => match placement.chain_error(key, spec) {
                Some(error) => CatalogEntry::Invalid {
                    errors: vec![error],
                    revision: *revision,
                },
                None => self,
            },
            CatalogEntry::Invalid { .. } => self,
        }
    }
}

/// A registry change handed to the term whose scope holds the key (`None`: deleted).
pub(super) struct Change {
    pub(super) key: Arc<TaskKey>,
    pub(super) entry: Option<CatalogEntry>,
}

/// The catalog's entries in one term's scope, placed, as a takeover arms them.
pub(super) struct CatalogSlice {
    pub(super) entries: Vec<(Arc<TaskKey>, CatalogEntry)>,
    /// The catalog's revision when the slice was taken.
    pub(super) revision: i64,
}

impl CatalogSlice {
    /// Whether a task unknown to the slice may still appear (see
    /// [`Catalog::may_not_have_seen`]); a slice is only taken from a synced catalog.
    pub(super) fn may_not_have_seen(&self, revision: i64) -> bool {
        self.revision < revision
    }
}

/// The registry as last seen: what a takeover starts from.
#[derive(Default)]
pub(super) struct Catalog {
    /// Keyed by the same `Arc` the dispatcher holds, whose strings are the spec's own: a
    /// task's namespace and id exist once in the leader's memory.
    pub(super) entries: HashMap<Arc<TaskKey>, CatalogEntry>,
    /// Shared copies of namespaces, handlers and queues (few names, many tasks).
    interner: Interner,
    /// How many entries are invalid, kept as entries change: counting them on every event
    /// made loading N tasks cost O(N^2) (minutes at 100 000 tasks).
    pub(super) invalid: usize,
    /// How many valid entries are paused, kept the same way.
    pub(super) paused: usize,
    pub(super) synced: bool,
    /// Valid tasks per queue, kept as entries change.
    queues: QueueCounts,
    /// Where the queue names are published once synced.
    published: QueueSet,
    /// The newest etcd revision the catalog reflects: a run-now request written after it
    /// may name a task whose put the watch has not delivered yet (see
    /// [`CatalogSlice::may_not_have_seen`] and the terms' run-now path).
    pub(super) revision: i64,
}

impl Catalog {
    /// An empty catalog that publishes its queue names in `published`.
    pub(super) fn publishing(published: QueueSet) -> Catalog {
        Catalog {
            published,
            ..Catalog::default()
        }
    }

    /// Counts the queue of the entry replaced (`old`) out and that of the new one in;
    /// publishes the names when they changed and the catalog is synced.
    fn count_queues(&mut self, old: Option<&CatalogEntry>, new: Option<&CatalogEntry>) {
        let queue_of = |e: &CatalogEntry| match e {
            CatalogEntry::Valid { spec, .. } => Some(Arc::clone(&spec.queue)),
            CatalogEntry::Invalid { .. } => None,
        };
        let mut changed = false;
        if let Some(queue) = old.and_then(queue_of) {
            changed |= self.queues.remove(&queue);
        }
        if let Some(queue) = new.and_then(queue_of) {
            changed |= self.queues.add(&queue);
        }
        if changed && self.synced {
            self.published.publish(self.queues.names());
        }
    }

    /// The entries of each scope (in the order given), in one pass over the catalog: many
    /// shards acquired at once cost one pass, not one each.
    pub(super) fn slices(&self, placement: &Placement, scopes: &[Scope]) -> Vec<CatalogSlice> {
        let mut slices: Vec<CatalogSlice> = scopes
            .iter()
            .map(|_| CatalogSlice {
                entries: Vec::new(),
                revision: self.revision,
            })
            .collect();
        let by_shard: HashMap<Option<u32>, usize> = scopes
            .iter()
            .enumerate()
            .map(|(i, s)| (s.shard(), i))
            .collect();
        let whole = by_shard.get(&None).copied();
        for (key, entry) in &self.entries {
            let i = match whole {
                Some(i) => i,
                None => match by_shard.get(&Some(placement.shard_of(key))) {
                    Some(&i) => i,
                    None => continue,
                },
            };
            slices[i]
                .entries
                .push((Arc::clone(key), entry.clone().placed(placement, key)));
        }
        slices
    }
}

/// Applies a registry event to the catalog; returns the key and entry it changed (`None`
/// entry for a delete), or nothing for bookkeeping events.
pub(super) fn apply_event(
    catalog: &mut Catalog,
    metrics: &dyn RoleMetrics,
    event: RegistryEvent,
) -> Option<(Arc<TaskKey>, Option<CatalogEntry>)> {
    let revision = match &event {
        RegistryEvent::Put { mod_revision, .. }
        | RegistryEvent::Invalid { mod_revision, .. }
        | RegistryEvent::Delete { mod_revision, .. } => Some(*mod_revision),
        RegistryEvent::Synced { revision } => Some(*revision),
        RegistryEvent::Reconnecting { .. } => None,
    };
    if let Some(revision) = revision {
        catalog.revision = catalog.revision.max(revision);
    }
    let changed = match event {
        RegistryEvent::Put {
            mut spec,
            mod_revision,
            ..
        } => {
            spec.intern(&mut catalog.interner);
            let key = TaskKey::new(Arc::clone(&spec.namespace), Arc::clone(&spec.id));
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
            catalog.published.publish(catalog.queues.names());
            None
        }
        RegistryEvent::Reconnecting { error, attempt } => {
            metrics.backend_error(Backend::Etcd);
            warn!(%error, attempt, "registry watch reconnecting");
            None
        }
    };
    let (key, entry) = changed?;
    // The key already held, if any, is the one handed on: the dispatcher shares it.
    let (key, old) = match catalog.entries.remove_entry(&key) {
        Some((held, old)) => (held, Some(old)),
        None => (Arc::new(key), None),
    };
    if let Some(e) = &entry {
        catalog.entries.insert(Arc::clone(&key), e.clone());
    }
    let is_invalid = |e: &CatalogEntry| matches!(e, CatalogEntry::Invalid { .. });
    let is_paused = |e: &CatalogEntry| matches!(e, CatalogEntry::Valid { spec, .. } if spec.paused);
    if old.as_ref().is_some_and(is_invalid) {
        catalog.invalid -= 1;
    }
    if entry.as_ref().is_some_and(is_invalid) {
        catalog.invalid += 1;
    }
    if old.as_ref().is_some_and(is_paused) {
        catalog.paused -= 1;
    }
    if entry.as_ref().is_some_and(is_paused) {
        catalog.paused += 1;
    }
    catalog.count_queues(old.as_ref(), entry.as_ref());
    metrics.set_invalid_specs(catalog.invalid);
    metrics.set_paused_tasks(catalog.paused);
    Some((key, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(id: &str, revision: i64) -> RegistryEvent {
        RegistryEvent::Put {
            spec: TaskSpec::from_json(br#"{"handler":"log","schedule":{"every":"1s"}}"#, "ns", id)
                .unwrap(),
            mod_revision: revision,
            create_revision: revision,
        }
    }

    #[test]
    fn a_run_now_written_after_what_the_catalog_saw_waits_for_its_task() {
        let metrics = crate::metrics::NoMetrics;
        let mut catalog = Catalog::default();
        let all = [Scope::new(Placement::default(), None)];
        apply_event(&mut catalog, &metrics, put("a", 5));
        apply_event(
            &mut catalog,
            &metrics,
            RegistryEvent::Synced { revision: 7 },
        );
        assert_eq!(catalog.revision, 7);
        let slice = catalog.slices(&Placement::default(), &all).remove(0);
        // A request at revision 9 (its task put at 8, not delivered yet) waits.
        assert!(slice.may_not_have_seen(9));
        // One at 6 whose task is unknown: the task was deleted since.
        assert!(!slice.may_not_have_seen(6));
        apply_event(&mut catalog, &metrics, put("b", 8));
        apply_event(
            &mut catalog,
            &metrics,
            RegistryEvent::Delete {
                namespace: "ns".into(),
                id: "b".into(),
                mod_revision: 10,
            },
        );
        let slice = catalog.slices(&Placement::default(), &all).remove(0);
        assert!(!slice.may_not_have_seen(9));
        assert_eq!(slice.entries.len(), 1);
    }

    #[test]
    fn the_queue_names_are_published_once_synced_and_follow_puts_and_deletes() {
        let metrics = crate::metrics::NoMetrics;
        let published = QueueSet::default();
        let mut catalog = Catalog::publishing(published.clone());
        let on = |id: &str, queue: &str, revision: i64| RegistryEvent::Put {
            spec: TaskSpec::from_json(
                format!(r#"{{"handler":"log","schedule":{{"every":"1s"}},"queue":"{queue}"}}"#)
                    .as_bytes(),
                "ns",
                id,
            )
            .unwrap(),
            mod_revision: revision,
            create_revision: revision,
        };
        let names = || -> Vec<String> {
            published
                .names()
                .map(|n| n.iter().map(|q| q.to_string()).collect())
                .unwrap_or_default()
        };
        apply_event(&mut catalog, &metrics, on("a", "default", 1));
        assert!(published.names().is_none(), "nothing before the first sync");
        apply_event(
            &mut catalog,
            &metrics,
            RegistryEvent::Synced { revision: 1 },
        );
        assert_eq!(names(), ["default"]);
        apply_event(&mut catalog, &metrics, on("b", "mail", 2));
        apply_event(&mut catalog, &metrics, on("c", "mail", 3));
        assert_eq!(names(), ["default", "mail"]);
        // A task moved to another queue leaves its old one if it was the last there.
        apply_event(&mut catalog, &metrics, on("a", "video", 4));
        assert_eq!(names(), ["mail", "video"]);
        let delete = |id: &str, revision: i64| RegistryEvent::Delete {
            namespace: "ns".into(),
            id: id.into(),
            mod_revision: revision,
        };
        apply_event(&mut catalog, &metrics, delete("b", 5));
        assert_eq!(names(), ["mail", "video"], "c is still on mail");
        apply_event(&mut catalog, &metrics, delete("c", 6));
        assert_eq!(names(), ["video"]);
    }

    #[test]
    fn slices_split_the_catalog_by_shard_and_refuse_chains_across_shards() {
        let metrics = crate::metrics::NoMetrics;
        let mut catalog = Catalog::default();
        for i in 0..40 {
            apply_event(&mut catalog, &metrics, put(&format!("t{i}"), i + 1));
        }
        let placement = Placement {
            shards: 4,
            by: ax_scheduler_core::placement::PlaceBy::Task,
        };
        // A child of t0 in another shard than t0.
        let child = (0..100)
            .map(|i| format!("c{i}"))
            .find(|id| {
                placement.shard_of(&TaskKey::new("ns", id.as_str()))
                    != placement.shard_of(&TaskKey::new("ns", "t0"))
            })
            .unwrap();
        let json = br#"{"handler":"log","depends_on":[{"task":"ns/t0"}]}"#;
        apply_event(
            &mut catalog,
            &metrics,
            RegistryEvent::Put {
                spec: TaskSpec::from_json(json, "ns", &child).unwrap(),
                mod_revision: 50,
                create_revision: 50,
            },
        );
        let scopes: Vec<Scope> = (0..4).map(|s| Scope::new(placement, Some(s))).collect();
        let slices = catalog.slices(&placement, &scopes);
        assert_eq!(slices.iter().map(|s| s.entries.len()).sum::<usize>(), 41);
        for (s, slice) in slices.iter().enumerate() {
            for (key, entry) in &slice.entries {
                assert!(scopes[s].contains(key));
                let invalid = matches!(entry, CatalogEntry::Invalid { .. });
                assert_eq!(invalid, key.id.as_ref() == child, "{key}");
            }
        }
        // Only some shards: the others' entries are left out.
        let two = catalog.slices(&placement, &scopes[..2]);
        assert_eq!(two.len(), 2);
        assert!(two.iter().map(|s| s.entries.len()).sum::<usize>() < 41);
    }
}
