//! The leader's cost of a dependency edge: a first task with N children (fan-out), and after
//! them N/16 tasks of 16 parents each (fan-in, 16 being the most parents a task may have),
//! one run through the dispatcher per iteration: the first task's end, the N steps
//! dispatched and ended, the N/16 fan-in steps dispatched and ended. The figure per edge is
//! the time divided by the 2N edges the run crosses. (etcd writes are the engine's and are
//! the same per task as any execution's end.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use ax_scheduler_core::{
    AttemptEnd, AttemptOutcome, Dispatcher, DispatcherConfig, ExecutionEvent, ExecutionId, TaskKey,
    TaskSpec, UtcMillis,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const T0: i64 = 1_800_000_000_000;

fn succeeded() -> ExecutionEvent {
    ExecutionEvent::Finished {
        at: UtcMillis(T0),
        end: AttemptEnd {
            outcome: AttemptOutcome::Succeeded,
            error: None,
            retry_at: None,
        },
    }
}

fn chain(n: usize) -> Dispatcher {
    let mut d = Dispatcher::new(DispatcherConfig::default(), UtcMillis(T0));
    let root = TaskSpec::from_json(
        br#"{"handler":"noop","schedule":{"every":"1h"}}"#,
        "b",
        "root",
    )
    .unwrap();
    d.upsert(TaskKey::new("b", "root"), root, 1, None, UtcMillis(T0));
    let mut group = Vec::new();
    for i in 0..n {
        let id = format!("c{i}");
        let spec = TaskSpec::from_json(
            br#"{"handler":"noop","depends_on":[{"task":"root"}]}"#,
            "b",
            &id,
        )
        .unwrap();
        d.upsert(TaskKey::new("b", id.as_str()), spec, 1, None, UtcMillis(T0));
        group.push(serde_json::json!({ "task": format!("b/{id}") }));
        if group.len() == 16 {
            let sink_id = format!("sink{}", i / 16);
            let sink = serde_json::json!({ "handler": "noop", "depends_on": group });
            let sink = TaskSpec::from_json(sink.to_string().as_bytes(), "b", &sink_id).unwrap();
            d.upsert(
                TaskKey::new("b", sink_id.as_str()),
                sink,
                1,
                None,
                UtcMillis(T0),
            );
            group = Vec::new();
        }
    }
    d
}

fn one_run(d: &mut Dispatcher, run: ExecutionId, now: UtcMillis) -> usize {
    d.on_execution(&TaskKey::new("b", "root"), run, 0, &succeeded(), now);
    let steps = d.poll(now);
    let mut dispatched = steps.len();
    for s in &steps {
        let id = s.run_now.unwrap();
        d.on_execution(&s.key, id, 0, &succeeded(), now);
    }
    let last = d.poll(now);
    dispatched += last.len();
    for s in &last {
        let id = s.run_now.unwrap();
        d.on_execution(&s.key, id, 0, &succeeded(), now);
    }
    d.take_state_writes(UtcMillis::MAX);
    d.take_notices();
    dispatched
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("dependency_run");
    g.measurement_time(Duration::from_secs(3));
    for n in [16usize, 160, 1600] {
        g.throughput(Throughput::Elements(2 * n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            let mut d = chain(n);
            let mut run = 1u128;
            let mut now = T0;
            b.iter(|| {
                run += 1;
                now += 1;
                let sent = one_run(&mut d, ExecutionId::from_u128(run), UtcMillis(now));
                assert_eq!(sent, n + n / 16);
                black_box(sent)
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
