//! The audit log as a table.
//!
//! Its detail stays compact JSON: the records are for reading back what changed, not for a
//! second rendering of every action's parameters.

use super::format::table;

/// The audit log as a table, newest first: when, who, through what, the action, its target
/// and the detail as compact JSON.
pub fn audit_table(records: &[ax_control::audit::AuditRecord]) -> String {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.at.to_string(),
                r.actor.clone(),
                r.via.clone(),
                r.action.clone(),
                if r.target.is_empty() {
                    "-".to_owned()
                } else {
                    r.target.clone()
                },
                r.detail
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            ]
        })
        .collect();
    table(&["AT", "ACTOR", "VIA", "ACTION", "TARGET", "DETAIL"], &rows)
}
