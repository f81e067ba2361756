//! The Grafana dashboards the chart ships (`charts/ax/dashboards/*.json`) against a real
//! `ax serve`: every metric any query of theirs names must be one the process exports, so a
//! renamed or removed metric breaks this test instead of leaving an empty panel for the
//! person on call. The same files are checked for what makes a dashboard usable anywhere: a
//! data source variable behind every query, a unit on every panel, a row per topic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use harness::{now_ms, rfc3339, Cluster, Roles, SERIAL};
use serde_json::{json, Value};

/// Labels Prometheus adds when it scrapes (the target's), not ax: queries may select by
/// them although `/metrics` does not show them.
const TARGET_LABELS: &[&str] = &[
    "job",
    "namespace",
    "instance",
    "pod",
    "service",
    "container",
];

/// The oldest dashboard schema accepted: Grafana 10.4's. Grafana migrates older ones on load,
/// but an old export keeps panel types and options current versions no longer offer.
const MIN_SCHEMA_VERSION: u64 = 39;

fn dashboards_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/ax/dashboards")
}

/// Every dashboard of the chart, by file name.
fn dashboards() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dashboards_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            let value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            out.insert(
                path.file_name().unwrap().to_string_lossy().into_owned(),
                value,
            );
        }
    }
    assert!(
        !out.is_empty(),
        "no dashboard in {}",
        dashboards_dir().display()
    );
    out
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// One PromQL expression of a dashboard and where it is.
struct Query {
    place: String,
    expr: String,
}

/// The PromQL of every panel target and every query variable. A variable's
/// `label_values(metric{...}, label)` contributes its series selector.
fn queries(dashboard: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    for p in panels(dashboard) {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                out.push(Query {
                    place: format!("panel {:?} target {}", p["title"], t["refId"]),
                    expr: expr.to_owned(),
                });
            }
        }
    }
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if v["type"] != "query" {
            continue;
        }
        let query = v["query"]["query"]
            .as_str()
            .or_else(|| v["query"].as_str())
            .or_else(|| v["definition"].as_str())
            .unwrap_or_default();
        out.push(Query {
            place: format!("variable {}", v["name"]),
            expr: variable_selector(query),
        });
    }
    out
}

/// The PromQL inside a Grafana Prometheus variable query.
fn variable_selector(query: &str) -> String {
    let query = query.trim();
    if let Some(inner) = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
    {
        // `label_values(selector, label)`: the label is the last argument.
        match inner.rfind(',') {
            Some(comma) => inner[..comma].to_owned(),
            None => panic!("label_values({inner}) without a series selector matches every metric"),
        }
    } else if let Some(inner) = query
        .strip_prefix("query_result(")
        .and_then(|q| q.strip_suffix(')'))
    {
        inner.to_owned()
    } else {
        panic!("variable query {query:?}: only label_values(selector, label) and query_result(expr) are checked")
    }
}

/// What a PromQL expression refers to: metric names and the labels it selects or groups by.
#[derive(Debug, Default, PartialEq)]
struct Refs {
    metrics: BTreeSet<String>,
    /// Labels of a selector's matchers, by the metric they are attached to.
    matchers: BTreeMap<String, BTreeSet<String>>,
    /// Labels of `by`, `without`, `on` and `ignoring` clauses.
    grouping: BTreeSet<String>,
}

const CLAUSES: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
];

/// Reads the metric names and labels of `expr`. Functions and aggregations are the
/// identifiers followed by `(`; label matchers, ranges, strings, numbers and Grafana
/// variables are skipped.
fn refs(expr: &str) -> Refs {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Refs::default();
    let mut i = 0;
    let mut last_metric: Option<String> = None;
    let next_non_space = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '{' {
            let end = closing(&chars, i, '{', '}');
            let labels = matcher_labels(&chars[i + 1..end]);
            let metric = last_metric.take().unwrap_or_default();
            out.matchers.entry(metric).or_default().extend(labels);
            i = end + 1;
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_.".contains(chars[i])) {
                i += 1;
            }
            last_metric = None;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let after = next_non_space(i);
            // An aggregation may put its grouping before its argument: `sum by (le) (...)`.
            let grouped_next = ["by", "without"].iter().any(|k| {
                let end = after + k.len();
                end < chars.len()
                    && chars[after..end].iter().copied().eq(k.chars())
                    && !chars[end].is_ascii_alphanumeric()
                    && chars[end] != '_'
            });
            let call = after < chars.len() && chars[after] == '(' || grouped_next;
            if CLAUSES.contains(&word.as_str()) {
                if call {
                    let end = closing(&chars, after, '(', ')');
                    let list: String = chars[after + 1..end].iter().collect();
                    out.grouping.extend(
                        list.split(',')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(str::to_owned),
                    );
                    i = end + 1;
                }
                last_metric = None;
            } else if call || KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                last_metric = None;
            } else {
                out.metrics.insert(word.clone());
                last_metric = Some(word);
            }
        } else {
            if !c.is_whitespace() {
                last_metric = None;
            }
            i += 1;
        }
    }
    out
}

/// The index after the string literal starting at `start`.
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' && quote != '`' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// The index of the bracket closing the one at `open_at`, strings skipped.
fn closing(chars: &[char], open_at: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = open_at;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(chars, i);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    panic!(
        "unbalanced {open} in {:?}",
        chars.iter().collect::<String>()
    );
}

/// The label names of the matchers inside a selector's braces.
fn matcher_labels(inner: &[char]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < inner.len() {
        let c = inner[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(inner, i);
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < inner.len() && (inner[i].is_ascii_alphanumeric() || inner[i] == '_') {
                i += 1;
            }
            out.insert(inner[start..i].iter().collect());
        } else {
            i += 1;
        }
    }
    out
}

/// What one `/metrics` exposition declares: each family's type and the label names its
/// samples carry, by sample name (`_bucket`, `_sum` and `_count` of a histogram apart).
#[derive(Debug, Default)]
struct Exposition {
    types: HashMap<String, String>,
    labels: HashMap<String, BTreeSet<String>>,
}

fn exposition(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                out.types.insert(name.to_owned(), kind.to_owned());
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let names = out.labels.entry(line[..name_end].to_owned()).or_default();
            if line[name_end..].starts_with('{') {
                let close = closing(&line.chars().collect::<Vec<_>>(), name_end, '{', '}');
                let inner: Vec<char> = line[name_end + 1..close].chars().collect();
                names.extend(matcher_labels(&inner));
            }
        }
    }
    out
}

impl Exposition {
    /// The family a queried name belongs to: itself, or the histogram (summary) whose
    /// `_bucket`, `_sum` or `_count` series it is.
    fn family(&self, name: &str) -> Option<&str> {
        if let Some((own, _)) = self.types.get_key_value(name) {
            return Some(own);
        }
        for (suffix, kinds) in [
            ("_bucket", &["histogram"][..]),
            ("_sum", &["histogram", "summary"][..]),
            ("_count", &["histogram", "summary"][..]),
        ] {
            if let Some((base, kind)) = name
                .strip_suffix(suffix)
                .and_then(|b| self.types.get_key_value(b))
            {
                if kinds.contains(&kind.as_str()) {
                    return Some(base);
                }
            }
        }
        None
    }

    /// Every label name a queried name's samples carry.
    fn labels_of(&self, name: &str) -> BTreeSet<String> {
        self.labels.get(name).cloned().unwrap_or_default()
    }
}

/// What the dashboards query that the exposition does not have, one line each.
fn problems(dashboards: &BTreeMap<String, Value>, exp: &Exposition) -> Vec<String> {
    let mut out = Vec::new();
    for (file, dashboard) in dashboards {
        for q in queries(dashboard) {
            let r = refs(&q.expr);
            if r.metrics.is_empty() {
                out.push(format!("{file}: {}: no metric in {:?}", q.place, q.expr));
            }
            let mut known = BTreeSet::new();
            for name in &r.metrics {
                if exp.family(name).is_none() {
                    out.push(format!(
                        "{file}: {}: {name} is not exported (query {:?})",
                        q.place, q.expr
                    ));
                }
                known.extend(exp.labels_of(name));
            }
            for (metric, labels) in &r.matchers {
                let have = exp.labels_of(metric);
                for l in labels {
                    if !TARGET_LABELS.contains(&l.as_str()) && !have.contains(l) {
                        out.push(format!(
                            "{file}: {}: {metric} has no label {l} to match",
                            q.place
                        ));
                    }
                }
            }
            for l in &r.grouping {
                if !TARGET_LABELS.contains(&l.as_str()) && !known.contains(l) {
                    out.push(format!(
                        "{file}: {}: no metric of {:?} has the label {l} it groups by",
                        q.place, q.expr
                    ));
                }
            }
        }
    }
    out
}

/// The value of one series (name and labels as exposed) in an exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

async fn scrape(c: &mut Cluster, replica: &str) -> String {
    let port = c.replica(replica).http_port;
    reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboards_query_is_exported_by_a_running_replica() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("dashboard").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    // A fire that runs and one that fails, so the execution and lateness series have been
    // written to, not only created at zero.
    c.receiver.fail_task("broken");
    for id in ["report", "broken"] {
        let spec = json!({
            "handler": "http",
            "schedule": { "at": rfc3339(now_ms() + 500) },
            "http": { "url": c.receiver.exec_url() },
        });
        c.put_task("default", id, &spec).await;
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        let text = scrape(&mut c, "r1").await;
        let counted = |series: &str| sample(&text, series).is_some_and(|v| v >= 1.0);
        if counted(
            "scheduler_attempts_total{handler=\"http\",outcome=\"succeeded\",queue=\"default\"}",
        ) && counted("scheduler_attempts_failed_total{handler=\"http\",queue=\"default\"}")
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the two executions were not counted within 15 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let exp = exposition(&text);

    let dashboards = dashboards();
    let found = problems(&dashboards, &exp);
    assert!(
        found.is_empty(),
        "the dashboards query what ax does not export:\n{}\n\nexported families: {:?}",
        found.join("\n"),
        exp.types.keys().collect::<BTreeSet<_>>()
    );

    // Every metric a dashboard shows is documented.
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md"),
    )
    .unwrap();
    let mut shown = BTreeSet::new();
    for dashboard in dashboards.values() {
        for q in queries(dashboard) {
            for name in refs(&q.expr).metrics {
                shown.insert(exp.family(&name).unwrap().to_owned());
            }
        }
    }
    let undocumented: Vec<_> = shown
        .iter()
        .filter(|n| !doc.contains(&format!("`{n}`")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/metrics.md: {undocumented:?}"
    );
    for needed in [
        "scheduler_fires_total",
        "scheduler_schedule_latency_seconds",
        "scheduler_queue_depth",
        "scheduler_oldest_queued_age_seconds",
        "scheduler_attempts_failed_total",
        "scheduler_dlq_size",
        "scheduler_is_leader",
        "scheduler_leader_changes_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "scheduler_backend_errors_total",
    ] {
        assert!(shown.contains(needed), "no panel shows {needed}");
    }

    // The check itself catches a metric that is gone, a suffix on the wrong type and a label
    // that is not there, against the same exposition.
    let broken = json!({ "panels": [{ "title": "broken", "targets": [
        { "refId": "A", "expr": "sum(rate(scheduler_fired_total{queue=\"a\"}[5m]))" },
        { "refId": "B", "expr": "rate(scheduler_fires_total_bucket[5m])" },
        { "refId": "C", "expr": "sum by (tenant) (scheduler_queue_depth{queue=~\"$queue\"})" },
        { "refId": "D", "expr": "max(scheduler_dlq_size{queue=\"a\"})" },
    ]}]});
    let found = problems(&BTreeMap::from([("broken.json".to_owned(), broken)]), &exp);
    for needle in [
        "scheduler_fired_total is not exported",
        "scheduler_fires_total_bucket is not exported",
        "label tenant it groups by",
        "scheduler_dlq_size has no label queue",
    ] {
        assert!(
            found.iter().any(|p| p.contains(needle)),
            "{needle} not reported: {found:?}"
        );
    }
    c.clean_up().await;
}

#[test]
fn metric_names_are_read_from_promql_without_functions_labels_or_ranges() {
    let r = refs(
        "histogram_quantile(0.95, sum by (queue, le) (rate(a_seconds_bucket{job=~\"$job\", \
         queue=~\"x}\"}[$__rate_interval])))\n  / on(instance) group_left() \
         (sum without (x) (b_total offset 5m) > 0) or vector(0)",
    );
    assert_eq!(
        r.metrics,
        BTreeSet::from(["a_seconds_bucket".to_owned(), "b_total".to_owned()])
    );
    assert_eq!(
        r.matchers["a_seconds_bucket"],
        BTreeSet::from(["job".to_owned(), "queue".to_owned()])
    );
    assert_eq!(
        r.grouping,
        BTreeSet::from([
            "queue".to_owned(),
            "le".to_owned(),
            "instance".to_owned(),
            "x".to_owned()
        ])
    );
    assert_eq!(
        variable_selector("label_values(ax_build_info{job=~\"$job\"}, namespace)"),
        "ax_build_info{job=~\"$job\"}"
    );
}

#[test]
fn histogram_series_resolve_to_their_family_and_nothing_else_does() {
    let exp = exposition(
        "# HELP h x\n# TYPE h histogram\nh_bucket{q=\"a\",le=\"1\"} 0\nh_sum{q=\"a\"} 0\n\
         h_count{q=\"a\"} 0\n# HELP c_total x\n# TYPE c_total counter\nc_total 0\n",
    );
    assert_eq!(exp.family("h_bucket"), Some("h"));
    assert_eq!(exp.family("h_count"), Some("h"));
    assert_eq!(exp.family("c_total"), Some("c_total"));
    assert_eq!(exp.family("c_total_sum"), None);
    assert_eq!(exp.family("h_total"), None);
    assert_eq!(
        exp.labels_of("h_bucket"),
        BTreeSet::from(["q".to_owned(), "le".to_owned()])
    );
}

#[test]
fn the_dashboards_work_on_any_grafana_with_prometheus() {
    for (file, d) in dashboards() {
        assert!(
            d["schemaVersion"].as_u64().unwrap_or(0) >= MIN_SCHEMA_VERSION,
            "{file}: schemaVersion"
        );
        assert!(
            d["uid"]
                .as_str()
                .is_some_and(|u| !u.is_empty() && u.len() <= 40),
            "{file}: uid"
        );
        assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()), "{file}");
        // Provisioned by a sidecar, a dashboard gets no import dialog to map a data source.
        assert!(
            d.get("__inputs").is_none(),
            "{file}: __inputs need an import"
        );
        let vars = d["templating"]["list"].as_array().unwrap();
        let ds = vars
            .iter()
            .find(|v| v["type"] == "datasource")
            .unwrap_or_else(|| panic!("{file}: no data source variable"));
        assert_eq!(ds["query"], "prometheus", "{file}");
        let ds_ref = format!("${{{}}}", ds["name"].as_str().unwrap());
        for v in vars.iter().filter(|v| v["type"] == "query") {
            assert_eq!(
                v["datasource"]["uid"],
                ds_ref.as_str(),
                "{file}: {}",
                v["name"]
            );
        }
        for name in ["namespace", "instance", "queue"] {
            assert!(
                vars.iter().any(|v| v["name"] == name),
                "{file}: no {name} variable"
            );
        }

        let top = d["panels"].as_array().unwrap();
        assert_eq!(
            top.first().map(|p| &p["type"]),
            Some(&json!("row")),
            "{file}"
        );
        let rows = top.iter().filter(|p| p["type"] == "row").count();
        assert!(rows >= 5, "{file}: {rows} rows; one per topic");
        let mut ids = BTreeSet::new();
        for p in panels(&d) {
            let title = &p["title"];
            assert!(
                ids.insert(p["id"].as_u64().unwrap()),
                "{file}: id of {title} repeats"
            );
            let pos = &p["gridPos"];
            let (x, w) = (pos["x"].as_u64().unwrap(), pos["w"].as_u64().unwrap());
            assert!(
                x + w <= 24 && pos["h"].as_u64().unwrap() > 0,
                "{file}: {title}"
            );
            if p["type"] == "row" {
                continue;
            }
            assert!(title.as_str().is_some_and(|t| !t.is_empty()), "{file}");
            assert!(
                p["description"].as_str().is_some_and(|t| !t.is_empty()),
                "{file}: {title} has no description"
            );
            assert!(
                p["fieldConfig"]["defaults"]["unit"]
                    .as_str()
                    .is_some_and(|u| !u.is_empty()),
                "{file}: {title} has no unit"
            );
            assert_eq!(p["datasource"]["uid"], ds_ref.as_str(), "{file}: {title}");
            let targets = p["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{file}: {title} queries nothing");
            for t in targets {
                assert!(
                    t["expr"].as_str().is_some_and(|e| !e.is_empty()),
                    "{file}: {title}"
                );
                assert_eq!(t["datasource"]["uid"], ds_ref.as_str(), "{file}: {title}");
            }
        }
    }
}
