//! The role against a real etcd: the election, the registry's watch and the state store are
//! the ones a replica runs; Redis is the term tests' in-memory queue, which can panic on a
//! fire as a bug on the fire path would.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ax_election::{Candidate, ElectionConfig};
use ax_registry::{Registry, RegistryConfig};
use ax_scheduler_core::placement::Placement;
use ax_scheduler_core::queue_set::QueueSet;
use ax_scheduler_core::{DispatcherConfig, SystemClock, UtcMillis};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::audit::NoAudit;
use crate::metrics::NoMetrics;
use crate::term::fakes::FakeQueue;
use crate::{LeaderDeps, LeaderSettings};

fn settings(instance: &str) -> LeaderSettings {
    LeaderSettings {
        instance_id: instance.to_owned(),
        placement: Placement::default(),
        shard_orphan_after: Duration::from_secs(30),
        dispatcher: DispatcherConfig::default(),
        events_interval: Duration::from_millis(100),
        flush_interval: Duration::from_millis(100),
        trigger_interval: Duration::from_millis(500),
        enqueue_stall_limit: Duration::from_secs(30),
        redis_unreachable_limit: crate::DEFAULT_REDIS_UNREACHABLE_LIMIT,
        delay_alert_threshold: Duration::from_secs(30),
        max_clock_skew: crate::DEFAULT_MAX_CLOCK_SKEW,
        repair_after: crate::DEFAULT_REPAIR_AFTER,
    }
}

/// Each fire of `id` at most once, sorted; and the fencing tokens they went under.
fn once_each(queue: &FakeQueue, id: &str) -> (Vec<UtcMillis>, BTreeSet<u64>) {
    let pushed: Vec<_> = queue
        .pushed()
        .into_iter()
        .filter(|m| &*m.task_id == id)
        .collect();
    let fires: BTreeSet<UtcMillis> = pushed.iter().map(|m| m.fire_at).collect();
    assert_eq!(fires.len(), pushed.len(), "a fire went twice");
    let tokens = pushed.iter().map(|m| m.fencing_token).collect();
    (fires.into_iter().collect(), tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_that_panics_gives_its_key_up_and_the_role_leads_again_firing_each_fire_once() {
    let client = etcd_client::Client::connect([ax_testkit::etcd_endpoint()], None)
        .await
        .unwrap();
    let prefix = format!("/{}", ax_testkit::unique_name("role-panic"));
    let registry = Registry::new(
        client.clone(),
        RegistryConfig {
            prefix: prefix.clone(),
            ..RegistryConfig::default()
        },
    );
    // A task every second whose executions never end here (nothing runs them): `allow`
    // lets each fire go all the same.
    let spec = r#"{"handler":"log","schedule":{"every":"1s"},"overlap":"allow"}"#;
    client
        .kv_client()
        .put(format!("{prefix}/tasks/ns/a"), spec, None)
        .await
        .unwrap();
    let queue = Arc::new(FakeQueue::default());
    let candidate = Candidate::new(
        client.clone(),
        ElectionConfig {
            prefix: prefix.clone(),
            ..ElectionConfig::default()
        },
        "r1",
        Default::default(),
    )
    .unwrap();
    let deps = LeaderDeps {
        store: Arc::new(registry.clone()),
        registry,
        queue: Arc::clone(&queue) as _,
        candidate,
        clock: Arc::new(SystemClock),
        clock_check: None,
        metrics: Arc::new(NoMetrics),
        alerts: None,
        tracker: TaskTracker::new(),
        audit: Arc::new(NoAudit),
        queue_names: QueueSet::default(),
    };
    let cancel = CancellationToken::new();
    let role = tokio::spawn(crate::run(settings("r1"), deps, cancel.clone()));

    // The third fire from the first one seen panics on its way into the queue.
    let first = loop {
        if let Some(first) = queue.fires_of("a").first() {
            break *first;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let panic_at = UtcMillis(first.0 + 3_000);
    queue.panic_at_fire("a", panic_at);
    // Past the panic, the role's pause before it campaigns again, and a few fires more.
    let until = panic_at.0 + 8_000;
    while UtcMillis::now().0 < until {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), role)
        .await
        .expect("the role stops when cancelled")
        .unwrap();
    let (fires, tokens) = once_each(&queue, "a");
    assert!(
        fires.contains(&panic_at),
        "the fire whose enqueue panicked runs in the next term: {fires:?}"
    );
    assert!(
        fires.iter().any(|f| f.0 >= panic_at.0 + 3_000),
        "fires go on after the panic: {fires:?}"
    );
    assert!(
        tokens.len() >= 2,
        "the fires after the panic go under a new term's token: {tokens:?}"
    );
    client
        .kv_client()
        .delete(
            prefix.as_str(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
}
