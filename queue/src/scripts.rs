//! What the Lua scripts share. Each script sits beside the module that calls it, in a folder of
//! that module's name (`settle/ack.lua` for `settle.rs`), and is kept there in a `static`:
//! built and hashed once per process, whichever `Queue` runs it.
//!
//! Every state change that touches more than one key runs as one script so it is atomic
//! (a message is never in two places, or in none). Each script touches keys of one queue only
//! (or, for the worker events, of the event slot), which share a hash tag (see `keys.rs`), so
//! it is single-slot on Redis Cluster. `redis::Script` sends EVALSHA and loads the script on
//! NOSCRIPT, so a restarted Redis needs nothing from us.

use redis::Script;

/// A script that puts messages in the queued set, with the order functions
/// (`scripts/order.lua`) before its own text: one definition of the order, however many
/// scripts push.
pub(crate) fn ordered(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", include_str!("scripts/order.lua")))
}
