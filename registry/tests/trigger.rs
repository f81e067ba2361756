//! Run-now requests against a real etcd: written only for registered tasks, listed with
//! their key parts, deleted once handled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use ax_registry::{RegistryError, TriggerRequest};
use ax_scheduler_core::{ExecutionId, UtcMillis};
use common::{registry, spec};

#[tokio::test]
async fn triggers_are_written_for_registered_tasks_only_listed_and_deleted() {
    let (reg, client) = registry("reg-trigger").await;
    let request = TriggerRequest {
        execution_id: "0190f3c2-7d41-7a3e-9c1b-3f5e2a6d8b10"
            .parse::<ExecutionId>()
            .unwrap(),
        requested_at: UtcMillis(1_767_171_600_000),
        payload: Some(serde_json::json!({"day": "2026-11-30"})),
        idempotency_key: None,
        backfill_of: None,
        requested_by: None,
    };
    let err = reg
        .request_trigger("ops", "nightly", &request)
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err:?}");
    assert!(reg.list_triggers().await.unwrap().1.is_empty());

    reg.register(&spec("ops", "nightly", 1, 0)).await.unwrap();
    reg.request_trigger("ops", "nightly", &request)
        .await
        .unwrap();

    let key = reg.keys().trigger("ops", "nightly", request.execution_id);
    let mut kv = client.kv_client();
    let stored = kv.get(key.clone(), None).await.unwrap();
    let value: serde_json::Value = serde_json::from_slice(stored.kvs()[0].value()).unwrap();
    assert_eq!(
        value,
        serde_json::json!({"execution_id": request.execution_id, "requested_at": 1_767_171_600_000_i64,
            "payload": {"day": "2026-11-30"}})
    );

    let (revision, pending) = reg.list_triggers().await.unwrap();
    assert!(revision > 0);
    assert_eq!(pending.len(), 1);
    let p = &pending[0];
    assert_eq!(
        (p.namespace.as_str(), p.id.as_str(), p.execution_id),
        ("ops", "nightly", request.execution_id)
    );
    assert_eq!(p.requested_at, Some(request.requested_at));
    assert_eq!(p.payload, request.payload);
    assert_eq!(p.idempotency_key, None);

    reg.delete_trigger("ops", "nightly", request.execution_id)
        .await
        .unwrap();
    assert!(reg.list_triggers().await.unwrap().1.is_empty());
}
