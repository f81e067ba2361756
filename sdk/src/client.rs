//! The client: register, read and control tasks from code, over etcd and Redis, or over a
//! replica's HTTP API with a token.
//!
//! [`Client::connect`] is a thin face over the backend the `ax` CLI and every replica's
//! `/api/v1` run (`ax_control::backend::Backend`): the same validation before any write (every
//! problem of a spec at once, a handler no live worker of its queue serves), the same guarded
//! etcd writes, the same audit records. Nothing is reimplemented here, so a task put from code
//! is stored, fired and shown exactly as one put with `ax task put`. Redis is connected on the
//! first call that needs it, as the CLI does: registering, pausing and deleting need only
//! etcd. [`Client::http`] sends the same calls to `/api/v1` of any replica instead, where
//! that backend answers them: for a service that reaches the API but not etcd or Redis.
//!
//! ```no_run
//! use ax_sdk::{Client, Config};
//! use serde_json::json;
//!
//! # async fn enqueue() -> Result<(), ax_sdk::Error> {
//! let config = Config::redis("redis://127.0.0.1:6379").etcd(["http://127.0.0.1:2379"]);
//! let client = Client::connect(&config).await?.actor("shop");
//! client
//!     .put("shop", "receipts", &json!({
//!         "handler": "email.send",
//!         "queue": "mail",
//!         "schedule": {"cron": "0 8 * * *"},
//!     }))
//!     .await?;
//! let run = client
//!     .trigger("shop", "receipts", Some(&json!({"to": "a@example.com"})), None)
//!     .await?;
//! println!("execution {}", run.execution_id);
//! # Ok(())
//! # }
//! ```

use ax_control::api::{ApiBackend, PutOptions, TriggerParams};
use ax_control::audit::VIA_API;
use ax_control::backend::Backend;
use ax_scheduler_core::{ExecutionId, TaskKey, UtcMillis};
use serde::Serialize;

pub use ax_control::api::{
    ApiError, BackfillParams, BackfillResult, ExecutionRecord, KillResult, PutTaskResult, TaskList,
    TaskQuery, TaskView, TriggerResult,
};

use crate::config::Config;
use crate::error::{Error, Result};
use ax_control::http_client::HttpApi;

/// A client of one cluster. Cheap to share behind an `Arc`; every call goes to etcd or
/// Redis (nothing is cached).
pub struct Client {
    via: Via,
    actor: String,
}

/// How a client reaches the cluster.
enum Via {
    /// etcd and Redis, through the CLI's backend.
    Backend(Box<Backend>),
    /// A replica's `/api/v1` (the replica records the audit entries, under the token's name).
    Http(HttpApi),
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

/// The audit log's actor of a client that names none.
pub const DEFAULT_ACTOR: &str = "sdk";

impl Client {
    /// Connects to the cluster's etcd (now: an unreachable cluster is an error naming its
    /// endpoints) and to its Redis on first use. `config` must name etcd ([`Config::etcd`]).
    pub async fn connect(config: &Config) -> Result<Client> {
        let cluster = config.cluster_config()?;
        let backend = Backend::connect_lazy(&cluster).await?;
        Ok(Client {
            via: Via::Backend(Box::new(backend)),
            actor: DEFAULT_ACTOR.to_owned(),
        })
    }

    /// A client of the replica whose API is at `url` (`https://ax.example.com`), calling it
    /// with the bearer `token` (an operator token for writes; `docs/security.md`). Nothing is
    /// sent yet. Changes are audited by the replica under the token's name, not
    /// [`Client::actor`]'s.
    ///
    /// ```no_run
    /// # async fn enqueue() -> Result<(), ax_sdk::Error> {
    /// let client = ax_sdk::Client::http("https://ax.example.com", "ax-operator-token")?;
    /// let task = client.get("shop", "receipts").await?;
    /// println!("{:?}", task.status);
    /// # Ok(())
    /// # }
    /// ```
    pub fn http(url: &str, token: &str) -> Result<Client> {
        Ok(Client {
            via: Via::Http(HttpApi::new(url, token)?),
            actor: DEFAULT_ACTOR.to_owned(),
        })
    }

    /// The same client, its changes recorded in the audit log as made by `actor` (your
    /// service's name). Default [`DEFAULT_ACTOR`].
    pub fn actor(mut self, actor: impl Into<String>) -> Self {
        self.actor = actor.into();
        self
    }

    /// Validates the task spec `spec` (the JSON of a task file; its `namespace` and `id`
    /// set to the arguments) and registers it, as `ax task put` does. A spec with problems
    /// is refused with [`Error::Api`] (`ApiError::Invalid`) listing each; nothing is
    /// written then. Putting the same spec again changes nothing (`unchanged`).
    pub async fn put(
        &self,
        namespace: &str,
        id: &str,
        spec: &impl Serialize,
    ) -> Result<PutTaskResult> {
        let mut doc =
            serde_json::to_value(spec).map_err(|e| Error::Config(format!("spec: {e}")))?;
        let Some(obj) = doc.as_object_mut() else {
            return Err(Error::Config("spec: must be a JSON object".into()));
        };
        obj.insert("namespace".into(), namespace.into());
        obj.insert("id".into(), id.into());
        let backend = match &self.via {
            Via::Backend(b) => b,
            Via::Http(api) => return Ok(api.put(doc).await?),
        };
        let mut result = backend.put_task(doc, PutOptions::default()).await?;
        if !result.unchanged {
            let change = result.audit.take().unwrap_or_default();
            self.audit(
                "task.put",
                &format!("{namespace}/{id}"),
                change.detail,
                change.revision,
            )
            .await;
        }
        Ok(result)
    }

    /// One task: its spec, state and next fires; `ApiError::NotFound` when there is none.
    pub async fn get(&self, namespace: &str, id: &str) -> Result<TaskView> {
        match &self.via {
            Via::Backend(b) => Ok(b.get_task(key(namespace, id)).await?),
            Via::Http(api) => Ok(api.get(namespace, id).await?),
        }
    }

    /// Deletes a task (its state and history go with it).
    pub async fn delete(&self, namespace: &str, id: &str) -> Result<()> {
        match &self.via {
            Via::Backend(b) => b.delete_task(key(namespace, id)).await?,
            Via::Http(api) => return Ok(api.delete(namespace, id).await?),
        }
        self.audit("task.delete", &format!("{namespace}/{id}"), None, None)
            .await;
        Ok(())
    }

    /// One page of the tasks `query` selects (`TaskQuery::default()`: the first page of
    /// all), in key order; `continue_token` of the result asks for the next.
    pub async fn list(&self, query: TaskQuery) -> Result<TaskList> {
        match &self.via {
            Via::Backend(b) => Ok(b.list_tasks(query).await?),
            Via::Http(api) => Ok(api.list(&query).await?),
        }
    }

    /// Runs a task now, outside its schedule, with `payload` in place of the task's own
    /// (`None`: the task's). A `idempotency_key` runs it at most once per key.
    pub async fn trigger(
        &self,
        namespace: &str,
        id: &str,
        payload: Option<&impl Serialize>,
        idempotency_key: Option<String>,
    ) -> Result<TriggerResult> {
        let payload = payload
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| Error::Config(format!("payload: {e}")))?;
        let params = TriggerParams {
            payload,
            idempotency_key,
        };
        params.check()?;
        let result = match &self.via {
            Via::Backend(b) => b.trigger(key(namespace, id), params).await?,
            Via::Http(api) => return Ok(api.trigger(namespace, id, &params).await?),
        };
        self.audit("task.trigger", &format!("{namespace}/{id}"), None, None)
            .await;
        Ok(result)
    }

    /// Pauses a task: it fires no more until resumed.
    pub async fn pause(&self, namespace: &str, id: &str) -> Result<TaskView> {
        let view = match &self.via {
            Via::Backend(b) => b.pause(key(namespace, id)).await?,
            Via::Http(api) => return Ok(api.control(namespace, id, "pause").await?),
        };
        self.audit("task.pause", &format!("{namespace}/{id}"), None, None)
            .await;
        Ok(view)
    }

    /// Resumes a paused task.
    pub async fn resume(&self, namespace: &str, id: &str) -> Result<TaskView> {
        let view = match &self.via {
            Via::Backend(b) => b.resume(key(namespace, id)).await?,
            Via::Http(api) => return Ok(api.control(namespace, id, "resume").await?),
        };
        self.audit("task.resume", &format!("{namespace}/{id}"), None, None)
            .await;
        Ok(view)
    }

    /// Kills a task's current executions (waiting, retrying or running), or only
    /// `execution`; `ApiError::NotFound` when there is none.
    pub async fn kill(
        &self,
        namespace: &str,
        id: &str,
        execution: Option<ExecutionId>,
    ) -> Result<KillResult> {
        let result = match &self.via {
            Via::Backend(b) => b.kill_task(key(namespace, id), execution).await?,
            Via::Http(api) => return Ok(api.kill(namespace, id, execution).await?),
        };
        self.audit("task.kill", &format!("{namespace}/{id}"), None, None)
            .await;
        Ok(result)
    }

    /// The last `limit` attempts of a task, newest first.
    pub async fn history(
        &self,
        namespace: &str,
        id: &str,
        limit: usize,
    ) -> Result<Vec<ExecutionRecord>> {
        match &self.via {
            Via::Backend(b) => Ok(b.history(key(namespace, id), limit).await?),
            Via::Http(api) => Ok(api.history(namespace, id, limit).await?),
        }
    }

    /// Runs the task's fires between `from` and `to` now, oldest first, each once (see
    /// `ax task backfill`).
    pub async fn backfill(
        &self,
        namespace: &str,
        id: &str,
        from: UtcMillis,
        to: UtcMillis,
    ) -> Result<BackfillResult> {
        let params = BackfillParams {
            from,
            to,
            max: None,
            force: false,
            dry_run: false,
        };
        let result = match &self.via {
            Via::Backend(b) => b.backfill(key(namespace, id), params).await?,
            Via::Http(api) => return Ok(api.backfill(namespace, id, &params).await?),
        };
        self.audit("task.backfill", &format!("{namespace}/{id}"), None, None)
            .await;
        Ok(result)
    }

    /// Records a change in the audit log, as the CLI does (see [`Backend::record_change`]).
    async fn audit(
        &self,
        action: &str,
        target: &str,
        detail: Option<serde_json::Value>,
        revision: Option<i64>,
    ) {
        if let Via::Backend(b) = &self.via {
            b.record_change(&self.actor, VIA_API, action, target, detail, revision)
                .await;
        }
    }
}

fn key(namespace: &str, id: &str) -> TaskKey {
    TaskKey::new(namespace, id)
}
