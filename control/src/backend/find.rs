//! Finding executions by a fragment of their id, in the history across tasks.
//!
//! Redis picks the attempts whose entry contains the fragment (`history_page.lua` with an
//! execution needle, newest first, bounded), and this side keeps those whose id starts or
//! ends with it: the entry also holds other ids (a run's, a fan-out's) and free text.

use std::collections::HashSet;

use super::{errors, Backend};
use crate::api::{
    id_fragment, id_matches, ApiError, ExecutionMatch, ExecutionMatches, FIND_MATCHES_MAX,
    FIND_SCAN_MAX,
};

/// Most attempts one search takes back from Redis: enough for [`FIND_MATCHES_MAX`] executions
/// and their retries, or many entries that contain the fragment elsewhere.
const FIND_ATTEMPTS_MAX: usize = 1000;

impl Backend {
    pub(super) async fn find_by_fragment(&self, text: &str) -> Result<ExecutionMatches, ApiError> {
        let fragment = id_fragment(text)?;
        let (items, complete) = self
            .queue()
            .await?
            .attempts_containing(&fragment, FIND_ATTEMPTS_MAX, FIND_SCAN_MAX)
            .await
            .map_err(errors::queue)?;
        let mut seen = HashSet::new();
        let mut matches = Vec::new();
        let mut more = false;
        for item in items {
            let id = item.entry.execution_id;
            if !id_matches(id, &fragment) || !seen.insert(id) {
                continue;
            }
            if matches.len() == FIND_MATCHES_MAX {
                more = true;
                break;
            }
            matches.push(ExecutionMatch {
                execution_id: id,
                namespace: item.namespace,
                task_id: item.task_id,
                due: item.entry.fire_at,
            });
        }
        Ok(ExecutionMatches {
            fragment,
            matches,
            more,
            complete,
        })
    }
}
