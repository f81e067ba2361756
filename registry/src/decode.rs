//! Turning a stored task key-value into a spec or an explanation of why it is not one.
//!
//! Shared by listing and watching so both judge a value the same way. A bad value is data,
//! not an error: it becomes an [`InvalidTask`] carrying every validation problem, and the
//! rest of the listing or the watch goes on.

use ax_scheduler_core::{FieldError, TaskSpec, ValidationErrors};
use etcd_client::KeyValue;

use crate::keys::Keys;

/// A valid task spec with its etcd revisions.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredTask {
    /// The spec.
    pub spec: TaskSpec,
    /// Revision of the spec's last change (use it for optimistic updates and as the
    /// state's `spec_revision`).
    pub mod_revision: i64,
    /// Revision at which the key was created.
    pub create_revision: i64,
}

/// A value under the tasks prefix that is not a valid spec.
#[derive(Clone, Debug, PartialEq)]
pub struct InvalidTask {
    /// Namespace from the key (best guess when the key itself is malformed).
    pub namespace: String,
    /// Id from the key (best guess when the key itself is malformed).
    pub id: String,
    /// The stored value (lossy UTF-8).
    pub raw: String,
    /// Every problem found; a malformed key is reported at path `key`.
    pub errors: ValidationErrors,
    /// Revision of the value's last change.
    pub mod_revision: i64,
}

/// Every task under the prefix at one revision.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskListing {
    /// The store revision the listing reflects.
    pub revision: i64,
    /// Valid specs, in key order.
    pub tasks: Vec<StoredTask>,
    /// Values that are not valid specs, in key order.
    pub invalid: Vec<InvalidTask>,
}

// Valid specs are the common case; boxing them would allocate for nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Decoded {
    Task(StoredTask),
    Invalid(InvalidTask),
}

/// `(namespace, id)` of a task key, also for malformed keys (best guess).
pub(crate) fn task_ids(keys: &Keys, key: &[u8]) -> (String, String) {
    let key = String::from_utf8_lossy(key);
    match keys.parse_task_key(&key) {
        Ok(ids) => ids,
        Err(bad) => (bad.namespace, bad.id),
    }
}

pub(crate) fn decode_task(keys: &Keys, kv: &KeyValue) -> Decoded {
    let key = String::from_utf8_lossy(kv.key());
    let raw = || String::from_utf8_lossy(kv.value()).into_owned();
    let (namespace, id) = match keys.parse_task_key(&key) {
        Ok(ids) => ids,
        Err(bad) => {
            return Decoded::Invalid(InvalidTask {
                namespace: bad.namespace,
                id: bad.id,
                raw: raw(),
                errors: ValidationErrors::from(vec![FieldError::new("key", bad.reason)]),
                mod_revision: kv.mod_revision(),
            })
        }
    };
    match TaskSpec::from_json(kv.value(), &namespace, &id) {
        Ok(spec) => Decoded::Task(StoredTask {
            spec,
            mod_revision: kv.mod_revision(),
            create_revision: kv.create_revision(),
        }),
        Err(errors) => Decoded::Invalid(InvalidTask {
            namespace,
            id,
            raw: raw(),
            errors,
            mod_revision: kv.mod_revision(),
        }),
    }
}

/// The `version` field of a stored value, even when the rest of it is invalid; 0 when it
/// cannot be read, so any valid registration replaces an unreadable value.
pub(crate) fn raw_version(value: &[u8]) -> u64 {
    serde_json::from_slice::<serde_json::Value>(value)
        .ok()
        .and_then(|v| v.get("version").and_then(|v| v.as_u64()))
        .unwrap_or(0)
}
