//! The audit log's store in etcd, named at the top of the crate for the scheduler's
//! leader, which writes the records of changes made to etcd without ax.
//!
//! The store is one of the backend's etcd parts and lives there (`crate::backend::audit_store`),
//! beside the error mapping it shares; this name only points at it.

pub use crate::backend::audit_store::AuditStore;
