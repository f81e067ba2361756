//! The chain of dependent tasks around one task (`ax task graph`), as text or Graphviz DOT.
//!
//! The chain is computed once from the listed tasks and rendered twice, so both forms always
//! show the same tasks and edges.

use ax_control::api::TaskView;

/// The chain of dependent tasks (`depends_on`) around one task, for `ax task graph`.
#[derive(Debug, PartialEq, Eq)]
pub struct Chain {
    focus: String,
    /// `namespace/id`, status, problems; in running order (parents first).
    nodes: Vec<(String, String, Vec<String>)>,
    /// Parent, child, the outcome waited for, the window.
    edges: Vec<(String, String, String, String)>,
}

impl Chain {
    /// The tasks connected to `namespace/id` through `depends_on`, either way, from the listed
    /// `tasks`; `None` when `key` is not among them. A spec that does not parse has no edges.
    pub fn around(namespace: &str, id: &str, tasks: &[TaskView]) -> Option<Chain> {
        use std::collections::{BTreeMap, BTreeSet};
        let focus = format!("{namespace}/{id}");
        let mut status: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        let mut edges = Vec::new();
        for t in tasks {
            let name = format!("{}/{}", t.namespace, t.id);
            let shown = t.status.clone().unwrap_or_else(|| "-".to_owned());
            status.insert(name.clone(), (shown, t.errors.clone()));
            let bytes = serde_json::to_vec(&t.spec).unwrap_or_default();
            if let Ok(spec) = ax_scheduler_core::TaskSpec::from_json(&bytes, &t.namespace, &t.id) {
                for d in &spec.depends_on {
                    let on = serde_json::to_value(d.on)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    let within = humantime::format_duration(d.within).to_string();
                    edges.push((d.task.clone(), name.clone(), on, within));
                }
            }
        }
        if !status.contains_key(&focus) {
            return None;
        }
        // Everything reachable from the focus along edges, either way.
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut stack = vec![focus.clone()];
        while let Some(n) = stack.pop() {
            if !seen.insert(n.clone()) {
                continue;
            }
            for (from, to, _, _) in &edges {
                if *from == n {
                    stack.push(to.clone());
                }
                if *to == n {
                    stack.push(from.clone());
                }
            }
        }
        edges.retain(|(from, to, _, _)| seen.contains(from) && seen.contains(to));
        // Parents first (Kahn's order); what a cycle leaves over follows by name.
        let mut order: Vec<String> = Vec::new();
        let mut remaining: BTreeSet<String> = seen.clone();
        loop {
            let ready: Vec<String> = remaining
                .iter()
                .filter(|n| {
                    !edges
                        .iter()
                        .any(|(from, to, _, _)| to == *n && remaining.contains(from))
                })
                .cloned()
                .collect();
            if ready.is_empty() {
                order.extend(remaining.iter().cloned());
                break;
            }
            for n in ready {
                remaining.remove(&n);
                order.push(n);
            }
        }
        let nodes = order
            .into_iter()
            .map(|n| {
                let (s, errors) = status
                    .get(&n)
                    .cloned()
                    .unwrap_or_else(|| ("MISSING".to_owned(), Vec::new()));
                (n, s, errors)
            })
            .collect();
        Some(Chain {
            focus,
            nodes,
            edges,
        })
    }

    /// One line per task, parents first, with the edges it waits on and its problems.
    pub fn text(&self) -> String {
        let mut out = format!(
            "chain of {}: {} task(s), {} edge(s)\n\n",
            self.focus,
            self.nodes.len(),
            self.edges.len()
        );
        let width = self.nodes.iter().map(|(n, ..)| n.len()).max().unwrap_or(0);
        for (name, status, errors) in &self.nodes {
            let after: Vec<String> = self
                .edges
                .iter()
                .filter(|(_, to, _, _)| to == name)
                .map(|(from, _, on, within)| format!("{from} (on {on}, within {within})"))
                .collect();
            let what = if after.is_empty() {
                "first task".to_owned()
            } else {
                format!("after {}", after.join(", "))
            };
            out.push_str(&format!("{name:<width$}  {status:<9}  {what}\n"));
            for e in errors {
                out.push_str(&format!("{:<width$}  ! {e}\n", ""));
            }
        }
        out
    }

    /// Graphviz DOT: parents on the left, each edge labelled with the outcome it waits for.
    pub fn dot(&self) -> String {
        let mut out = format!("digraph \"{}\" {{\n  rankdir=LR;\n", self.focus);
        for (name, status, _) in &self.nodes {
            let style = if name == &self.focus {
                ", style=bold"
            } else {
                ""
            };
            out.push_str(&format!(
                "  \"{name}\" [label=\"{name}\\n{status}\"{style}];\n"
            ));
        }
        for (from, to, on, within) in &self.edges {
            out.push_str(&format!(
                "  \"{from}\" -> \"{to}\" [label=\"{on} / {within}\"];\n"
            ));
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn view(ns: &str, id: &str, spec: serde_json::Value, status: &str) -> TaskView {
        super::super::tasks::test_view(ns, id, spec, status)
    }

    #[test]
    fn a_chain_prints_parents_first_in_text_and_dot() {
        let tasks = vec![
            view(
                "ns",
                "c",
                json!({"handler":"log","depends_on":[{"task":"a"},{"task":"b","on":"any","within":"30s"}]}),
                "WAITING",
            ),
            view(
                "ns",
                "a",
                json!({"handler":"log","depends_on":[{"task":"r"}]}),
                "WAITING",
            ),
            view(
                "ns",
                "b",
                json!({"handler":"log","depends_on":[{"task":"r"}]}),
                "WAITING",
            ),
            view(
                "ns",
                "r",
                json!({"handler":"log","schedule":{"every":"1m"}}),
                "SCHEDULED",
            ),
            view(
                "ns",
                "lone",
                json!({"handler":"log","schedule":{"every":"1m"}}),
                "SCHEDULED",
            ),
        ];
        let chain = Chain::around("ns", "a", &tasks).unwrap();
        let text = chain.text();
        assert_eq!(
            text,
            "chain of ns/a: 4 task(s), 4 edge(s)\n\n\
             ns/r  SCHEDULED  first task\n\
             ns/a  WAITING    after ns/r (on success, within 1day)\n\
             ns/b  WAITING    after ns/r (on success, within 1day)\n\
             ns/c  WAITING    after ns/a (on success, within 1day), ns/b (on any, within 30s)\n"
        );
        let dot = chain.dot();
        assert!(dot.starts_with("digraph \"ns/a\" {"), "{dot}");
        assert!(
            dot.contains("\"ns/b\" -> \"ns/c\" [label=\"any / 30s\"];"),
            "{dot}"
        );
        assert!(
            dot.contains("\"ns/a\" [label=\"ns/a\\nWAITING\", style=bold];"),
            "{dot}"
        );
        assert!(Chain::around("ns", "nope", &tasks).is_none());
    }
}
