//! The Lua scripts, one file each under `src/lua/`.
//!
//! Every state change that touches more than one key runs as one script so it is atomic
//! (a message is never in two places, or in none). Each script touches keys of one queue only
//! (or, for the worker events, of the event slot), which share a hash tag, so it is single-slot on Redis Cluster. `redis::Script` sends EVALSHA
//! and loads the script on NOSCRIPT, so a restarted Redis needs nothing from us.

use redis::Script;

/// A script that puts messages in the queued set, with the order functions (`order.lua`)
/// before its own text: one definition of the order, however many scripts push.
fn ordered(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", include_str!("lua/order.lua")))
}

/// The compiled-in scripts.
pub(crate) struct Scripts {
    pub(crate) enqueue_many: Script,
    pub(crate) advance_fence: Script,
    pub(crate) take: Script,
    pub(crate) ack: Script,
    pub(crate) retry_later: Script,
    pub(crate) promote_due: Script,
    pub(crate) reap: Script,
    pub(crate) dead_letter: Script,
    pub(crate) dlq_requeue: Script,
    pub(crate) release: Script,
    pub(crate) deregister: Script,
    pub(crate) take_orphans: Script,
    pub(crate) read_events: Script,
    pub(crate) dlq_trim: Script,
    pub(crate) kill: Script,
    pub(crate) find: Script,
    pub(crate) history_page: Script,
    pub(crate) awaiting_open: Script,
    pub(crate) awaiting_park: Script,
    pub(crate) awaiting_close: Script,
    pub(crate) awaiting_end: Script,
    pub(crate) awaiting_progress: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            enqueue_many: ordered(include_str!("lua/enqueue_many.lua")),
            advance_fence: Script::new(include_str!("lua/advance_fence.lua")),
            take: ordered(include_str!("lua/take.lua")),
            ack: ordered(include_str!("lua/ack.lua")),
            retry_later: ordered(include_str!("lua/retry_later.lua")),
            promote_due: ordered(include_str!("lua/promote_due.lua")),
            reap: ordered(include_str!("lua/reap.lua")),
            dead_letter: ordered(include_str!("lua/dead_letter.lua")),
            dlq_requeue: ordered(include_str!("lua/dlq_requeue.lua")),
            release: ordered(include_str!("lua/release.lua")),
            deregister: Script::new(include_str!("lua/deregister.lua")),
            take_orphans: Script::new(include_str!("lua/take_orphans.lua")),
            read_events: Script::new(include_str!("lua/read_events.lua")),
            dlq_trim: Script::new(include_str!("lua/dlq_trim.lua")),
            kill: ordered(include_str!("lua/kill.lua")),
            find: Script::new(include_str!("lua/find.lua")),
            history_page: Script::new(include_str!("lua/history_page.lua")),
            awaiting_open: Script::new(include_str!("lua/awaiting_open.lua")),
            awaiting_park: ordered(include_str!("lua/awaiting_park.lua")),
            awaiting_close: Script::new(include_str!("lua/awaiting_close.lua")),
            awaiting_end: Script::new(include_str!("lua/awaiting_end.lua")),
            awaiting_progress: Script::new(include_str!("lua/awaiting_progress.lua")),
        }
    }
}
