//! Register, update, unregister, list and state records against a real etcd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use ax_registry::{PageCursor, RegisterOutcome, RegistryError};
use ax_scheduler_core::{TaskKey, TaskState, TaskStatus, UtcMillis};
use common::{registry, spec};

#[tokio::test]
async fn register_creates_replaces_by_higher_version_and_refuses_lower() {
    let (reg, _) = registry("reg-cas").await;
    assert!(matches!(
        reg.register(&spec("default", "report", 1, 0))
            .await
            .unwrap(),
        RegisterOutcome::Created { .. }
    ));
    let err = reg
        .register(&spec("default", "report", 1, 1))
        .await
        .unwrap_err();
    match &err {
        RegistryError::VersionNotHigher {
            existing: 1,
            offered: 1,
            ..
        } => {}
        other => panic!("unexpected {other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("default/report"), "{err}");
    match reg
        .register(&spec("default", "report", 3, 2))
        .await
        .unwrap()
    {
        RegisterOutcome::Replaced {
            previous_version: 1,
            ..
        } => {}
        other => panic!("unexpected {other:?}"),
    }
    let err = reg
        .register(&spec("default", "report", 2, 3))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("version 3") && msg.contains("version 2"),
        "{msg}"
    );
    let got = reg.get("default", "report").await.unwrap().unwrap();
    assert_eq!(got.spec.version, 3);
    assert_eq!(got.spec.payload["m"], 2);
    assert!(got.mod_revision > got.create_revision);

    // The stored spec offered again writes nothing, whatever its `created_at` says.
    let mut same = got.spec.clone();
    same.created_at = None;
    assert_eq!(
        reg.register(&same).await.unwrap(),
        RegisterOutcome::Unchanged {
            revision: got.mod_revision
        }
    );
    assert_eq!(
        reg.get("default", "report")
            .await
            .unwrap()
            .unwrap()
            .mod_revision,
        got.mod_revision
    );

    reg.register(&spec("other", "x", 1, 0)).await.unwrap();
    let all = reg.list(None).await.unwrap();
    assert_eq!(all.tasks.len(), 2);
    assert!(all.revision >= got.mod_revision);
    assert_eq!(
        reg.list(Some("other")).await.unwrap().tasks[0].spec.id,
        "x".into()
    );

    assert!(reg.unregister("default", "report").await.unwrap());
    assert!(!reg.unregister("default", "report").await.unwrap());
    assert!(reg.get("default", "report").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registers_of_one_id_have_exactly_one_winner() {
    let (reg, _) = registry("reg-race").await;
    let mut handles = Vec::new();
    for i in 0..20 {
        let reg = reg.clone();
        handles.push(tokio::spawn(async move {
            reg.register(&spec("default", "race", 1, i)).await
        }));
    }
    let mut created = 0;
    let mut refused = 0;
    for h in handles {
        match h.await.unwrap() {
            Ok(RegisterOutcome::Created { .. }) => created += 1,
            Err(RegistryError::VersionNotHigher { .. }) => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((created, refused), (1, 19));

    // Racing versions: whatever the order, the highest version ends up stored.
    let mut handles = Vec::new();
    for v in 2..=11u64 {
        let reg = reg.clone();
        handles.push(tokio::spawn(async move {
            loop {
                match reg.register(&spec("default", "race", v, v as i64)).await {
                    Err(e) if e.is_retryable() => continue,
                    other => return other,
                }
            }
        }));
    }
    for h in handles {
        match h.await.unwrap() {
            Ok(_) | Err(RegistryError::VersionNotHigher { .. }) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(
        reg.get("default", "race")
            .await
            .unwrap()
            .unwrap()
            .spec
            .version,
        11
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_updates_retry_and_lose_nothing() {
    let (reg, _) = registry("reg-update").await;
    reg.register(&spec("default", "counter", 1, 0))
        .await
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let mut handles = Vec::new();
    for _ in 0..10 {
        let (reg, calls) = (reg.clone(), calls.clone());
        handles.push(tokio::spawn(async move {
            loop {
                let r = reg
                    .update("default", "counter", |s| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        let m = s.payload["m"].as_i64().unwrap();
                        s.payload["m"] = (m + 1).into();
                    })
                    .await;
                match r {
                    Err(RegistryError::Conflict { attempts: 3, .. }) => continue,
                    other => return other.unwrap(),
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let got = reg.get("default", "counter").await.unwrap().unwrap();
    assert_eq!(
        got.spec.payload["m"], 10,
        "every increment applied exactly once"
    );
    assert!(calls.load(Ordering::SeqCst) >= 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_gives_up_after_three_conflicts_and_refuses_invalid_results() {
    let (reg, client) = registry("reg-conflict").await;
    reg.register(&spec("default", "t", 1, 0)).await.unwrap();
    let key = reg.keys().task("default", "t");
    let handle = tokio::runtime::Handle::current();
    let mut calls = 0;
    let err = reg
        .update("default", "t", |s| {
            calls += 1;
            // Someone else writes the key between every read and write.
            let mut c = client.clone();
            let (key, value) = (key.clone(), common::spec_json(1, 100 + calls));
            tokio::task::block_in_place(|| handle.block_on(c.put(key, value, None))).unwrap();
            s.payload["m"] = (-1).into();
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Conflict { attempts: 3, .. }),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(calls, 3);
    assert_eq!(
        reg.get("default", "t").await.unwrap().unwrap().spec.payload["m"],
        103
    );

    let err = reg
        .update("default", "t", |s| s.priority = 42)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Invalid { errors, .. } if errors.has("priority")),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let err = reg.update("default", "nope", |_| {}).await.unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }));
}

#[tokio::test]
async fn invalid_stored_values_are_reported_not_hidden() {
    let (reg, mut client) = registry("reg-invalid").await;
    reg.register(&spec("default", "good", 1, 0)).await.unwrap();
    client
        .put(reg.keys().task("default", "bad"), "{not json", None)
        .await
        .unwrap();
    let err = reg.get("default", "bad").await.unwrap_err();
    assert!(matches!(err, RegistryError::Invalid { .. }));
    let listing = reg.list(None).await.unwrap();
    assert_eq!(listing.tasks.len(), 1);
    assert_eq!(listing.invalid.len(), 1);
    assert_eq!(listing.invalid[0].raw, "{not json");
    // A valid registration replaces an unreadable value.
    reg.register(&spec("default", "bad", 1, 0)).await.unwrap();
    assert!(reg.get("default", "bad").await.unwrap().is_some());
}

#[tokio::test]
async fn states_roundtrip_batch_and_fence() {
    let (reg, mut client) = registry("reg-state").await;
    let now = UtcMillis(1_700_000_000_000);
    let mut st = TaskState::new(7, now, now);
    st.transition(TaskStatus::Scheduled, now).unwrap();
    reg.put_state("default", "a", &st, None).await.unwrap();
    let got = reg.get_state("default", "a").await.unwrap().unwrap();
    assert_eq!((got.namespace.as_str(), got.id.as_str()), ("default", "a"));
    assert_eq!(got.state, st);
    assert!(reg.get_state("default", "zz").await.unwrap().is_none());

    // 300 states: more than one etcd transaction can hold.
    let batch: Vec<_> = (0..300)
        .map(|i| {
            (
                TaskKey::new("bulk", format!("t{i:03}")),
                TaskState::new(i, now, now),
            )
        })
        .collect();
    reg.put_states(&batch, None).await.unwrap();
    let listed = reg.list_states(Some("bulk")).await.unwrap().states;
    assert_eq!(listed.len(), 300);
    assert_eq!(listed[299].state.spec_revision, 299);
    assert_eq!(reg.list_states(None).await.unwrap().states.len(), 301);

    // A record this version cannot read is listed apart; the others still come.
    client
        .put(
            reg.keys().state("bulk", "t100"),
            r#"{"status":"ZOMBIE"}"#,
            None,
        )
        .await
        .unwrap();
    client
        .put(reg.keys().state("x", "y"), "{}", None)
        .await
        .unwrap();
    let listed = reg.list_states(None).await.unwrap();
    assert_eq!(listed.states.len(), 300);
    let bad: Vec<(&str, &str)> = listed
        .undecodable
        .iter()
        .map(|u| (u.namespace.as_str(), u.id.as_str()))
        .collect();
    assert_eq!(bad, [("bulk", "t100"), ("x", "y")]);
    assert!(
        listed.undecodable[0].error.contains("ZOMBIE"),
        "{:?}",
        listed.undecodable
    );
    client
        .delete(reg.keys().state("x", "y"), None)
        .await
        .unwrap();
    // Read by key, in transactions of at most 128 gets: what exists, decoded or listed
    // apart, and nothing for keys without a state.
    let mut wanted: Vec<TaskKey> = (0..300)
        .map(|i| TaskKey::new("bulk", format!("t{i:03}")))
        .collect();
    wanted.push(TaskKey::new("bulk", "never"));
    let got = reg.get_states(&wanted).await.unwrap();
    assert_eq!(got.states.len(), 299);
    assert_eq!(got.undecodable.len(), 1);
    assert_eq!(got.undecodable[0].id, "t100");
    reg.put_states(&batch[100..101], None).await.unwrap();

    // Fenced writes succeed only under the current leader key's create revision.
    let token = client
        .put(reg.keys().leader(), "{}", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    reg.put_state("default", "a", &st, Some(&reg.leader_fence(token)))
        .await
        .unwrap();
    let err = reg
        .put_state("default", "a", &st, Some(&reg.leader_fence(token - 1)))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Fenced { .. }));
    assert!(!err.is_retryable());

    // A shard owner's writes are fenced on its own owner key: the leader's token does not
    // pass, nor does another shard's.
    let shard_token = client
        .put(reg.keys().shard_owner(3), "r1", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    reg.put_state("default", "a", &st, Some(&reg.shard_fence(3, shard_token)))
        .await
        .unwrap();
    for refused in [reg.shard_fence(3, token), reg.shard_fence(4, shard_token)] {
        let err = reg
            .put_state("default", "a", &st, Some(&refused))
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::Fenced { .. }), "{refused:?}");
    }

    // Unregistering a task deletes its state too.
    reg.register(&spec("default", "a", 1, 0)).await.unwrap();
    reg.put_state("default", "a", &st, None).await.unwrap();
    assert!(reg.unregister("default", "a").await.unwrap());
    assert!(
        reg.get_state("default", "a").await.unwrap().is_none(),
        "state goes with the task"
    );
}

#[tokio::test]
async fn a_paged_listing_is_one_snapshot_with_each_tasks_state() {
    let (reg, mut client) = registry("reg-page").await;
    let now = UtcMillis(1_700_000_000_000);
    for i in 0..25 {
        reg.register(&spec("a", &format!("t{i:02}"), 1, i))
            .await
            .unwrap();
    }
    reg.register(&spec("b", "other", 1, 0)).await.unwrap();
    client
        .put(reg.keys().task("a", "t07x"), "{not json", None)
        .await
        .unwrap();
    let states: Vec<_> = (0..25)
        .step_by(2)
        .map(|i| {
            (
                TaskKey::new("a", format!("t{i:02}")),
                TaskState::new(i, now, now),
            )
        })
        .collect();
    reg.put_states(&states, None).await.unwrap();
    // A state of another namespace next to the page's range is not the page's.
    reg.put_state("b", "other", &TaskState::new(99, now, now), None)
        .await
        .unwrap();

    let mut seen = Vec::new();
    let mut with_state = 0;
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = reg.list_page(Some("a"), cursor.as_ref(), 10).await.unwrap();
        pages += 1;
        assert!(page.listing.tasks.len() + page.listing.invalid.len() <= 10);
        let ids: Vec<String> = page
            .listing
            .tasks
            .iter()
            .map(|t| t.spec.id.to_string())
            .collect();
        for s in &page.states.states {
            assert_eq!(s.namespace, "a");
            assert!(
                ids.contains(&s.id),
                "state {} outside its page {ids:?}",
                s.id
            );
        }
        with_state += page.states.states.len();
        seen.extend(ids);
        seen.extend(page.listing.invalid.iter().map(|i| i.id.clone()));
        if pages == 1 {
            // Changes after the first page do not show in the later ones.
            reg.register(&spec("a", "t99", 1, 0)).await.unwrap();
            reg.unregister("a", "t24").await.unwrap();
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let mut want: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
    want.push("t07x".into());
    seen.sort();
    want.sort();
    assert_eq!(seen, want);
    assert_eq!(with_state, 13);
}

#[tokio::test]
async fn a_cursor_outside_the_listed_range_is_refused() {
    let (reg, mut client) = registry("reg-page-out").await;
    reg.register(&spec("a", "t1", 1, 0)).await.unwrap();
    reg.register(&spec("b", "t1", 1, 0)).await.unwrap();
    client
        .put("/other-app/secret", "hunter2", None)
        .await
        .unwrap();
    let first = reg.list_page(None, None, 1).await.unwrap();
    let revision = first.listing.revision;
    // An empty key, another application's key, and another namespace's task for a listing
    // of namespace `a`: none may start a range.
    for (namespace, after) in [
        (None, String::new()),
        (None, "/other-app/secret".to_owned()),
        (Some("a"), reg.keys().task("b", "t1")),
    ] {
        let cursor = PageCursor { revision, after };
        match reg.list_page(namespace, Some(&cursor), 10).await {
            Err(RegistryError::CursorOutsideListing { .. }) => {}
            other => panic!("{cursor:?} in {namespace:?}: {other:?}"),
        }
    }
    let next = first.next.unwrap();
    let page = reg.list_page(None, Some(&next), 10).await.unwrap();
    assert_eq!(page.listing.tasks.len(), 1);
    assert_eq!(&*page.listing.tasks[0].spec.namespace, "b");
}
