//! What a handler is given, and what it is: the scheduling core's handler contract, the one
//! the embedded kernel runs too.
//!
//! A handler sees an attempt through the core's [`Context`] (or a [`Typed<T>`], the context
//! with the payload decoded), not the queue's message type, so the message can grow fields
//! without breaking handlers, and a handler written for a cluster worker runs in
//! `ax-embedded` unchanged. The payload is decoded once, before the handler runs, and one
//! that does not fit the handler's type fails the attempt permanently (trying the same bytes
//! again cannot help).
//!
//! ```
//! use std::sync::Arc;
//!
//! use ax_sdk::{typed, Handler, HandlerError, Typed};
//!
//! #[derive(serde::Deserialize)]
//! struct Email {
//!     to: String,
//! }
//!
//! // One value, to register on a `Worker` and on an embedded `Kernel` alike.
//! let send: Arc<dyn Handler> = Arc::new(typed(|job: Typed<Email>| async move {
//!     if job.payload.to.is_empty() {
//!         return Err(HandlerError::Permanent("no recipient".into()));
//!     }
//!     println!("attempt {} of {} on {}", job.attempt(), job.execution_id(), job.runner());
//!     Ok(())
//! }));
//! # let _ = send;
//! ```

pub use ax_scheduler_core::handler::{
    typed, typed_with, Cancel, Context, Handler, HandlerFuture, IntoHandler, Progress, Typed,
};
