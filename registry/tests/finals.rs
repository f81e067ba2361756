//! The finals ledger against a real etcd: read as the task's state, superseded by a later
//! state key, fenced, emptied of a deleted task's entries, compacted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use ax_registry::{LedgerWriter, Registry, RegistryError};
use ax_scheduler_core::finals::{bucket, COMPACT_SHEETS};
use ax_scheduler_core::{TaskKey, TaskSpec, TaskState, TaskStatus, UtcMillis};
use common::registry;
use etcd_client::{Client, GetOptions};

const NOW: UtcMillis = UtcMillis(1_800_000_000_000);

fn final_state(n: u64) -> TaskState {
    let mut s = TaskState::new(1, NOW, NOW);
    s.status = TaskStatus::Success;
    s.fire_count = 1;
    s.success_count = n;
    s
}

/// Holds the leader key; the ledger writer fenced on it.
async fn leader(reg: &Registry, client: &Client) -> LedgerWriter {
    let resp = client
        .kv_client()
        .put(reg.keys().leader(), "me", None)
        .await
        .unwrap();
    LedgerWriter::new(Some(reg.leader_fence(resp.header().unwrap().revision())))
}

async fn sheets_in(reg: &Registry, client: &Client, b: u32) -> usize {
    let opts = GetOptions::new().with_prefix().with_count_only();
    let resp = client
        .kv_client()
        .get(reg.keys().finals_bucket(b), Some(opts))
        .await
        .unwrap();
    usize::try_from(resp.count()).unwrap()
}

async fn clean_up(reg: &Registry, client: &Client) {
    let opts = etcd_client::DeleteOptions::new().with_prefix();
    client
        .kv_client()
        .delete(format!("{}/", reg.keys().prefix()), Some(opts))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_final_in_the_ledger_is_the_tasks_state_until_a_later_state_key() {
    let (reg, client) = registry("finals-read").await;
    let mut writer = leader(&reg, &client).await;
    let json = br#"{"handler":"log","schedule":{"at":"2027-01-01T00:00:00Z"}}"#;
    let keys: Vec<TaskKey> = (0..3)
        .map(|i| TaskKey::new("ns", format!("o{i}")))
        .collect();
    for k in &keys {
        reg.register(&TaskSpec::from_json(json, "ns", &k.id).unwrap())
            .await
            .unwrap();
    }
    // o0 had a state key before it ended (a long execution's RUNNING).
    let mut running = TaskState::new(1, NOW, NOW);
    running.status = TaskStatus::Running;
    reg.put_state("ns", "o0", &running, None).await.unwrap();
    let finals: Vec<(TaskKey, TaskState)> =
        keys.iter().map(|k| (k.clone(), final_state(1))).collect();
    reg.put_finals(&finals, &mut writer).await.unwrap();

    let got = reg.get_state("ns", "o0").await.unwrap().unwrap();
    assert_eq!(
        got.state.status,
        TaskStatus::Success,
        "the newer of the two"
    );
    let all = reg.list_states(None).await.unwrap();
    assert_eq!(all.states.len(), 3);
    assert!(all
        .states
        .iter()
        .all(|s| s.state.status == TaskStatus::Success));
    assert_eq!(
        reg.list_states(Some("other")).await.unwrap().states.len(),
        0
    );
    let some = reg.get_states(&keys[1..2]).await.unwrap();
    assert_eq!(some.states.len(), 1);
    assert_eq!(some.states[0].id, "o1");
    let page = reg.list_page(None, None, 10).await.unwrap();
    assert_eq!(page.states.states.len(), 3);
    assert!(page
        .states
        .states
        .iter()
        .all(|s| s.state.status == TaskStatus::Success));

    // A state key written later (the task's spec changed, it is armed again) wins.
    let mut again = TaskState::new(2, NOW, NOW);
    again.status = TaskStatus::Scheduled;
    reg.put_state("ns", "o1", &again, None).await.unwrap();
    let got = reg.get_state("ns", "o1").await.unwrap().unwrap();
    assert_eq!(got.state.status, TaskStatus::Scheduled);

    // A deposed writer's sheet is refused.
    let mut stale = LedgerWriter::new(Some(reg.leader_fence(1)));
    let err = reg.put_finals(&finals, &mut stale).await.unwrap_err();
    assert!(matches!(err, RegistryError::Fenced { .. }), "{err:?}");
    clean_up(&reg, &client).await;
}

#[tokio::test]
async fn a_deleted_tasks_finals_go_and_a_bucket_of_many_sheets_is_compacted() {
    let (reg, client) = registry("finals-compact").await;
    let mut writer = leader(&reg, &client).await;
    // Tasks of one bucket, a sheet each.
    let b = bucket(&TaskKey::new("ns", "t0"));
    let keys: Vec<TaskKey> = (0..2000)
        .map(|i| TaskKey::new("ns", format!("t{i}")))
        .filter(|k| bucket(k) == b)
        .take(COMPACT_SHEETS + 4)
        .collect();
    for (i, k) in keys.iter().enumerate() {
        reg.put_finals(&[(k.clone(), final_state(i as u64))], &mut writer)
            .await
            .unwrap();
    }
    assert_eq!(sheets_in(&reg, &client, b).await, keys.len());
    // The first is deleted; the next two are superseded by their state keys.
    reg.drop_finals(&keys[..1], &mut writer).await.unwrap();
    assert_eq!(sheets_in(&reg, &client, b).await, keys.len() - 1);
    assert!(reg.get_state("ns", &keys[0].id).await.unwrap().is_none());
    let mut later = TaskState::new(2, NOW, NOW);
    later.status = TaskStatus::Scheduled;
    for k in &keys[1..3] {
        reg.put_state(&k.namespace, &k.id, &later, None)
            .await
            .unwrap();
    }
    assert!(reg.compact_finals(b, &mut writer).await.unwrap());
    assert_eq!(
        sheets_in(&reg, &client, b).await,
        1,
        "merged into one sheet"
    );
    // Compacted entries keep their age: the later state keys still win, the rest still
    // read their finals.
    for k in &keys[1..3] {
        let s = reg.get_state(&k.namespace, &k.id).await.unwrap().unwrap();
        assert_eq!(s.state.status, TaskStatus::Scheduled, "{k}");
    }
    for (i, k) in keys.iter().enumerate().skip(3) {
        let s = reg.get_state(&k.namespace, &k.id).await.unwrap().unwrap();
        assert_eq!(s.state.success_count, i as u64, "{k}");
    }
    let sheet = client
        .kv_client()
        .get(
            reg.keys().finals_bucket(b),
            Some(GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let held: serde_json::Value = serde_json::from_slice(sheet.kvs()[0].value()).unwrap();
    assert_eq!(
        held["finals"].as_array().unwrap().len(),
        keys.len() - 3,
        "the dead entries are dropped"
    );
    assert!(
        !reg.compact_finals(b, &mut writer).await.unwrap(),
        "nothing left to do"
    );
    clean_up(&reg, &client).await;
}
