//! Tests of the JSON form: the problems reported (their wording, paths and order), the
//! defaults, and that writing a spec back and reading it again gives the same spec.
//!
//! They go through `TaskSpec::from_json` and `to_json` as a caller does rather than one
//! section reader at a time, because the order of the problems across sections is part of
//! what they check.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::task::{
    CommandCall, DependOn, Fanout, HttpTarget, MisfirePolicy, OverlapPolicy, RetryPolicy, Schedule,
    TaskSpec, DEFAULT_DEPENDENCY_WITHIN, DEFAULT_PRIORITY, DEFAULT_QUEUE, DEFAULT_TIMEOUT,
    DEFAULT_VERSION, MAX_HTTP_HEADERS, MAX_HTTP_HEADER_BYTES, MAX_LABELS, MAX_LABEL_BYTES,
    MAX_URL_BYTES,
};
use crate::time::UtcMillis;

fn parse(json: &str) -> Result<TaskSpec, ValidationErrors> {
    TaskSpec::from_json(json.as_bytes(), "default", "t1")
}

fn errors(json: &str) -> Vec<String> {
    match parse(json) {
        Ok(_) => Vec::new(),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn minimal_spec_gets_documented_defaults() {
    let spec = parse(r#"{"handler":"log","schedule":{"every":"10s"}}"#).unwrap();
    assert_eq!(&*spec.id, "t1");
    assert_eq!(&*spec.namespace, "default");
    assert_eq!(spec.schedule, Schedule::Every(Duration::from_secs(10)));
    assert_eq!(&*spec.queue, DEFAULT_QUEUE);
    assert_eq!(spec.priority, DEFAULT_PRIORITY);
    assert_eq!(spec.timeout, DEFAULT_TIMEOUT);
    assert_eq!(*spec.retry, RetryPolicy::default());
    assert_eq!(spec.misfire, MisfirePolicy::FireOnce);
    assert_eq!(spec.overlap, OverlapPolicy::Forbid);
    assert!(!spec.paused);
    assert_eq!(spec.version, DEFAULT_VERSION);
    assert_eq!(spec.payload, Value::Null);
    assert_eq!(spec.created_at, None);
    let cron = parse(r#"{"handler":"log","schedule":{"cron":"@daily"}}"#).unwrap();
    assert_eq!(
        cron.schedule,
        Schedule::Cron {
            expr: "@daily".into(),
            timezone: "UTC".into()
        }
    );
}

#[test]
fn a_fanout_of_pieces_is_shards_in_json() {
    let spec =
        parse(r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{"shards":3}}"#).unwrap();
    assert_eq!(spec.fanout, Some(Fanout::Pieces(3)));
    assert_eq!(
        serde_json::to_value(Fanout::Pieces(3)).unwrap(),
        serde_json::json!({"shards": 3})
    );
    let back: serde_json::Value = serde_json::from_slice(&spec.to_json()).unwrap();
    assert_eq!(back["fanout"], serde_json::json!({"shards": 3}));
}

#[test]
fn broadcast_fanout_parses_round_trips_and_excludes_shards() {
    let spec = parse(r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{"broadcast":true}}"#)
        .unwrap();
    assert_eq!(spec.fanout, Some(Fanout::Broadcast));
    assert_eq!(
        spec.overlap,
        OverlapPolicy::Allow,
        "its pieces run side by side"
    );
    let again = TaskSpec::from_json(&spec.to_json(), "default", "t1");
    assert_eq!(again.unwrap().fanout, Some(Fanout::Broadcast));
    let both = errors(
        r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{"broadcast":true,"shards":3}}"#,
    );
    assert!(
        both.iter()
            .any(|e| e.starts_with("fanout:") && e.contains("not both")),
        "{both:?}"
    );
    let off =
        errors(r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{"broadcast":false}}"#);
    assert!(
        off.iter()
            .any(|e| e.starts_with("fanout.broadcast:") && e.contains("found false")),
        "{off:?}"
    );
    let empty = errors(r#"{"handler":"log","schedule":{"every":"10s"},"fanout":{}}"#);
    assert!(
        empty.iter().any(|e| e.contains("broadcast: true")),
        "{empty:?}"
    );
}

#[test]
fn full_example_parses() {
    let spec = parse(
        r#"{"handler":"http","schedule":{"cron":"0 */5 * * * *","timezone":"Asia/Shanghai"},
            "http":{"url":"https://example.com/hook","headers":{"X-Token":"abc"}},"payload":{"a":1},"priority":7,
            "timeout":"30s","retry":{"max_retries":3,"initial_interval":"10s","max_interval":"10m",
            "multiplier":3,"jitter":0.2,"max_elapsed":"1h"},"misfire":"fire_once","overlap":"forbid",
            "paused":false,"labels":{"team":"data"},"queue":"default","version":1,"idempotency_key":null,
            "created_at":"2026-01-01T00:00:00Z","id":"t1","namespace":"default"}"#,
    )
    .unwrap();
    assert_eq!(spec.priority, 7);
    assert_eq!(
        spec.http.as_ref().map(|h| h.url.as_str()),
        Some("https://example.com/hook")
    );
    assert_eq!(spec.created_at, Some(UtcMillis(1_767_225_600_000)));
    assert_eq!(spec.retry.max_elapsed, Some(Duration::from_secs(3600)));
    assert_eq!(spec.http.map(|h| h.follow_redirects), Some(false));
}

#[test]
fn follow_redirects_is_a_bool_of_the_http_target() {
    let on = parse(
        r#"{"handler":"http","schedule":{"every":"1m"},
            "http":{"url":"https://example.com/hook","follow_redirects":true}}"#,
    )
    .unwrap();
    assert_eq!(on.http.map(|h| h.follow_redirects), Some(true));
    let errs = errors(
        r#"{"handler":"http","schedule":{"every":"1m"},
            "http":{"url":"https://example.com/hook","follow_redirects":"yes"}}"#,
    );
    assert_eq!(
        errs,
        ["http.follow_redirects: must be true or false, found a string"]
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let errs = errors(
        r#"{"handler":"http","schedule":{"cron":"0 61 * * *","every":"5s"},"priority":12,
            "timeout":"0s","retry":{"multiplier":0.5,"jitter":1.5,"max_retries":-1,"bogus":1},
            "misfire":"sometimes","colour":"red","id":"other","labels":{"a":1}}"#,
    );
    let expected = [
        "colour: unknown field `colour`",
        "id: `other` does not match the id in the key (`t1`)",
        "schedule: more than one schedule kind (every, cron); give exactly one",
        "http.url: missing",
        "priority: priority 12 is out of range 0-9 (0 lowest, 9 highest)",
        "timeout: `0s` is zero",
        "retry.bogus: unknown field `bogus`",
        "retry.max_retries: max_retries -1 is out of range 0-100",
        "retry.multiplier: 0.5 is out of range 1-100",
        "retry.jitter: 1.5 is out of range 0-1",
        "misfire: `sometimes` is not one of fire_once, fire_all, skip",
        "labels.a: must be a string, found a number",
    ];
    for e in expected {
        assert!(
            errs.iter().any(|x| x.starts_with(e)),
            "missing {e:?} in {errs:#?}"
        );
    }
    assert_eq!(errs.len(), expected.len(), "{errs:#?}");
}

#[test]
fn schedule_problems() {
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"cron":"61 * * * *"}}"#),
        vec!["schedule.cron: minute 61 is out of range 0-59"]
    );
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"cron":"0 * * * *","timezone":"Asia/Shangai"}}"#)
            .len(),
        1
    );
    assert!(errors(
        r#"{"handler":"log","schedule":{"cron":"0 * * * *","timezone":"Asia/Shangai"}}"#
    )[0]
    .starts_with("schedule.timezone: unknown time zone `Asia/Shangai`"));
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"every":"500ms"}}"#),
        vec!["schedule.every: 500ms is below the minimum of 1s"]
    );
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"every":"1m"},"idempotency_key":"k"}"#),
        vec!["idempotency_key: applies to one-shot tasks (schedule at or delay): each fire of a periodic task is enqueued once already, and one key shared by every fire would let the task run once per dedupe window (24 h); remove it"]
    );
    assert!(
        errors(r#"{"handler":"log","schedule":{"cron":"0 * * * *"},"idempotency_key":"k"}"#)
            .iter()
            .any(|e| e.starts_with("idempotency_key: applies to one-shot tasks"))
    );
    assert!(
        errors(r#"{"handler":"log","schedule":{"delay":"5m"},"idempotency_key":"k"}"#).is_empty()
    );
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"delay":"-5m"}}"#),
        vec!["schedule.delay: `-5m` is negative; durations must be positive"]
    );
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"delay":300}}"#),
        vec!["schedule.delay: must be a duration string like \"30s\", found a number; write durations as strings with a unit, e.g. \"300s\" or \"300ms\""]
    );
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"at":"tomorrow"}}"#).len(),
        1
    );
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"every":"1m","timezone":"UTC"}}"#),
        vec!["schedule.timezone: only applies to a cron schedule"]
    );
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{}}"#),
        vec!["schedule: no schedule kind; give exactly one of at, delay, every, cron"]
    );
    assert_eq!(
        errors(r#"{"handler":"log"}"#),
        vec!["schedule: missing; give one of {\"at\": ...}, {\"delay\": ...}, {\"every\": ...}, {\"cron\": ...}"]
    );
}

#[test]
fn sizes_of_labels_headers_and_url_are_bounded_and_masks_refused() {
    let many_labels: String = (0..=MAX_LABELS)
        .map(|i| format!("\"l{i}\":\"v\""))
        .collect::<Vec<_>>()
        .join(",");
    let e = errors(&format!(
        r#"{{"handler":"log","schedule":{{"every":"1m"}},"labels":{{{many_labels}}}}}"#
    ));
    assert_eq!(e, vec!["labels: has 65 labels; at most 64 are allowed"]);
    let e = errors(&format!(
        r#"{{"handler":"log","schedule":{{"every":"1m"}},"labels":{{"k":"{}"}}}}"#,
        "v".repeat(MAX_LABEL_BYTES + 1)
    ));
    assert_eq!(
        e,
        vec!["labels.k: key and value may be at most 256 bytes each"]
    );

    let http = |target: &str| {
        errors(&format!(
            r#"{{"handler":"http","schedule":{{"every":"1m"}},"http":{target}}}"#
        ))
    };
    let e = http(&format!(
        r#"{{"url":"https://h/{}"}}"#,
        "p".repeat(MAX_URL_BYTES)
    ));
    assert_eq!(
        e,
        vec!["http.url: is 2058 bytes long; at most 2048 are allowed"]
    );
    let headers: String = (0..=MAX_HTTP_HEADERS)
        .map(|i| format!("\"h{i}\":\"v\""))
        .collect::<Vec<_>>()
        .join(",");
    let e = http(&format!(
        r#"{{"url":"https://h/","headers":{{{headers}}}}}"#
    ));
    assert_eq!(
        e,
        vec!["http.headers: has 33 headers; at most 32 are allowed"]
    );
    let e = http(&format!(
        r#"{{"url":"https://h/","headers":{{"X-Big":"{}"}}}}"#,
        "b".repeat(MAX_HTTP_HEADER_BYTES)
    ));
    assert_eq!(
        e,
        vec!["http.headers.X-Big: is 8197 bytes with its name; at most 8192 are allowed"]
    );
    // A spec copied from a masked view cannot overwrite its secrets with the mask.
    let e = http(r#"{"url":"https://***@h/x?t=***","headers":{"Authorization":"***"}}"#);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].starts_with("http.url: holds `***`"), "{e:?}");
    assert!(
        e[1].starts_with("http.headers.Authorization: holds `***`"),
        "{e:?}"
    );
    assert!(http(r#"{"url":"https://h/x","headers":{"Authorization":"Bearer t"}}"#).is_empty());
    // Environment values show masked too, so the same holds for them.
    let e = errors(
        r#"{"handler":"command","schedule":{"every":"1m"},"command":{"name":"c","env":{"TOKEN":"***"}}}"#,
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("command.env.TOKEN: holds `***`"), "{e:?}");
}

#[test]
fn command_calls_name_a_configured_command_with_bounded_args_and_env() {
    let cmd = |call: &str| {
        errors(&format!(
            r#"{{"handler":"command","schedule":{{"every":"1m"}},"command":{call}}}"#
        ))
    };
    let spec = parse(
        r#"{"handler":"command","schedule":{"every":"1m"},
            "command":{"name":"backup","args":["--full","a b"],"env":{"TARGET":"s3://b/x","_x1":""}}}"#,
    )
    .unwrap();
    let call = spec.command.as_ref().unwrap();
    assert_eq!(call.name, "backup");
    assert_eq!(call.args, ["--full", "a b"]);
    assert_eq!(call.env["TARGET"], "s3://b/x");
    assert_eq!(
        TaskSpec::from_json(&spec.to_json(), "default", "t1").unwrap(),
        spec
    );

    assert_eq!(
        errors(r#"{"handler":"command","schedule":{"every":"1m"}}"#),
        vec!["command.name: missing; the command handler needs {\"command\": {\"name\": \"...\"}}, naming a command of the replicas' [worker.commands]"]
    );
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"every":"1m"},"command":{"name":"x"}}"#),
        vec!["command: is only read by the `command` handler, not `log`; remove it"]
    );
    assert_eq!(
        cmd(r#"{"name":"b","path":"/bin/sh"}"#),
        vec!["command.path: unknown field `path`; allowed: name, args, env"]
    );
    assert_eq!(
        cmd(r#"{"args":[]}"#),
        vec!["command.name: missing; name a command of the replicas' [worker.commands] (a task never gives a path)"]
    );
    assert_eq!(
        cmd(r#"{"name":"/bin/sh"}"#),
        vec!["command.name: `/bin/sh` contains '/'; use only letters, digits, `.`, `_` and `-`"]
    );
    assert_eq!(
        cmd(r#""backup""#),
        vec![r#"command: must be an object like {"name": "backup"}, found a string"#]
    );
    assert_eq!(
        cmd(r#"{"name":"b","args":"--full"}"#),
        vec!["command.args: must be an array of strings, found a string"]
    );
    assert_eq!(
        cmd(r#"{"name":"b","args":["ok",1,"a\u0000b"]}"#),
        vec![
            "command.args.1: must be a string, found a number",
            "command.args.2: contains a NUL byte, which no program can receive"
        ]
    );
    let many = vec!["\"a\""; 65].join(",");
    assert_eq!(
        cmd(&format!(r#"{{"name":"b","args":[{many}]}}"#)),
        vec!["command.args: has 65 arguments; at most 64 are allowed"]
    );
    assert_eq!(
        cmd(&format!(
            r#"{{"name":"b","args":["{}"]}}"#,
            "x".repeat(4097)
        )),
        vec!["command.args.0: is 4097 bytes long; at most 4096 are allowed"]
    );
    assert_eq!(
        cmd(r#"{"name":"b","env":{"N":1}}"#),
        vec!["command.env.N: must be a string, found a number"]
    );
    let e = cmd(r#"{"name":"b","env":{"1X":"a","A-B":"a","AX_TASK":"a","OK":"a\u0000"}}"#);
    assert_eq!(e.len(), 4, "{e:?}");
    assert!(
        e[0].starts_with("command.env.1X: `1X` is not an environment variable name"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("command.env.A-B: `A-B` is not an environment variable name"),
        "{e:?}"
    );
    assert_eq!(
        e[2],
        "command.env.AX_TASK: `AX_TASK` is reserved: ax sets the AX_ variables of a command itself"
    );
    assert_eq!(
        e[3],
        "command.env.OK: contains a NUL byte, which no program can receive"
    );
    let env: Vec<String> = (0..33).map(|i| format!(r#""V{i}":"x""#)).collect();
    assert_eq!(
        cmd(&format!(r#"{{"name":"b","env":{{{}}}}}"#, env.join(","))),
        vec!["command.env: has 33 variables; at most 32 are allowed"]
    );
}

#[test]
fn names_http_and_payload() {
    let e = TaskSpec::from_json(
        br#"{"handler":"log","schedule":{"every":"1m"}}"#,
        "a/b",
        "x y",
    )
    .unwrap_err();
    assert!(e.has("namespace") && e.has("id"), "{e}");
    assert!(e.to_string().contains("`x y` contains ' '"), "{e}");
    assert_eq!(
        check_name(&"a".repeat(129)).unwrap_err(),
        "is 129 characters long; at most 128 are allowed"
    );
    assert!(check_name("report.daily-2_x").is_ok());

    assert_eq!(
        errors(r#"{"handler":"http","schedule":{"every":"1m"},"http":{"url":"ftp://x"}}"#),
        vec!["http.url: `ftp://x/` must start with http:// or https://"]
    );
    assert_eq!(
        errors(r#"{"handler":"http","schedule":{"every":"1m"},"http":{"url":"http://:80/x"}}"#),
        vec!["http.url: `http://***` is not a valid URL: empty host"]
    );
    assert_eq!(
        errors(
            r#"{"handler":"http","schedule":{"every":"1m"},"http":{"url":"ftp://u:pw@x/?t=s"}}"#
        ),
        vec!["http.url: `ftp://***@x/?t=***` must start with http:// or https://"]
    );
    assert_eq!(
        errors(r#"{"handler":"log","schedule":{"every":"1m"},"http":{"url":"http://x"}}"#),
        vec!["http: is only read by the `http` handler, not `log`; remove it"]
    );
    assert_eq!(
        errors(r#"{"handler":"","schedule":{"every":"1m"}}"#),
        vec!["handler: must not be empty"]
    );

    let big = format!(
        r#"{{"handler":"log","schedule":{{"every":"1m"}},"payload":"{}"}}"#,
        "x".repeat(40_000)
    );
    assert_eq!(
        errors(&big),
        vec!["payload: is 40002 bytes serialized; the limit is 32768 bytes (32 KiB); store large data elsewhere and pass a reference"]
    );
    assert_eq!(
        errors("[1]"),
        vec!["a task must be a JSON object, found an array"]
    );
    assert!(errors("{").len() == 1 && errors("{")[0].starts_with("not valid JSON"));
}

#[test]
fn retry_rules() {
    assert_eq!(
        errors(
            r#"{"handler":"log","schedule":{"every":"1m"},"retry":{"initial_interval":"1m","max_interval":"10s"}}"#
        ),
        vec!["retry.max_interval: 10s is below initial_interval 1m"]
    );
    let s = parse(r#"{"handler":"log","schedule":{"every":"1m"},"retry":{"max_elapsed":null,"max_retries":0}}"#)
        .unwrap();
    assert_eq!(s.retry.max_elapsed, None);
    assert_eq!(s.retry.max_retries, 0);
}

mod round_trip {
    use super::*;
    use proptest::prelude::*;

    fn duration(min_ms: u64) -> impl Strategy<Value = Duration> {
        (min_ms..10_000_000u64).prop_map(Duration::from_millis)
    }

    fn schedule() -> impl Strategy<Value = Schedule> {
        prop_oneof![
            (0i64..4_000_000_000_000).prop_map(|t| Schedule::At(UtcMillis(t))),
            duration(1).prop_map(Schedule::Delay),
            duration(1000).prop_map(Schedule::Every),
            (
                prop::sample::select(vec![
                    "* * * * *",
                    "0 */5 * * * *",
                    "30 2 * * MON-FRI",
                    "@daily",
                    "0 0 L * ?"
                ]),
                prop::sample::select(vec![
                    "UTC",
                    "Asia/Shanghai",
                    "America/New_York",
                    "Australia/Sydney"
                ]),
            )
                .prop_map(|(e, z)| Schedule::Cron {
                    expr: e.into(),
                    timezone: z.into()
                }),
        ]
    }

    fn spec() -> impl Strategy<Value = TaskSpec> {
        (
            (
                prop::sample::select(vec!["http", "log", "report.daily", "command"]),
                schedule(),
                0u8..=9,
                duration(1),
            ),
            (
                0u32..=100,
                duration(1),
                1u32..=40,
                0u32..=20,
                prop::option::of(duration(1)),
            ),
            (
                prop::sample::select(vec![
                    MisfirePolicy::FireOnce,
                    MisfirePolicy::FireAll,
                    MisfirePolicy::Skip,
                ]),
                prop::sample::select(vec![
                    OverlapPolicy::Allow,
                    OverlapPolicy::Forbid,
                    OverlapPolicy::Replace,
                ]),
                any::<bool>(),
                any::<u64>(),
            ),
            (
                prop::option::of("[a-z0-9:-]{1,40}"),
                prop::option::of(0i64..4_000_000_000_000),
                prop::collection::btree_map("[a-z]{1,8}", "[ -~]{0,12}", 0..3),
                prop::option::of(("[ -~]{0,20}", any::<i32>())),
                any::<bool>(),
            ),
        )
            .prop_map(
                |(
                    (handler, schedule, priority, timeout),
                    (retries, init, mult, jit, elapsed),
                    (misfire, overlap, paused, version),
                    (key, created, labels, payload, follow_redirects),
                )| {
                    let http = (handler == "http").then(|| HttpTarget {
                        url: "https://example.com/hook".into(),
                        // Names the client frames the request with are refused (`te`).
                        headers: labels
                            .iter()
                            .filter(|(k, v)| {
                                !crate::task::is_reserved_http_header(k) && !v.contains("***")
                            })
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                        follow_redirects,
                        await_completion: follow_redirects && priority % 2 == 0,
                    });
                    let command = (handler == "command").then(|| CommandCall {
                        name: "backup".into(),
                        args: labels.values().cloned().collect(),
                        // A value holding `***` reads as a masked secret and is refused.
                        env: labels
                            .iter()
                            .filter(|(_, v)| !v.contains("***"))
                            .map(|(k, v)| (k.to_uppercase(), v.clone()))
                            .collect(),
                    });
                    // Periodic tasks take no idempotency key.
                    let key =
                        key.filter(|_| matches!(schedule, Schedule::At(_) | Schedule::Delay(_)));
                    TaskSpec {
                        id: "t1".into(),
                        namespace: "default".into(),
                        handler: handler.into(),
                        schedule,
                        payload: payload
                            .map_or(Value::Null, |(s, n)| serde_json::json!({"s": s, "n": n})),
                        http,
                        command,
                        queue: "q-1".into(),
                        priority,
                        concurrency: None,
                        timeout,
                        retry: Arc::new(RetryPolicy {
                            max_retries: retries,
                            initial_interval: init,
                            max_interval: init * 2,
                            multiplier: f64::from(mult) / 4.0 + 0.75,
                            jitter: f64::from(jit) / 20.0,
                            max_elapsed: elapsed,
                        }),
                        idempotency_key: key,
                        misfire,
                        overlap,
                        paused,
                        fanout: None,
                        depends_on: Vec::new(),
                        expect_success_within: (version % 3 == 0).then(|| timeout * 2),
                        labels,
                        version,
                        created_at: created.map(UtcMillis),
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn to_json_then_from_json_is_identity(spec in spec()) {
            let json = spec.to_json();
            let back = TaskSpec::from_json(&json, "default", "t1");
            prop_assert_eq!(back.as_ref(), Ok(&spec), "{}", String::from_utf8_lossy(&json));
            prop_assert!(spec.validate().is_ok());
        }
    }
}

#[test]
fn depends_on_replaces_the_schedule_and_names_each_parent_once() {
    let json = br#"{"handler":"log","depends_on":[{"task":"r"},{"task":"other/x","on":"any","within":"1h"}]}"#;
    let spec = TaskSpec::from_json(json, "ns", "c").unwrap();
    assert_eq!(spec.schedule, Schedule::Dependent);
    assert_eq!(spec.depends_on[0].task, "ns/r");
    assert_eq!(spec.depends_on[0].on, DependOn::Success);
    assert_eq!(spec.depends_on[0].within, DEFAULT_DEPENDENCY_WITHIN);
    assert_eq!(spec.depends_on[1].task, "other/x");
    let back = TaskSpec::from_json(&spec.to_json(), "ns", "c").unwrap();
    assert_eq!(back, spec);
    for (bad, expected) in [
        (
            r#"{"handler":"log","schedule":{"every":"1m"},"depends_on":[{"task":"r"}]}"#,
            "schedule: a task with depends_on fires when its parents finish",
        ),
        (
            r#"{"handler":"log","depends_on":[{"task":"c"}]}"#,
            "cannot depend on itself",
        ),
        (
            r#"{"handler":"log","depends_on":[{"task":"r"},{"task":"ns/r"}]}"#,
            "`ns/r` is listed twice",
        ),
        (
            r#"{"handler":"log","depends_on":[{"task":"r","within":"30days"}]}"#,
            "depends_on[0].within: is above the maximum",
        ),
        (r#"{"handler":"log","depends_on":[]}"#, "lists 0 parents"),
        (
            r#"{"handler":"log","depends_on":[{"task":"r","on":"maybe"}]}"#,
            "depends_on[0].on: `maybe` is not one of success, failure, any",
        ),
        (
            r#"{"handler":"log","depends_on":[{"task":"a b"}]}"#,
            "depends_on[0].task",
        ),
    ] {
        let err = TaskSpec::from_json(bad.as_bytes(), "ns", "c")
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{bad}: {err}");
    }
}

#[test]
fn expect_success_within_is_a_positive_duration() {
    let ok = TaskSpec::from_json(
        br#"{"handler":"log","schedule":{"every":"1m"},"expect_success_within":"2h"}"#,
        "default",
        "t",
    )
    .unwrap();
    assert_eq!(ok.expect_success_within, Some(Duration::from_secs(7200)));
    for (bad, reason) in [(r#""0s""#, "is zero"), ("30", "duration string")] {
        let json = format!(
            r#"{{"handler":"log","schedule":{{"every":"1m"}},"expect_success_within":{bad}}}"#
        );
        let err = TaskSpec::from_json(json.as_bytes(), "default", "t").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("expect_success_within") && text.contains(reason),
            "{text}"
        );
    }
}

#[test]
fn display_is_one_problem_per_line() {
    let e: ValidationErrors = vec![
        FieldError::new("schedule.cron", "minute 61 is out of range 0-59"),
        FieldError::new("priority", "priority 12 is out of range 0-9"),
    ]
    .into();
    assert_eq!(
        e.to_string(),
        "schedule.cron: minute 61 is out of range 0-59\npriority: priority 12 is out of range 0-9"
    );
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().contains('\n'));
}

#[test]
fn a_concurrency_key_is_read_written_back_and_checked() {
    let spec = TaskSpec::from_json(
        br#"{"handler":"log","schedule":{"every":"60s"},
                 "concurrency":{"key":"customer-{payload.customer}","max":2}}"#,
        "ns",
        "t",
    )
    .unwrap();
    let limit = spec.concurrency.clone().unwrap();
    assert_eq!(
        (limit.key.as_str(), limit.max),
        ("customer-{payload.customer}", 2)
    );
    assert_eq!(
        TaskSpec::from_json(&spec.to_json(), "ns", "t").unwrap(),
        spec
    );
    let bad = |json: &str| {
        TaskSpec::from_json(json.as_bytes(), "ns", "t")
            .unwrap_err()
            .to_string()
    };
    let e = bad(
        r#"{"handler":"log","schedule":{"every":"60s"},"concurrency":{"key":"c-{customer}","max":0}}"#,
    );
    assert!(
        e.contains("concurrency.key: has an unknown placeholder `{customer}`"),
        "{e}"
    );
    assert!(
        e.contains("concurrency.max: concurrency max 0 is out of range 1-10000"),
        "{e}"
    );
    let e =
        bad(r#"{"handler":"log","schedule":{"every":"60s"},"concurrency":{"max":2,"limit":3}}"#);
    assert!(e.contains("concurrency.key: missing"), "{e}");
    assert!(
        e.contains("concurrency.limit: unknown field `limit`"),
        "{e}"
    );
    let e = bad(r#"{"handler":"log","schedule":{"every":"60s"},"concurrency":"c"}"#);
    assert!(e.contains("concurrency: must be an object"), "{e}");
}

#[test]
fn secret_references_are_checked_for_syntax_only() {
    let http = |target: &str| {
        errors(&format!(
            r#"{{"handler":"http","schedule":{{"every":"1m"}},"http":{target}}}"#
        ))
    };
    for ok in [
        r#"{"url":"${secret:hook-url}"}"#,
        r#"{"url":"https://hooks.slack.com/services/${secret:slack.path}"}"#,
        r#"{"url":"https://${secret:host}/x?t=${secret:t}"}"#,
        r#"{"url":"https://h/","headers":{"Authorization":"Bearer ${secret:api_token}"}}"#,
    ] {
        assert_eq!(http(ok), Vec::<String>::new(), "{ok}");
    }
    let e = http(r#"{"url":"https://h/","headers":{"Authorization":"Bearer ${secret:a b}"}}"#);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("http.headers.Authorization: `a b` is not a secret name"),
        "{e:?}"
    );
    let e = http(r#"{"url":"https://h/${secret:..data}"}"#);
    assert!(
        e[0].starts_with("http.url: `..data` is not a secret name"),
        "{e:?}"
    );
    let e = http(r#"{"url":"ftp://${secret:h}/"}"#);
    assert_eq!(
        e,
        vec!["http.url: `ftp://${secret:h}/` must start with http:// or https://"]
    );
    let e = http(r#"{"url":"https://h/${secret:open"}"#);
    assert!(e[0].contains("without its closing"), "{e:?}");
}

#[test]
fn an_unknown_field_names_the_field_it_most_likely_meant() {
    let errs = errors(
        r#"{"handler":"log","schedule":{"every":"5s"},"priorty":3,"Timeout":"5s",
            "retry":{"max-retries":2},"colour":"red"}"#,
    );
    let find = |path: &str| errs.iter().find(|e| e.starts_with(path)).cloned().unwrap();
    assert!(
        find("priorty:").contains("did you mean `priority`? allowed: "),
        "{errs:?}"
    );
    assert!(
        find("Timeout:").contains("did you mean `timeout`?"),
        "{errs:?}"
    );
    assert!(
        find("retry.max-retries:").contains("did you mean `max_retries`?"),
        "{errs:?}"
    );
    assert!(!find("colour:").contains("did you mean"), "{errs:?}");
}

#[test]
fn a_task_may_not_set_the_headers_that_frame_the_request_or_are_axs_own() {
    for name in [
        "Host",
        "content-length",
        "Transfer-Encoding",
        "Connection",
        "TE",
        "Upgrade",
        "X-Ax-Execution-Id",
        "x-ax-anything",
    ] {
        let spec = format!(
            r#"{{"handler":"http","schedule":{{"every":"1m"}},
                "http":{{"url":"https://example.com/hook","headers":{{"{name}":"v"}}}}}}"#
        );
        let errs = errors(&spec);
        assert_eq!(errs.len(), 1, "{name}: {errs:?}");
        assert!(
            errs[0].starts_with(&format!("http.headers.{name}: is set by ax")),
            "{errs:?}"
        );
    }
    let bad_name = errors(
        r#"{"handler":"http","schedule":{"every":"1m"},
            "http":{"url":"https://example.com/hook","headers":{"a b":"v"}}}"#,
    );
    assert!(bad_name[0].contains("is not a header name"), "{bad_name:?}");
    let split = errors(
        r#"{"handler":"http","schedule":{"every":"1m"},
            "http":{"url":"https://example.com/hook","headers":{"X-Note":"a\r\nHost: evil"}}}"#,
    );
    assert!(split[0].contains("line break"), "{split:?}");
    parse(
        r#"{"handler":"http","schedule":{"every":"1m"},
            "http":{"url":"https://example.com/hook","headers":{"Authorization":"Bearer x","X-Request-Source":"ax"}}}"#,
    )
    .unwrap();
}
