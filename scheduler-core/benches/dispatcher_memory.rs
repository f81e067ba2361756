//! Bytes the leader's dispatcher holds per task: `AX_BENCH_TASKS` (default 1 000 000) small
//! `http` tasks (a 60-byte URL, no headers, no payload, every 1 min), each armed with a state
//! as a takeover loads it.
//!
//! A counting global allocator (`stats_alloc`) measures the net bytes held by the dispatcher
//! after it armed every task, spare capacity of its maps included. The specs are counted too:
//! the engine's catalog shares them with the dispatcher (`Arc`), so this is the leader's
//! memory per task but for the catalog's map entry and the process's fixed cost. Run with
//! `cargo bench -p ax-scheduler-core --bench dispatcher_memory`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::hint::black_box;
use std::sync::Arc;

use ax_scheduler_core::{
    Dispatcher, DispatcherConfig, Interner, TaskKey, TaskSpec, TaskState, UtcMillis,
};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn main() {
    let n: usize = std::env::var("AX_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let now = UtcMillis(1_800_000_000_000);
    let region = Region::new(GLOBAL);
    let mut d = Dispatcher::new(DispatcherConfig::default(), now);
    let mut interner = Interner::default();
    for i in 0..n {
        let id = format!("task-{i:07}");
        let json = format!(
            r#"{{"handler":"http","schedule":{{"every":"1m"}},"http":{{"url":"https://hooks.example.com/v1/jobs/{i:07}/run?team=data&env=p"}}}}"#
        );
        // As the catalog keeps it: names interned, the key made of the spec's own strings.
        let mut spec = TaskSpec::from_json(json.as_bytes(), "default", &id).unwrap();
        spec.intern(&mut interner);
        let key = Arc::new(TaskKey::new(spec.namespace.clone(), spec.id.clone()));
        let mut state = TaskState::new(7, now, now);
        state.last_fire_at = Some(UtcMillis(now.0 - 30_000));
        d.upsert(key, Arc::new(spec), 7, Some(state), now);
    }
    let s = region.change();
    let net = s.bytes_allocated as f64 - s.bytes_deallocated as f64;
    assert_eq!(d.armed_len(), n);
    println!(
        "dispatcher with {n} armed tasks: {:.1} MiB, {:.0} bytes per task (spec, state, timer, maps)",
        net / (1024.0 * 1024.0),
        net / n as f64
    );
    drop(black_box(d));
}
