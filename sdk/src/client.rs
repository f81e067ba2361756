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

use ax_control::api::{ApiBackend, TriggerParams};
use ax_control::audit::Actor;
use ax_control::backend::Backend;
use ax_control::operations::Operations;
use ax_scheduler_core::{ExecutionId, TaskKey, TaskSpec, UtcMillis};
use serde::Serialize;

pub use ax_control::api::{
    ApiError, BackfillParams, BackfillResult, ExecutionRecord, Instant, KillResult, Outcome,
    PutOptions, PutTaskResult, ScheduleRequest, ScheduleResult, ScheduledPage, ScheduledView,
    TaskList, TaskView, TriggerResult,
};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::filter::TaskFilter;
use ax_control::http_client::HttpApi;

mod scheduled;

/// A client of one cluster. Cheap to share behind an `Arc`; every call goes to etcd or
/// Redis (nothing is cached).
pub struct Client {
    via: Via,
    actor: Actor,
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
            .field("actor", &self.actor.name)
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
            actor: Actor::api(DEFAULT_ACTOR),
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
            actor: Actor::api(DEFAULT_ACTOR),
        })
    }

    /// The same client, its changes recorded in the audit log as made by `actor` (your
    /// service's name). Default [`DEFAULT_ACTOR`].
    pub fn actor(mut self, actor: impl Into<String>) -> Self {
        self.actor = Actor::api(actor);
        self
    }

    /// Validates the task spec `spec` (the JSON of a task file; its `namespace` and `id`
    /// set to the arguments) and registers it, as `ax task put` does. A spec with problems
    /// is refused with [`Error::Api`] (`ApiError::Invalid`) listing each; nothing is
    /// written then. Putting the same spec again changes nothing (`unchanged`). A task whose
    /// handler no live worker of its queue serves is refused; [`Client::put_with`] with
    /// [`PutOptions::allow_unserved_handler`] registers it anyway.
    pub async fn put(
        &self,
        namespace: &str,
        id: &str,
        spec: &impl Serialize,
    ) -> Result<PutTaskResult> {
        self.put_with(namespace, id, spec, PutOptions::default())
            .await
    }

    /// [`Client::put`] with the choices `ax task put` has: `dry_run` (validate and show the
    /// next fires, write nothing) and `allow_unserved_handler` (register a task for workers
    /// deployed later).
    ///
    /// ```no_run
    /// # async fn later(client: &ax_sdk::Client) -> Result<(), ax_sdk::Error> {
    /// use ax_sdk::client::PutOptions;
    ///
    /// let spec = serde_json::json!({"handler": "report.build", "schedule": {"cron": "0 6 * * *"}});
    /// let options = PutOptions { allow_unserved_handler: true, ..PutOptions::default() };
    /// client.put_with("data", "daily-report", &spec, options).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put_with(
        &self,
        namespace: &str,
        id: &str,
        spec: &impl Serialize,
        options: PutOptions,
    ) -> Result<PutTaskResult> {
        let mut doc =
            serde_json::to_value(spec).map_err(|e| Error::Config(format!("spec: {e}")))?;
        let Some(obj) = doc.as_object_mut() else {
            return Err(Error::Config("spec: must be a JSON object".into()));
        };
        obj.insert("namespace".into(), namespace.into());
        obj.insert("id".into(), id.into());
        match &self.via {
            Via::Backend(b) => Ok(self.operations(b).put_task(doc, options).await?),
            Via::Http(api) => Ok(api.put(doc, &options).await?),
        }
    }

    /// Registers a task built in code, as [`Client::put_with`] does its JSON form: the
    /// spec's own namespace and id name it, and the cluster validates it as it does a file.
    ///
    /// ```no_run
    /// # async fn later(client: &ax_sdk::Client) -> Result<(), ax_sdk::Error> {
    /// use std::time::Duration;
    /// use ax_sdk::client::PutOptions;
    /// use ax_sdk::{Schedule, TaskOptions, TaskSpec};
    ///
    /// let spec = TaskSpec::new("data", "daily-report", "report.build", Schedule::cron("0 6 * * *", "Asia/Shanghai"))
    ///     .with_options(TaskOptions::new().priority(7).timeout(Duration::from_secs(600)));
    /// client.put_spec(&spec, PutOptions::default()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put_spec(&self, spec: &TaskSpec, options: PutOptions) -> Result<PutTaskResult> {
        let doc: serde_json::Value = serde_json::from_slice(&spec.to_json())
            .map_err(|e| Error::Config(format!("spec: {e}")))?;
        self.put_with(&spec.namespace, &spec.id, &doc, options)
            .await
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
            Via::Backend(b) => Ok(self.operations(b).delete_task(key(namespace, id)).await?),
            Via::Http(api) => Ok(api.delete(namespace, id).await?),
        }
    }

    /// One page of the tasks `filter` selects ([`TaskFilter::all`]: the first page of all),
    /// in key order; the result's `continue_token`, given to [`TaskFilter::after`], asks for
    /// the next.
    pub async fn list(&self, filter: TaskFilter) -> Result<TaskList> {
        let query = filter.into_query();
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
            requested_by: None,
        };
        params.check()?;
        match &self.via {
            Via::Backend(b) => Ok(self
                .operations(b)
                .trigger(key(namespace, id), params)
                .await?),
            Via::Http(api) => Ok(api.trigger(namespace, id, &params).await?),
        }
    }

    /// Pauses a task: it fires no more until resumed.
    pub async fn pause(&self, namespace: &str, id: &str) -> Result<TaskView> {
        match &self.via {
            Via::Backend(b) => Ok(self.operations(b).pause(key(namespace, id)).await?),
            Via::Http(api) => Ok(api.control(namespace, id, "pause").await?),
        }
    }

    /// Resumes a paused task.
    pub async fn resume(&self, namespace: &str, id: &str) -> Result<TaskView> {
        match &self.via {
            Via::Backend(b) => Ok(self.operations(b).resume(key(namespace, id)).await?),
            Via::Http(api) => Ok(api.control(namespace, id, "resume").await?),
        }
    }

    /// Kills a task's current executions (waiting, retrying or running), or only
    /// `execution`; `ApiError::NotFound` when there is none.
    pub async fn kill(
        &self,
        namespace: &str,
        id: &str,
        execution: Option<ExecutionId>,
    ) -> Result<KillResult> {
        match &self.via {
            Via::Backend(b) => Ok(self
                .operations(b)
                .kill_task(key(namespace, id), execution)
                .await?),
            Via::Http(api) => Ok(api.kill(namespace, id, execution).await?),
        }
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
            requested_by: None,
        };
        match &self.via {
            Via::Backend(b) => Ok(self
                .operations(b)
                .backfill(key(namespace, id), params)
                .await?),
            Via::Http(api) => Ok(api.backfill(namespace, id, &params).await?),
        }
    }

    /// The changes `backend` makes for this client's actor, each recorded in the audit log
    /// as the CLI's and the API's are.
    fn operations<'a>(&'a self, backend: &'a Backend) -> Operations<'a> {
        Operations::new(backend, &self.actor)
    }
}

fn key(namespace: &str, id: &str) -> TaskKey {
    TaskKey::new(namespace, id)
}
