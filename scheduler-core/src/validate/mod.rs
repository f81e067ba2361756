//! The user-facing JSON form of a task: lenient parsing that reports every problem at once.
//!
//! serde's derive stops at the first error and words it for programmers ("invalid type:
//! integer, expected a string at line 1 column 40"). A person registering a task wants the
//! whole list, each with the field path and what to write instead. So the bytes are read into
//! a `serde_json::Value` and every field is checked by hand, collecting [`FieldError`]s;
//! defaults come from the constants in `task.rs`.
//! [`TaskSpec::to_json`](crate::TaskSpec::to_json) writes the same form back with every
//! default spelled out, and `from_json(to_json(spec))` gives `spec` again.
//!
//! One module per concept: `checker` reads single values and collects the problems, `spec`
//! reads the document top-down and calls one reader per section (`schedule`, `http`,
//! `command`, `retry`, `policy` for misfire and overlap, `fanout`, `depends_on`, `deadline`,
//! `concurrency`, and `fields` for the plain top-level values), and `serialize` writes the
//! form back. The order in which `spec` calls the readers is the order of the problems.

mod checker;
mod command;
mod concurrency;
mod deadline;
mod depends_on;
mod fanout;
mod fields;
mod http;
mod policy;
mod retry;
mod schedule;
mod serialize;
mod spec;

pub use checker::check_name;
pub use command::check_env_name;

#[cfg(test)]
mod tests;

pub use crate::field_error::{FieldError, ValidationErrors};
