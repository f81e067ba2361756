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

/// Runs `invocations` of `script` in one pipeline (one round trip however many), under the
/// queue's command timeout; when Redis lost its script cache (a restart), loads the script
/// and sends the same calls once more.
pub(crate) async fn pipelined<T: redis::FromRedisValue>(
    queue: &crate::queue::Queue,
    op: &'static str,
    script: &Script,
    invocations: &[redis::ScriptInvocation<'_>],
) -> crate::error::Result<Vec<T>> {
    let pipeline = |load: bool| {
        let mut pipe = redis::pipe();
        if load {
            pipe.load_script(script).ignore();
        }
        for inv in invocations {
            pipe.invoke_script(inv);
        }
        pipe
    };
    let after = queue.config().command_timeout;
    let timeout = || crate::error::QueueError::Timeout { op, after };
    let mut conn = queue.connection();
    let first = pipeline(false);
    let answer: redis::RedisResult<Vec<T>> =
        tokio::time::timeout(after, first.query_async(&mut conn))
            .await
            .map_err(|_| timeout())?;
    let answer = match answer {
        Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
            let again = pipeline(true);
            tokio::time::timeout(after, again.query_async(&mut conn))
                .await
                .map_err(|_| timeout())?
        }
        other => other,
    };
    answer.map_err(crate::error::QueueError::redis(op))
}
