//! Election, locks and instance records against a real etcd (several candidates in one
//! process; `processes.rs` covers separate processes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ax_election::{
    current_leader, list_instances, list_roster, observe, register_instance, sweep_roster,
    Candidate, ElectionConfig, InstanceRecord, Leadership, LossReason, Session, SweepReport,
    TaskLock, ROSTER_KEEP,
};
use ax_scheduler_core::UtcMillis;
use etcd_client::Client;
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;

async fn connect(endpoint: &str) -> Client {
    Client::connect([endpoint], None).await.unwrap()
}

fn config(label: &str) -> ElectionConfig {
    ElectionConfig {
        prefix: format!("/{}", ax_testkit::unique_name(label)),
        ttl: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
    }
}

/// Starts every candidate campaigning; winners arrive on the channel as (index, leadership).
fn campaign_all(
    candidates: &[Candidate],
    cancel: &CancellationToken,
) -> mpsc::UnboundedReceiver<(usize, Leadership)> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (i, c) in candidates.iter().enumerate() {
        let (c, tx, cancel) = (c.clone(), tx.clone(), cancel.clone());
        tokio::spawn(async move {
            if let Ok(l) = c.campaign(&cancel).await {
                let _ = tx.send((i, l));
            }
        });
    }
    rx
}

async fn wait_observed(observer: &ax_election::LeaderObserver, id: &str, token: i64) {
    let mut rx = observer.subscribe();
    timeout(Duration::from_secs(2), async {
        loop {
            if let Some(l) = rx.borrow_and_update().clone() {
                if l.instance_id == id && l.fencing_token == token {
                    return;
                }
            }
            rx.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("observer did not see {id} with token {token}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_observed_by_all_and_resign_hands_over_fast() {
    let endpoint = ax_testkit::etcd_endpoint();
    let cfg = config("elect-one");
    let cancel = CancellationToken::new();
    let mut candidates = Vec::new();
    let mut observers = Vec::new();
    for i in 0..3 {
        let client = connect(&endpoint).await;
        observers.push(observe(
            client.clone(),
            &cfg.prefix,
            cfg.request_timeout,
            &cancel,
        ));
        candidates.push(
            Candidate::new(
                client,
                cfg.clone(),
                format!("c{i}"),
                serde_json::json!({"n": i}),
            )
            .unwrap(),
        );
    }
    let probe = connect(&endpoint).await;
    let mut winners = campaign_all(&candidates, &cancel);
    let mut seen = Vec::new();
    let mut last_token = 0;
    let mut next = timeout(Duration::from_secs(3), winners.recv())
        .await
        .expect("a leader within 3 s")
        .unwrap();
    for round in 0..3 {
        let (idx, leader) = next;
        // Nobody else may win while this one leads.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            winners.try_recv().is_err(),
            "two leaders at once in round {round}"
        );
        assert!(leader.is_valid());
        assert!(leader.fencing_token() > last_token, "fencing tokens grow");
        last_token = leader.fencing_token();
        let id = format!("c{idx}");
        assert_eq!(leader.instance_id(), id);
        for o in &observers {
            wait_observed(o, &id, leader.fencing_token()).await;
        }
        let cur = current_leader(&probe, &cfg.prefix, cfg.request_timeout)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cur.instance_id, id);
        assert_eq!(cur.info["n"].as_u64(), Some(idx as u64));
        seen.push(idx);
        let lost = leader.lost();
        let resigned = Instant::now();
        leader.resign().await.unwrap();
        assert!(lost.is_cancelled());
        if round == 2 {
            break;
        }
        next = timeout(Duration::from_secs(1), winners.recv())
            .await
            .expect("successor within 1 s of resign")
            .unwrap();
        let handover = resigned.elapsed();
        assert!(
            handover < Duration::from_secs(1),
            "handover took {handover:?}"
        );
        assert_ne!(next.0, idx);
    }
    seen.sort();
    assert_eq!(seen, vec![0, 1, 2], "each candidate led once");
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_lease_expires_and_successor_wins_within_ttl_plus_one_second() {
    let endpoint = ax_testkit::etcd_endpoint();
    let cfg = config("elect-expire");
    let cancel = CancellationToken::new();
    let a = Candidate::new(
        connect(&endpoint).await,
        cfg.clone(),
        "a",
        serde_json::json!({}),
    )
    .unwrap();
    let b = Candidate::new(
        connect(&endpoint).await,
        cfg.clone(),
        "b",
        serde_json::json!({}),
    )
    .unwrap();
    let leader = a.campaign(&cancel).await.unwrap();
    let first_token = leader.fencing_token();
    let mut winners = campaign_all(std::slice::from_ref(&b), &cancel);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(winners.try_recv().is_err(), "b must not win while a renews");
    let lost = leader.lost();
    let stopped = Instant::now();
    leader.abandon();
    assert!(
        lost.is_cancelled(),
        "abandoning fires the local loss signal at once"
    );
    let (_, l) = timeout(Duration::from_secs(4), winners.recv())
        .await
        .unwrap()
        .unwrap();
    let took = stopped.elapsed();
    assert!(
        took <= Duration::from_secs(3),
        "successor after {took:?}, TTL is 2 s"
    );
    // The lease really had to expire: no early hand-over without resign.
    assert!(
        took >= Duration::from_millis(500),
        "successor after only {took:?}"
    );
    assert!(l.fencing_token() > first_token);
    l.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_key_deleted_or_taken_over_fires_lost() {
    let endpoint = ax_testkit::etcd_endpoint();
    let cfg = config("elect-del");
    let cancel = CancellationToken::new();
    let mut client = connect(&endpoint).await;
    let a = Candidate::new(client.clone(), cfg.clone(), "a", serde_json::json!({})).unwrap();
    let leader = a.campaign(&cancel).await.unwrap();
    let lost = leader.lost();
    client
        .delete(ax_election::leader_key(&cfg.prefix), None)
        .await
        .unwrap();
    timeout(Duration::from_secs(1), lost.cancelled())
        .await
        .expect("lost fires on delete");
    assert_eq!(leader.loss_reason(), Some(LossReason::KeyDeleted));
    assert!(!leader.is_valid());
    // A new campaign works right away.
    let again = timeout(Duration::from_secs(2), a.campaign(&cancel))
        .await
        .unwrap()
        .unwrap();
    assert!(again.fencing_token() > leader.fencing_token());
    drop(leader);
    again.resign().await.unwrap();
    assert_eq!(
        current_leader(&client, &cfg.prefix, cfg.request_timeout)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_etcd_fires_lost_before_ttl_and_election_works_after_restart() {
    let mut server = ax_testkit::EtcdServer::start();
    let endpoint = server.endpoint();
    let mut cfg = config("elect-down");
    cfg.request_timeout = Duration::from_millis(500);
    let cancel = CancellationToken::new();
    let client = connect(&endpoint).await;
    let a = Candidate::new(client.clone(), cfg.clone(), "a", serde_json::json!({})).unwrap();
    let leader = a.campaign(&cancel).await.unwrap();
    // Several renewals succeed before the outage.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(leader.is_valid());
    let lost = leader.lost();
    let killed = Instant::now();
    tokio::task::block_in_place(|| server.kill());
    timeout(Duration::from_secs(2), lost.cancelled())
        .await
        .expect("lost must fire before the 2 s TTL can run out");
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(2), "lost after {took:?}");
    assert!(!leader.is_valid());
    assert_eq!(leader.loss_reason(), Some(LossReason::RenewalOverdue));
    assert!(Instant::now() >= leader.valid_until());

    tokio::task::block_in_place(|| server.restart());
    // The old lease survives a restart until its TTL runs out; then a candidate wins.
    let b = Candidate::new(client.clone(), cfg.clone(), "b", serde_json::json!({})).unwrap();
    let won = timeout(Duration::from_secs(6), b.campaign(&cancel))
        .await
        .expect("a leader after etcd restarted")
        .unwrap();
    assert!(won.fencing_token() > leader.fencing_token());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(won.is_valid(), "renewals work on the restarted etcd");
    won.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_locks_are_exclusive_and_released() {
    let endpoint = ax_testkit::etcd_endpoint();
    let cfg = config("locks");
    let mut client = connect(&endpoint).await;
    // Every lock below lives on this one session (one lease); holders are just values.
    let session = Session::open(&client, &cfg).await.unwrap();
    let a = TaskLock::acquire(&session, "t1", "a")
        .await
        .unwrap()
        .expect("free lock");
    assert!(TaskLock::acquire(&session, "t1", "b")
        .await
        .unwrap()
        .is_none());
    let other = TaskLock::acquire(&session, "t2", "b")
        .await
        .unwrap()
        .expect("other task");
    let held = client.get(a.key(), None).await.unwrap();
    assert_eq!(held.kvs()[0].value(), b"a");
    // Held across several renewals.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(a.is_valid());
    assert!(TaskLock::acquire(&session, "t1", "b")
        .await
        .unwrap()
        .is_none());
    a.release().await.unwrap();
    let b = TaskLock::acquire(&session, "t1", "b")
        .await
        .unwrap()
        .expect("released");
    // Dropping releases in the background.
    drop(b);
    let c = timeout(Duration::from_secs(1), async {
        loop {
            if let Some(g) = TaskLock::acquire(&session, "t1", "c").await.unwrap() {
                return g;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a dropped guard frees the lock quickly");
    // Deleting the key under a holder fires its loss signal.
    let lost = other.lost();
    client.delete(other.key(), None).await.unwrap();
    timeout(Duration::from_secs(1), lost.cancelled())
        .await
        .unwrap();
    assert_eq!(other.loss_reason(), Some(LossReason::KeyDeleted));
    // Losing one key leaves the session and its other keys alone.
    assert!(session.is_valid());
    assert!(c.is_valid());
    c.release().await.unwrap();
    // Closing the session ends every lock on it and removes their keys at once.
    let d = TaskLock::acquire(&session, "t3", "d")
        .await
        .unwrap()
        .expect("free lock");
    let d_lost = d.lost();
    let d_key = d.key().to_string();
    session.close().await.unwrap();
    assert!(d_lost.is_cancelled());
    assert!(!d.is_valid());
    assert_eq!(d.loss_reason(), Some(LossReason::Released));
    assert!(client.get(d_key, None).await.unwrap().kvs().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_refuses_new_locks() {
    let endpoint = ax_testkit::etcd_endpoint();
    let cfg = config("locks-lost");
    let client = connect(&endpoint).await;
    let session = Session::open(&client, &cfg).await.unwrap();
    let a = TaskLock::acquire(&session, "t1", "a")
        .await
        .unwrap()
        .expect("free lock");
    let mut lease = client.lease_client();
    lease.revoke(session.lease_id()).await.unwrap();
    timeout(Duration::from_secs(2), session.lost().cancelled())
        .await
        .expect("a revoked lease is noticed");
    assert!(!a.is_valid());
    let err = TaskLock::acquire(&session, "t2", "a").await.unwrap_err();
    assert!(
        matches!(err, ax_election::ElectionError::SessionLost { .. }),
        "{err}"
    );
    assert!(!err.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_records_live_on_leases() {
    let endpoint = ax_testkit::etcd_endpoint();
    let cfg = config("instances");
    let client = connect(&endpoint).await;
    let record = |id: &str| InstanceRecord {
        instance_id: id.to_string(),
        roles: vec!["scheduler".into(), "worker".into()],
        handlers: vec!["http".into()],
        queues: vec!["default".into()],
        version: "0.1.0".into(),
        address: Some("127.0.0.1:8080".into()),
        host: Some("node-1".into()),
        pid: Some(4242),
        started_at: UtcMillis(1_700_000_000_000),
    };
    let r1 = register_instance(&client, &cfg, &record("i1"))
        .await
        .unwrap();
    let r2 = register_instance(&client, &cfg, &record("i2"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let list = list_instances(&client, &cfg).await.unwrap();
    assert_eq!(
        list,
        vec![record("i1"), record("i2")],
        "records survive past the TTL"
    );
    r1.deregister().await.unwrap();
    let list = list_instances(&client, &cfg).await.unwrap();
    assert_eq!(list, vec![record("i2")]);
    assert!(!r2.lost().is_cancelled());
    drop(r2);
    timeout(Duration::from_secs(1), async {
        while !list_instances(&client, &cfg).await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a dropped registration disappears");

    // The roster still knows i2 (it died without deregistering), not i1 (it stopped cleanly).
    let roster = list_roster(&client, &cfg).await.unwrap();
    assert_eq!(roster.len(), 1, "{roster:?}");
    assert_eq!(roster[0].record, record("i2"));
    assert_eq!(roster[0].gone_at, None);
    let t0 = UtcMillis(1_800_000_000_000);
    let swept = sweep_roster(&client, &cfg, t0).await.unwrap();
    assert_eq!(
        swept,
        SweepReport {
            marked: 1,
            forgotten: 0
        }
    );
    let roster = list_roster(&client, &cfg).await.unwrap();
    assert_eq!(roster[0].gone_at, Some(t0), "stamped when first seen gone");
    // A second sweep keeps the first stamp.
    let later = UtcMillis(t0.0 + 1000);
    assert_eq!(
        sweep_roster(&client, &cfg, later).await.unwrap(),
        SweepReport::default()
    );
    // Registering again under the same id makes it live again.
    let back = register_instance(&client, &cfg, &record("i2"))
        .await
        .unwrap();
    let roster = list_roster(&client, &cfg).await.unwrap();
    assert_eq!(roster[0].gone_at, None);
    drop(back);
    timeout(Duration::from_secs(1), async {
        while !list_instances(&client, &cfg).await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a dropped registration disappears");
    sweep_roster(&client, &cfg, t0).await.unwrap();
    let keep = i64::try_from(ROSTER_KEEP.as_millis()).unwrap();
    let swept = sweep_roster(&client, &cfg, UtcMillis(t0.0 + keep + 1))
        .await
        .unwrap();
    assert_eq!(
        swept,
        SweepReport {
            marked: 0,
            forgotten: 1
        }
    );
    assert!(list_roster(&client, &cfg).await.unwrap().is_empty());
}

#[tokio::test]
async fn config_below_minimum_ttl_is_refused() {
    let endpoint = ax_testkit::etcd_endpoint();
    let mut cfg = config("cfg");
    cfg.ttl = Duration::from_secs(1);
    let err = Candidate::new(connect(&endpoint).await, cfg, "x", serde_json::json!({}))
        .err()
        .expect("refused");
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("minimum"), "{err}");
}
