//! Whether a task's handler is served: a put whose queue ax's workers take from names a
//! handler one of them serves, or it is refused before it is written, since such a task
//! would fail at every fire and fill the dead-letter queue. The workers' queues and handlers
//! are read from the replicas' instance records. A queue no ax worker takes from (served by
//! a worker in another language, or by workers deployed after their tasks) says nothing, so
//! the put goes through.

use ax_election::InstanceRecord;
use ax_scheduler_core::TaskSpec;

use super::{errors, Backend};
use crate::api::ApiError;

impl Backend {
    /// [`ApiError::Invalid`] when live ax workers take from `spec.queue` and none of them
    /// serves `spec.handler`.
    pub(super) async fn check_handler_served(&self, spec: &TaskSpec) -> Result<(), ApiError> {
        let records = ax_election::list_instances(&self.etcd, &self.election)
            .await
            .map_err(errors::election)?;
        let served = served_on(&records, &spec.queue);
        refusal(&spec.handler, &spec.queue, &served).map_or(Ok(()), Err)
    }

    /// The problem of an invalid spec's handler, as written in `doc`, if it is a name no
    /// live worker of its queue serves (nothing when it or its queue is not text).
    pub(super) async fn unserved_handler_of(
        &self,
        doc: &serde_json::Value,
    ) -> Result<Vec<String>, ApiError> {
        let Some(handler) = doc.get("handler").and_then(serde_json::Value::as_str) else {
            return Ok(Vec::new());
        };
        let queue = match doc.get("queue") {
            None => ax_scheduler_core::task::DEFAULT_QUEUE,
            Some(q) => match q.as_str() {
                Some(q) => q,
                None => return Ok(Vec::new()),
            },
        };
        let records = ax_election::list_instances(&self.etcd, &self.election)
            .await
            .map_err(errors::election)?;
        let served = served_on(&records, queue);
        Ok(match refusal(handler, queue, &served) {
            Some(ApiError::Invalid { errors, .. }) => errors,
            _ => Vec::new(),
        })
    }
}

/// The handlers of the live workers taking from `queue`, sorted, once each.
fn served_on<'a>(records: &'a [InstanceRecord], queue: &str) -> Vec<&'a str> {
    let mut served: Vec<&str> = records
        .iter()
        .filter(|r| r.queues.iter().any(|q| q == queue))
        .flat_map(|r| r.handlers.iter().map(String::as_str))
        .collect();
    served.sort_unstable();
    served.dedup();
    served
}

/// The refusal of `handler` on `queue`, whose ax workers serve `served`.
fn refusal(handler: &str, queue: &str, served: &[&str]) -> Option<ApiError> {
    if served.is_empty() || served.contains(&handler) {
        return None;
    }
    let hint = ax_scheduler_core::suggest::closest(handler, served)
        .map(|m| format!("did you mean `{m}`? "))
        .unwrap_or_default();
    Some(ApiError::Invalid {
        message: "the task's handler is served by no live worker of its queue".into(),
        errors: vec![format!(
            "handler: no live worker of queue `{queue}` serves `{handler}`; {hint}they \
             serve: {}. Register it anyway, for workers to be deployed later, with \
             --allow-unserved-handler (API: allow_unserved_handler=true; Rust SDK: Client::put_with)",
            served.join(", ")
        )],
    })
}

#[cfg(test)]
mod tests {
    use super::{refusal, served_on};
    use crate::api::ApiError;
    use ax_election::InstanceRecord;
    use ax_scheduler_core::UtcMillis;

    fn record(queues: &[&str], handlers: &[&str]) -> InstanceRecord {
        InstanceRecord {
            instance_id: "r".into(),
            roles: vec!["worker".into()],
            handlers: handlers.iter().map(|h| (*h).to_owned()).collect(),
            queues: queues.iter().map(|q| (*q).to_owned()).collect(),
            version: "0".into(),
            address: None,
            host: None,
            pid: None,
            started_at: UtcMillis(0),
        }
    }

    #[test]
    fn only_the_workers_of_the_tasks_queue_count() {
        let records = [
            record(&["default"], &["log", "http"]),
            record(&["default", "batch"], &["command", "http"]),
            record(&[], &[]),
        ];
        assert_eq!(served_on(&records, "default"), ["command", "http", "log"]);
        assert_eq!(served_on(&records, "batch"), ["command", "http"]);
        assert!(served_on(&records, "python").is_empty());
    }

    #[test]
    fn an_unserved_handler_is_refused_with_the_served_ones_and_a_hint() {
        let served = ["command", "http", "log"];
        assert!(refusal("http", "default", &served).is_none());
        assert!(
            refusal("python", "python", &[]).is_none(),
            "no ax worker on the queue: nothing to compare"
        );
        let Some(ApiError::Invalid { errors, .. }) = refusal("htpt", "default", &served) else {
            panic!("not refused");
        };
        assert!(
            errors[0].contains("no live worker of queue `default` serves `htpt`"),
            "{errors:?}"
        );
        assert!(errors[0].contains("did you mean `http`?"), "{errors:?}");
        assert!(errors[0].contains("command, http, log"), "{errors:?}");
        let Some(ApiError::Invalid { errors, .. }) = refusal("shell", "default", &served) else {
            panic!("not refused");
        };
        assert!(!errors[0].contains("did you mean"), "{errors:?}");
    }
}
