//! Handlers by name: the table the pool looks each execution's handler up in.
//!
//! It sits above the handler contract and the built-ins because it is what puts them
//! together: the built-ins implement [`Handler`], and the table registers them beside user
//! handlers and async closures.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use ax_queue::ExecutionMessage;

use crate::builtin::{HttpHandler, LogHandler, NoopHandler};
use crate::handler::{
    ClusterAttempt, Context, Handler, HandlerContext, HandlerError, HandlerFuture,
};

/// A handler from an async closure `|ctx, execution| async move { ... }` of the cluster's
/// parts of an attempt.
struct FnHandler<F>(F);

impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(HandlerContext, ExecutionMessage) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    fn run(&self, ctx: Context) -> HandlerFuture<'_> {
        match ClusterAttempt::of(&ctx) {
            Ok(c) => Box::pin((self.0)(c.ctx.clone(), c.message.clone())),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// Handlers by name.
#[derive(Clone, Default)]
pub struct HandlerRegistry {
    handlers: BTreeMap<String, Arc<dyn Handler>>,
}

impl std::fmt::Debug for HandlerRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerRegistry")
            .field("handlers", &self.names())
            .finish()
    }
}

impl HandlerRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry with the built-ins `http`, `log` and `noop` (`command` needs its
    /// configuration: register a [`crate::CommandHandler`]).
    pub fn with_builtins() -> Self {
        let mut r = Self::new();
        r.register("http", HttpHandler::default());
        r.register("log", LogHandler);
        r.register("noop", NoopHandler);
        r
    }

    /// Registers (or replaces) a handler under `name`.
    pub fn register(&mut self, name: impl Into<String>, handler: impl Handler) -> &mut Self {
        self.handlers.insert(name.into(), Arc::new(handler));
        self
    }

    /// Registers an async closure `|ctx, execution| async move { ... }` of the cluster's
    /// parts of an attempt under `name` (a cluster-only handler).
    pub fn register_fn<F, Fut>(&mut self, name: impl Into<String>, f: F) -> &mut Self
    where
        F: Fn(HandlerContext, ExecutionMessage) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.register(name, FnHandler(f))
    }

    /// The handler registered under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Handler>> {
        self.handlers.get(name).cloned()
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.handlers.keys().cloned().collect()
    }
}
