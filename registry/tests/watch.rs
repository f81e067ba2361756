//! The list-then-watch stream against a real etcd: continuity across thousands of writes,
//! etcd restarts, compaction while disconnected, and malformed values.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use ax_registry::{Registry, RegistryConfig, RegistryEvent, TaskWatcher};
use common::{registry, registry_at, spec_json};
use etcd_client::{Client, CompactionOptions};
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

async fn next(w: &mut TaskWatcher) -> RegistryEvent {
    timeout(Duration::from_secs(10), w.next())
        .await
        .expect("an event within 10 s")
        .expect("the watch is running")
}

/// Events up to and including the next `Synced`; returns them and the synced revision.
async fn until_synced(w: &mut TaskWatcher) -> (Vec<RegistryEvent>, i64) {
    let mut out = Vec::new();
    loop {
        match next(w).await {
            RegistryEvent::Synced { revision } => return (out, revision),
            ev => out.push(ev),
        }
    }
}

/// The next event that is not `Reconnecting`.
async fn next_change(w: &mut TaskWatcher) -> RegistryEvent {
    loop {
        match next(w).await {
            RegistryEvent::Reconnecting { .. } => continue,
            ev => return ev,
        }
    }
}

fn summary(ev: &RegistryEvent) -> (char, String, i64) {
    match ev {
        RegistryEvent::Put {
            spec, mod_revision, ..
        } => ('P', spec.id.to_string(), *mod_revision),
        RegistryEvent::Invalid {
            id, mod_revision, ..
        } => ('I', id.clone(), *mod_revision),
        RegistryEvent::Delete {
            id, mod_revision, ..
        } => ('D', id.clone(), *mod_revision),
        other => panic!("not a change: {other:?}"),
    }
}

async fn put(client: &mut Client, reg: &Registry, id: &str, value: &str) -> i64 {
    client
        .put(reg.keys().task("default", id), value, None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision()
}

async fn delete(client: &mut Client, reg: &Registry, id: &str) -> i64 {
    client
        .delete(reg.keys().task("default", id), None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_every_write_once_in_order_across_thousands_of_writes() {
    let (reg, client) = registry("watch-many").await;
    // The writer runs before, during and after the initial list, so the boundary between
    // list and watch is crossed while writes are in flight.
    let writer = {
        let (reg, mut client) = (reg.clone(), client.clone());
        tokio::spawn(async move {
            let mut log = Vec::new();
            let mut live = BTreeMap::new();
            for i in 0..3000u32 {
                // A deterministic mix: mostly puts over 150 ids, a delete every 5th write.
                let id = format!("t{:03}", (i * 37) % 150);
                if i % 5 == 4 && live.contains_key(&id) {
                    let rev = delete(&mut client, &reg, &id).await;
                    live.remove(&id);
                    log.push(('D', id, rev));
                } else {
                    let rev = put(&mut client, &reg, &id, &spec_json(1, i64::from(i))).await;
                    live.insert(id.clone(), rev);
                    log.push(('P', id, rev));
                }
            }
            log
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut w = reg.watch(CancellationToken::new());
    let (listed, synced_at) = until_synced(&mut w).await;
    let log = writer.await.unwrap();
    assert!(synced_at > log[0].2, "the list happened while writing");

    // The list equals the state the log gives at the list's revision.
    let mut at_sync = BTreeMap::new();
    for (op, id, rev) in log.iter().filter(|(_, _, r)| *r <= synced_at) {
        if *op == 'P' {
            at_sync.insert(id.clone(), *rev);
        } else {
            at_sync.remove(id);
        }
    }
    let listed: BTreeMap<_, _> = listed
        .iter()
        .map(|ev| {
            let (op, id, rev) = summary(ev);
            assert_eq!(op, 'P');
            (id, rev)
        })
        .collect();
    assert_eq!(listed, at_sync);

    // After the list, exactly the later writes, in order, none twice.
    let expected: Vec<_> = log.into_iter().filter(|(_, _, r)| *r > synced_at).collect();
    assert!(
        expected.len() > 1000,
        "most writes come after the list: {}",
        expected.len()
    );
    let mut seen = Vec::with_capacity(expected.len());
    while seen.len() < expected.len() {
        seen.push(summary(&next_change(&mut w).await));
    }
    assert_eq!(seen, expected);
    assert!(
        seen.windows(2).all(|p| p[0].2 < p[1].2),
        "revisions strictly increase"
    );
    // Nothing more.
    assert!(timeout(Duration::from_millis(300), w.next()).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_after_etcd_restart() {
    let mut server = ax_testkit::EtcdServer::start();
    let (reg, mut client) = registry_at(&server.endpoint(), "watch-restart").await;
    let reg = Registry::new(
        client.clone(),
        RegistryConfig {
            watch_backoff_initial: Duration::from_millis(50),
            watch_backoff_max: Duration::from_millis(500),
            ..reg.config().clone()
        },
    );
    put(&mut client, &reg, "a", &spec_json(1, 1)).await;
    let mut w = reg.watch(CancellationToken::new());
    let (listed, _) = until_synced(&mut w).await;
    assert_eq!(listed.len(), 1);
    let rev_b = put(&mut client, &reg, "b", &spec_json(1, 2)).await;
    assert_eq!(summary(&next(&mut w).await), ('P', "b".into(), rev_b));

    tokio::task::block_in_place(|| server.kill());
    match next(&mut w).await {
        RegistryEvent::Reconnecting { attempt: 1, .. } => {}
        other => panic!("expected Reconnecting, got {other:?}"),
    }
    tokio::task::block_in_place(|| server.restart());
    let rev_c = put(&mut client, &reg, "c", &spec_json(1, 3)).await;
    let rev_a = delete(&mut client, &reg, "a").await;
    assert_eq!(
        summary(&next_change(&mut w).await),
        ('P', "c".into(), rev_c)
    );
    assert_eq!(
        summary(&next_change(&mut w).await),
        ('D', "a".into(), rev_a)
    );
    // Resumed, not relisted: no Synced and no repeat of b.
    assert!(timeout(Duration::from_millis(500), w.next()).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_disconnected_relists_and_reports_the_difference() {
    let mut server = ax_testkit::EtcdServer::start();
    let (reg, mut client) = registry_at(&server.endpoint(), "watch-compact").await;
    for (id, m) in [("a", 1), ("b", 2), ("c", 3)] {
        put(&mut client, &reg, id, &spec_json(1, m)).await;
    }
    let mut w = reg.watch(CancellationToken::new());
    let (listed, first_sync) = until_synced(&mut w).await;
    assert_eq!(listed.len(), 3);

    // The watcher is not polled from here on: the connection dies under it, the history it
    // would resume from is compacted away, and only then does it run again.
    tokio::task::block_in_place(|| server.restart());
    let rev_del = delete(&mut client, &reg, "a").await;
    let rev_b = put(&mut client, &reg, "b", &spec_json(1, 20)).await;
    let rev_d = put(&mut client, &reg, "d", &spec_json(1, 4)).await;
    client
        .compact(rev_d, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    assert!(rev_del > first_sync);

    let (diff, synced) = until_synced(&mut w).await;
    let mut changes: Vec<_> = diff
        .iter()
        .filter(|e| !matches!(e, RegistryEvent::Reconnecting { .. }))
        .map(summary)
        .collect();
    changes.sort();
    assert_eq!(
        changes,
        vec![
            ('D', "a".into(), synced),
            ('P', "b".into(), rev_b),
            ('P', "d".into(), rev_d)
        ],
        "c did not change and is not repeated"
    );
    assert!(synced >= rev_d);
    // And the watch continues after the relist.
    let rev_e = put(&mut client, &reg, "e", &spec_json(1, 5)).await;
    assert_eq!(
        summary(&next_change(&mut w).await),
        ('P', "e".into(), rev_e)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_values_become_invalid_events_and_hide_nothing() {
    let (reg, mut client) = registry("watch-invalid").await;
    put(&mut client, &reg, "good", &spec_json(1, 1)).await;
    put(&mut client, &reg, "json", "{nope").await;
    put(
        &mut client,
        &reg,
        "cron",
        r#"{"handler":"log","schedule":{"cron":"61 * * * *"}}"#,
    )
    .await;
    put(
        &mut client,
        &reg,
        "mismatch",
        r#"{"id":"other","handler":"log","schedule":{"every":"10s"}}"#,
    )
    .await;
    client
        .put(
            format!("{}default/x/extra", reg.keys().tasks_prefix()),
            spec_json(1, 0),
            None,
        )
        .await
        .unwrap();
    let mut w = reg.watch(CancellationToken::new());
    let (listed, _) = until_synced(&mut w).await;
    let mut by_id = BTreeMap::new();
    for ev in listed {
        match ev {
            RegistryEvent::Put { spec, .. } => {
                by_id.insert(spec.id.to_string(), None);
            }
            RegistryEvent::Invalid {
                id, errors, raw, ..
            } => {
                assert!(!errors.is_empty());
                by_id.insert(id, Some((errors, raw)));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(by_id.len(), 5);
    assert!(by_id["good"].is_none());
    assert_eq!(by_id["json"].as_ref().unwrap().1, "{nope");
    assert!(by_id["cron"]
        .as_ref()
        .unwrap()
        .0
        .iter()
        .any(|e| e.path.starts_with("schedule")));
    assert!(by_id["mismatch"].as_ref().unwrap().0.has("id"));
    let extra = &by_id["x/extra"].as_ref().unwrap().0;
    assert!(extra.has("key"), "{extra}");
    assert!(extra.to_string().contains("extra segments"), "{extra}");

    // While watching: a bad write, then a good one; both arrive, in order.
    let rev_bad = put(&mut client, &reg, "late", "[]").await;
    let rev_ok = put(&mut client, &reg, "late2", &spec_json(1, 2)).await;
    assert_eq!(summary(&next(&mut w).await), ('I', "late".into(), rev_bad));
    assert_eq!(summary(&next(&mut w).await), ('P', "late2".into(), rev_ok));
    // Fixing an invalid task turns it into a Put; deleting one is a Delete.
    let rev_fix = put(&mut client, &reg, "json", &spec_json(1, 3)).await;
    assert_eq!(summary(&next(&mut w).await), ('P', "json".into(), rev_fix));
    let rev_gone = delete(&mut client, &reg, "cron").await;
    assert_eq!(summary(&next(&mut w).await), ('D', "cron".into(), rev_gone));
}

#[tokio::test]
async fn cancelling_ends_the_stream() {
    use futures::StreamExt;
    let (reg, _) = registry("watch-cancel").await;
    let cancel = CancellationToken::new();
    let mut stream = reg.watch(cancel.clone()).into_stream();
    assert!(matches!(
        stream.next().await,
        Some(RegistryEvent::Synced { .. })
    ));
    cancel.cancel();
    assert_eq!(
        timeout(Duration::from_secs(1), stream.next())
            .await
            .unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_is_cancel_safe_inside_select() {
    let (reg, client) = registry("watch-select").await;
    let mut w = reg.watch(CancellationToken::new());
    until_synced(&mut w).await;
    let writer = {
        let (reg, mut client) = (reg.clone(), client.clone());
        tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..200 {
                revs.push(put(&mut client, &reg, &format!("s{i:03}"), &spec_json(1, i)).await);
                if i % 20 == 19 {
                    // A pause now and then, so that the reader's `next()` is pending (and
                    // abandoned) mid-stream however fast etcd answers on this machine.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            revs
        })
    };
    // A busy loop that abandons `next()` every millisecond, as an engine's select! would.
    let mut seen = Vec::new();
    let mut interrupted = 0u32;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.len() < 200 && tokio::time::Instant::now() < deadline {
        tokio::select! {
            ev = w.next() => seen.push(summary(&ev.unwrap()).2),
            _ = tokio::time::sleep(Duration::from_millis(1)) => interrupted += 1,
        }
    }
    assert_eq!(seen, writer.await.unwrap());
    assert!(interrupted > 0);
}

/// A quiet watch is asked for progress and kept while etcd answers; a watch through an etcd
/// that hangs (stopped, connection open) is given up within the answer timeout and resumed,
/// instead of seeing nothing until the HTTP/2 keep-alive closes the connection (15 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_is_kept_and_a_hung_etcd_is_noticed() {
    let server = ax_testkit::EtcdServer::start();
    let pid = server.pid().unwrap();
    let (reg, mut client) = registry_at(&server.endpoint(), "watch-hung").await;
    let reg = Registry::new(
        client.clone(),
        RegistryConfig {
            watch_backoff_initial: Duration::from_millis(50),
            watch_backoff_max: Duration::from_millis(200),
            watch_progress_interval: Duration::from_millis(200),
            watch_answer_timeout: Duration::from_millis(300),
            ..reg.config().clone()
        },
    );
    let mut w = reg.watch(CancellationToken::new());
    until_synced(&mut w).await;
    // Quiet for many progress intervals: answered each time, never reopened.
    assert!(
        timeout(Duration::from_secs(2), w.next()).await.is_err(),
        "a quiet watch on a healthy etcd must stay as it is"
    );

    ax_testkit::signal(pid, "STOP");
    let stopped = std::time::Instant::now();
    let event = timeout(Duration::from_secs(5), w.next()).await;
    let noticed = stopped.elapsed();
    ax_testkit::signal(pid, "CONT");
    match event {
        Ok(Some(RegistryEvent::Reconnecting { .. })) => {}
        other => panic!("expected Reconnecting within 5 s of etcd hanging, got {other:?}"),
    }
    // Progress asked within 200 ms of the last answer, given up 300 ms later.
    assert!(noticed < Duration::from_millis(1500), "{noticed:?}");
    let rev = put(&mut client, &reg, "after", &spec_json(1, 1)).await;
    assert_eq!(
        summary(&next_change(&mut w).await),
        ('P', "after".into(), rev)
    );
}
