//! The execution history across tasks (one stream) against a real Redis: what each attempt
//! writes, filters and paging newest first, the scan bound, time ranges, retention by age
//! and by count, and one execution's attempts found across retries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ax_queue::new_execution_id;
use ax_queue::{ExecutionEventRecord, ExecutionFilter, HistoryEntry, Queue, QueueConfig};
use ax_scheduler_core::ExecutionId;
use ax_scheduler_core::{AttemptEnd, AttemptOutcome, AttemptOutput, ExecutionEvent, UtcMillis};
use ax_testkit::unique_name;

async fn queue_with(f: impl FnOnce(&mut QueueConfig)) -> Queue {
    let mut cfg = QueueConfig {
        prefix: unique_name("axh"),
        ..QueueConfig::default()
    };
    f(&mut cfg);
    common::connect(cfg).await
}

async fn queue() -> Queue {
    queue_with(|_| {}).await
}

fn entry(id: ExecutionId, attempt: u32, end: AttemptEnd) -> HistoryEntry {
    let now = UtcMillis::now();
    HistoryEntry {
        unstarted: false,
        execution_id: id,
        fire_at: UtcMillis(now.0 - 50),
        started_at: UtcMillis(now.0 - 10),
        finished_at: now,
        lateness_ms: 40,
        duration_ms: 10,
        end,
        worker: "w1".into(),
        attempt,
        queue: "default".into(),
        enqueued_at: Some(UtcMillis(now.0 - 45)),
        first_enqueued_at: Some(UtcMillis(now.0 - 45)),
        output: None,
        lineage: Default::default(),
    }
}

fn failed(retry_at: Option<UtcMillis>) -> AttemptEnd {
    let mut e = AttemptEnd::new(AttemptOutcome::Failed, Some("HTTP 500".into()));
    e.retry_at = retry_at;
    e
}

async fn xlen(q: &Queue) -> usize {
    let mut conn = q.connection();
    redis::cmd("XLEN")
        .arg(q.keys().executions())
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// `n` succeeded attempts of other executions, in namespace `busy`.
async fn record_busy(q: &Queue, n: usize) {
    for _ in 0..n {
        q.record_history(
            "busy",
            "t",
            &entry(new_execution_id(), 0, AttemptEnd::succeeded()),
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn a_report_writes_the_stream_with_the_output_and_the_task_list_without_it() {
    let q = queue().await;
    let id = new_execution_id();
    let mut e = entry(id, 0, failed(None));
    e.output = Some(AttemptOutput::new(
        Some(500),
        b"{\"error\":\"down\"}",
        false,
    ));
    let event = ExecutionEventRecord {
        namespace: "ops".into(),
        task_id: "nightly".into(),
        execution_id: id,
        fire_at: e.fire_at,
        attempt: 0,
        kind: ExecutionEvent::Finished {
            at: e.finished_at,
            end: e.end.clone(),
        },
        shard: None,
    };
    q.report_many(&[(event, Some(e.clone()))]).await.unwrap();
    let page = q
        .executions(&ExecutionFilter::default(), None, 10, 1000)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.next, None);
    let item = &page.items[0];
    assert_eq!(
        (item.namespace.as_str(), item.task_id.as_str()),
        ("ops", "nightly")
    );
    assert_eq!(
        item.entry, e,
        "the stream keeps the whole attempt, output included"
    );
    let listed = q.history("ops", "nightly", 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].output, None,
        "the task's list leaves the output out"
    );
    assert_eq!(listed[0].execution_id, id);
}

#[tokio::test]
async fn filters_page_newest_first_with_a_cursor() {
    let q = queue().await;
    let mut written = Vec::new();
    for i in 0..30u32 {
        let ns = if i % 2 == 0 { "a" } else { "b" };
        let end = if i % 3 == 0 {
            failed(None)
        } else {
            AttemptEnd::succeeded()
        };
        let id = new_execution_id();
        q.record_history(ns, &format!("t{}", i % 4), &entry(id, 0, end.clone()))
            .await
            .unwrap();
        written.push((ns, format!("t{}", i % 4), end.label(), id));
    }
    let filter = ExecutionFilter {
        namespace: Some("a".into()),
        outcomes: vec!["failed".into()],
        ..ExecutionFilter::default()
    };
    let expected: Vec<ExecutionId> = written
        .iter()
        .rev()
        .filter(|(ns, _, out, _)| *ns == "a" && *out == "failed")
        .map(|w| w.3)
        .collect();
    assert_eq!(expected.len(), 5);
    let mut got = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = q.executions(&filter, cursor, 2, 1000).await.unwrap();
        assert!(page.items.len() <= 2);
        got.extend(page.items.iter().map(|i| i.entry.execution_id));
        pages += 1;
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(got, expected, "newest first, every match once");
    assert_eq!(pages, 3);

    let by_task = ExecutionFilter {
        namespace: Some("b".into()),
        task_id: Some("t1".into()),
        ..ExecutionFilter::default()
    };
    let page = q.executions(&by_task, None, 100, 1000).await.unwrap();
    let expected: Vec<ExecutionId> = written
        .iter()
        .rev()
        .filter(|(ns, t, _, _)| *ns == "b" && t == "t1")
        .map(|w| w.3)
        .collect();
    let got: Vec<ExecutionId> = page.items.iter().map(|i| i.entry.execution_id).collect();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn a_rare_filter_stops_at_the_scan_bound_and_goes_on_from_its_cursor() {
    let q = queue().await;
    let rare = new_execution_id();
    q.record_history("rare", "t", &entry(rare, 0, AttemptEnd::succeeded()))
        .await
        .unwrap();
    record_busy(&q, 450).await;
    let filter = ExecutionFilter {
        namespace: Some("rare".into()),
        ..ExecutionFilter::default()
    };
    let first = q.executions(&filter, None, 10, 100).await.unwrap();
    assert!(first.items.is_empty(), "100 scanned, no match yet");
    let mut cursor = first.next.expect("a cursor to go on from");
    let mut calls = 1;
    let found = loop {
        let page = q.executions(&filter, Some(cursor), 10, 100).await.unwrap();
        calls += 1;
        if !page.items.is_empty() {
            assert_eq!(page.next, None, "the oldest entry ends the range");
            break page.items;
        }
        cursor = page.next.expect("not done before the match");
    };
    assert_eq!(found[0].entry.execution_id, rare);
    assert_eq!(calls, 5, "451 entries at 100 per call");
}

#[tokio::test]
async fn a_time_range_is_an_id_range() {
    let q = queue().await;
    let mut batches = Vec::new();
    for b in 0..3 {
        let mut ids = Vec::new();
        for _ in 0..3 {
            let id = new_execution_id();
            q.record_history(
                "ns",
                &format!("b{b}"),
                &entry(id, 0, AttemptEnd::succeeded()),
            )
            .await
            .unwrap();
            ids.push(id);
        }
        batches.push(ids);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let all = q
        .executions(&ExecutionFilter::default(), None, 100, 1000)
        .await
        .unwrap()
        .items;
    let times = |task: &str| -> Vec<i64> {
        all.iter()
            .filter(|i| i.task_id == task)
            .map(|i| i.position.ms as i64)
            .collect()
    };
    let middle = times("b1");
    let filter = ExecutionFilter {
        since: Some(UtcMillis(*middle.iter().min().unwrap())),
        until: Some(UtcMillis(*middle.iter().max().unwrap())),
        ..ExecutionFilter::default()
    };
    let page = q.executions(&filter, None, 100, 1000).await.unwrap();
    let got: Vec<ExecutionId> = page.items.iter().map(|i| i.entry.execution_id).collect();
    let want: Vec<ExecutionId> = batches[1].iter().rev().copied().collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn retention_trims_the_stream_by_age() {
    let q = queue_with(|c| c.execution_history_retention = Duration::from_secs(1)).await;
    for _ in 0..300 {
        q.record_history(
            "ns",
            "t",
            &entry(new_execution_id(), 0, AttemptEnd::succeeded()),
        )
        .await
        .unwrap();
    }
    assert!(xlen(&q).await >= 300);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    q.record_history(
        "ns",
        "t",
        &entry(new_execution_id(), 0, AttemptEnd::succeeded()),
    )
    .await
    .unwrap();
    let left = xlen(&q).await;
    assert!(
        left < 50,
        "entries older than the retention are gone: {left} left"
    );
}

#[tokio::test]
async fn retention_trims_the_stream_by_count() {
    let q = queue_with(|c| c.execution_history_max_entries = 50).await;
    for _ in 0..500 {
        q.record_history(
            "ns",
            "t",
            &entry(new_execution_id(), 0, AttemptEnd::succeeded()),
        )
        .await
        .unwrap();
    }
    let left = xlen(&q).await;
    assert!((50..150).contains(&left), "about 50 kept: {left}");
}

#[tokio::test]
async fn an_executions_attempts_are_found_in_order_across_its_retries() {
    let q = queue().await;
    let noise = |q: &Queue, n: usize| {
        let q = q.clone();
        async move {
            for _ in 0..n {
                q.record_history(
                    "ns",
                    "other",
                    &entry(new_execution_id(), 0, AttemptEnd::succeeded()),
                )
                .await
                .unwrap();
            }
        }
    };
    let id = new_execution_id();
    noise(&q, 30).await;
    let retry_at = UtcMillis(UtcMillis::now().0 + 300);
    q.record_history("ns", "t", &entry(id, 0, failed(Some(retry_at))))
        .await
        .unwrap();
    noise(&q, 200).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    q.record_history("ns", "t", &entry(id, 1, failed(None)))
        .await
        .unwrap();
    noise(&q, 30).await;
    let (attempts, complete) = q.execution_attempts(id).await.unwrap();
    assert!(complete);
    let got: Vec<(u32, &str)> = attempts
        .iter()
        .map(|i| (i.entry.attempt, i.entry.end.label()))
        .collect();
    assert_eq!(got, [(0, "retrying"), (1, "failed")]);
    let (none, complete) = q.execution_attempts(new_execution_id()).await.unwrap();
    assert!(none.is_empty() && complete);
}

#[tokio::test]
async fn attempts_are_found_by_a_fragment_of_their_id_within_the_scan_bound() {
    let q = queue().await;
    let wanted = new_execution_id();
    let suffix = &wanted.to_string()[28..];
    q.record_history(
        "ops",
        "t",
        &entry(wanted, 0, failed(Some(UtcMillis::now()))),
    )
    .await
    .unwrap();
    q.record_history("ops", "t", &entry(wanted, 1, AttemptEnd::succeeded()))
        .await
        .unwrap();
    record_busy(&q, 30).await;
    let (found, complete) = q.attempts_containing(suffix, 100, 1000).await.unwrap();
    assert!(complete, "the whole stream was scanned");
    let ids: Vec<ExecutionId> = found.iter().map(|i| i.entry.execution_id).collect();
    assert_eq!(ids, [wanted, wanted], "both attempts, newest first");
    assert_eq!(found[0].entry.attempt, 1);
    assert_eq!(found[0].namespace, "ops");

    let (found, complete) = q.attempts_containing(suffix, 100, 10).await.unwrap();
    assert!(found.is_empty(), "the match is older than the newest 10");
    assert!(!complete, "the bound stopped the scan");

    let (found, _) = q
        .attempts_containing("0123456789ab", 100, 1000)
        .await
        .unwrap();
    assert!(found.is_empty(), "{found:?}");
}
