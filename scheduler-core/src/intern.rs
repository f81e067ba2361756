//! One shared copy of what many tasks repeat: namespaces, handlers, queues and the default
//! retry policy.
//!
//! A leader holds every registered task; at a million tasks the same few names, each a
//! separate allocation per task, cost tens of megabytes. The catalog passes each new spec
//! through an [`Interner`], so all tasks naming `default` point at one `Arc<str>`. Names no
//! task uses any more are dropped when the set has doubled since it was last swept, so the
//! set stays proportional to the names in use, not to every name ever seen.

use std::collections::HashSet;
use std::sync::Arc;

use crate::key::TableHasher;
use crate::task::{RetryPolicy, TaskSpec};

/// A set of shared strings; see the [module notes](self).
#[derive(Debug, Default)]
pub struct Interner {
    names: HashSet<Arc<str>, TableHasher>,
    /// Size after the last sweep: the next sweep comes when the set has doubled.
    swept_len: usize,
    /// The retry policy most specs leave at its default (72 bytes each otherwise).
    default_retry: Arc<RetryPolicy>,
}

impl Interner {
    /// The shared copy of `name`, stored on first sight.
    pub fn intern(&mut self, name: &Arc<str>) -> Arc<str> {
        if let Some(shared) = self.names.get(name) {
            return Arc::clone(shared);
        }
        if self.names.len() >= 2 * self.swept_len.max(32) {
            // Only the set holds these: no task names them any more.
            self.names.retain(|n| Arc::strong_count(n) > 1);
            self.swept_len = self.names.len();
        }
        self.names.insert(Arc::clone(name));
        Arc::clone(name)
    }

    /// Names held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.names.len()
    }
}

impl TaskSpec {
    /// Replaces the spec's namespace, handler and queue, and a default retry policy, by
    /// their shared copies.
    pub fn intern(&mut self, interner: &mut Interner) {
        self.namespace = interner.intern(&self.namespace);
        self.handler = interner.intern(&self.handler);
        self.queue = interner.intern(&self.queue);
        if *self.retry == *interner.default_retry {
            self.retry = Arc::clone(&interner.default_retry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_share_one_allocation() {
        let mut i = Interner::default();
        let a = i.intern(&Arc::from("default"));
        let b = i.intern(&Arc::from(String::from("default")));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(i.len(), 1);
    }

    #[test]
    fn names_no_one_holds_are_swept_as_the_set_grows() {
        let mut i = Interner::default();
        let kept = i.intern(&Arc::from("kept"));
        for n in 0..1000 {
            // Each dropped at once: only the set holds it.
            i.intern(&Arc::from(format!("gone-{n}")));
        }
        assert!(i.len() <= 64, "{} names held", i.len());
        assert!(Arc::ptr_eq(&kept, &i.intern(&Arc::from("kept"))));
    }

    #[test]
    fn specs_share_names_and_the_default_retry_policy() {
        let mut i = Interner::default();
        let json = br#"{"handler":"log","schedule":{"every":"1s"}}"#;
        let mut a = TaskSpec::from_json(json, "ns", "a").unwrap();
        let mut b = TaskSpec::from_json(json, "ns", "b").unwrap();
        let custom = br#"{"handler":"log","schedule":{"every":"1s"},"retry":{"max_retries":9}}"#;
        let mut c = TaskSpec::from_json(custom, "ns", "c").unwrap();
        for s in [&mut a, &mut b, &mut c] {
            s.intern(&mut i);
        }
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert!(Arc::ptr_eq(&a.handler, &c.handler));
        assert!(Arc::ptr_eq(&a.queue, &b.queue));
        assert!(Arc::ptr_eq(&a.retry, &b.retry));
        assert_eq!(c.retry.max_retries, 9, "a policy of its own is kept");
        assert!(!Arc::ptr_eq(&a.retry, &c.retry));
    }
}
