//! Holding a lease: the keep-alive loop under every [`crate::Session`] (and so under
//! leadership, task locks and instance records).
//!
//! The loop is an explicit state machine ([`HoldState`]) advanced by [`Holder::step`]. Its
//! one safety rule: the holder trusts its lease only until `safe_until`, which is the send
//! time of the last renewal etcd confirmed, plus TTL - TTL/3. etcd refreshed the lease no
//! earlier than that send, so the lease cannot expire before send + TTL; giving up TTL/3
//! earlier leaves room for clock-rate differences and a slow loop. When the deadline
//! passes without a confirmed renewal, the holder declares the lease lost even if etcd
//! might still hold it: better a gap with no leader than two leaders.
//!
//! `safe_until` is a monotonic [`Instant`], so `is_valid()` stays right after the process
//! was paused: the first check after waking sees the deadline in the past even if the
//! keep-alive task has not run yet. The loop only moves the deadline and fires the loss
//! signal; both live in the lease's [`Validity`] (`validity.rs`), which answers every
//! `is_valid()`, so the rule holders check is written once for the lease and its keys.
//!
//! A renewal etcd does not answer within [`answer_timeout`] ends the keep-alive stream, and a
//! new one is opened at once (each attempt bounded the same way). The stream lives on one
//! connection to one member; with several endpoints, a hung member (stopped, overloaded,
//! half-dead network) would otherwise hold the stream until the safe deadline passed and the
//! lease was given up, while the other members could have renewed it. A reopened stream goes
//! wherever the client's balanced channel sends it; the binary keeps a member that does not
//! answer out of that channel, so the next attempt lands on a live one.
//!
//! The loop knows nothing of keys: several keys may live on one lease, and each is watched by
//! its own guard (`key_hold.rs`), so losing one key does not end the lease or the other keys.
//! Losing the lease ends them all: each key's validity shares the lease's deadline, and its
//! loss token is a child of the lease's.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::ReconnectBackoff;
use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::validity::{LossReason, Validity};

/// What the keep-alive task shares with its [`LeaseHold`].
struct Shared {
    validity: Validity,
    revoke_on_stop: AtomicBool,
}

/// A lease kept alive by a background task owned by this value.
///
/// Dropping it stops the task, which then revokes the lease (bounded by the request
/// timeout) so keys on it vanish at once; [`LeaseHold::abandon`] stops renewing without
/// revoking, as a crashed process would.
pub(crate) struct LeaseHold {
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    lease_id: i64,
}

impl LeaseHold {
    /// Starts keeping `lease_id` alive. `sent_at` is when the grant request was sent.
    pub(crate) fn start(
        client: Client,
        lease_id: i64,
        ttl: Duration,
        request_timeout: Duration,
        sent_at: Instant,
    ) -> Self {
        let shared = Arc::new(Shared {
            validity: Validity::lease(sent_at + safe_window(ttl)),
            revoke_on_stop: AtomicBool::new(true),
        });
        let stop = CancellationToken::new();
        let holder = Holder {
            client,
            lease_id,
            ttl,
            request_timeout,
            shared: shared.clone(),
            stop: stop.clone(),
        };
        let span = tracing::debug_span!("lease_hold", lease_id);
        let task = tokio::spawn(holder.run().instrument(span));
        LeaseHold {
            shared,
            stop,
            task: Some(task),
            lease_id,
        }
    }

    pub(crate) fn lease_id(&self) -> i64 {
        self.lease_id
    }

    /// The lease's validity; keys on it derive theirs with [`Validity::key`].
    pub(crate) fn validity(&self) -> &Validity {
        &self.shared.validity
    }

    /// Marks the hold lost and stops the task without revoking; waits for the task.
    pub(crate) async fn stop_without_revoke(&mut self, reason: LossReason) {
        self.shared.revoke_on_stop.store(false, Ordering::SeqCst);
        self.shared.validity.lose(reason);
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Stops renewing without revoking: the lease expires after its TTL.
    pub(crate) fn abandon(mut self) {
        self.shared.revoke_on_stop.store(false, Ordering::SeqCst);
        self.shared.validity.lose(LossReason::Dropped);
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for LeaseHold {
    fn drop(&mut self) {
        self.shared.validity.lose(LossReason::Dropped);
        // The task sees `stop`, revokes the lease under the request timeout and ends; it is
        // not awaited here because drop cannot wait.
        self.stop.cancel();
    }
}

/// TTL - TTL/3: how long a confirmed renewal (counted from its send) is trusted.
pub(crate) fn safe_window(ttl: Duration) -> Duration {
    ttl - ttl / 3
}

/// How long a renewal (or the opening of a keep-alive stream) may wait for etcd's answer
/// before the stream is given up and opened anew: TTL/10 (at least 500 ms, at most the
/// request timeout). A renewal sent TTL/3 after the last confirmed one is given up at
/// 0.43 TTL, which leaves 0.23 TTL of the safe window (2.3 s of the default 10 s) for
/// attempts on other members.
pub(crate) fn answer_timeout(ttl: Duration, request_timeout: Duration) -> Duration {
    (ttl / 10)
        .max(Duration::from_millis(500))
        .min(request_timeout)
}

/// The keep-alive loop's states.
enum HoldState {
    /// (Re)open the keep-alive stream at `retry_at`.
    Connecting {
        retry_at: Instant,
        backoff: ReconnectBackoff,
    },
    /// Renewing.
    Alive(Box<Alive>),
    /// The hold ended (lost or stopped).
    Done,
}

struct Alive {
    keeper: LeaseKeeper,
    responses: LeaseKeepAliveStream,
    next_renewal: Instant,
    /// Send times of renewals not answered yet, oldest first.
    in_flight: VecDeque<Instant>,
}

enum ConnectError {
    Lost(LossReason),
    Transient(String),
}

struct Holder {
    client: Client,
    lease_id: i64,
    ttl: Duration,
    request_timeout: Duration,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Holder {
    async fn run(mut self) {
        let mut state = HoldState::Connecting {
            retry_at: Instant::now(),
            backoff: reconnect_backoff(),
        };
        loop {
            state = self.step(state).await;
            if matches!(state, HoldState::Done) {
                break;
            }
        }
        if self.shared.revoke_on_stop.load(Ordering::SeqCst) {
            let mut lease = self.client.lease_client();
            match tokio::time::timeout(self.request_timeout, lease.revoke(self.lease_id)).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    tracing::debug!(lease_id = self.lease_id, %error, "lease revoke failed")
                }
                Err(_) => tracing::debug!(lease_id = self.lease_id, "lease revoke timed out"),
            }
        }
        self.shared.validity.lose(LossReason::Dropped);
    }

    fn lose(&self, reason: LossReason) -> HoldState {
        tracing::warn!(lease_id = self.lease_id, %reason, "lease hold lost");
        self.shared.validity.lose(reason);
        HoldState::Done
    }

    fn renewed(&self, sent_at: Instant) {
        self.shared
            .validity
            .renewed(sent_at + safe_window(self.ttl));
    }

    async fn step(&mut self, state: HoldState) -> HoldState {
        let safe_until = self.shared.validity.valid_until();
        match state {
            HoldState::Done => HoldState::Done,
            HoldState::Connecting { retry_at, backoff } => {
                self.connecting(safe_until, retry_at, backoff).await
            }
            HoldState::Alive(alive) => self.alive(safe_until, alive).await,
        }
    }

    /// Opens the keep-alive stream at `retry_at`, each attempt bounded by the answer timeout
    /// and the safe deadline.
    async fn connecting(
        &mut self,
        safe_until: Instant,
        retry_at: Instant,
        mut backoff: ReconnectBackoff,
    ) -> HoldState {
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => return HoldState::Done,
            _ = sleep_until(safe_until) => return self.lose(LossReason::RenewalOverdue),
            _ = sleep_until(retry_at) => {}
        }
        let attempt = answer_timeout(self.ttl, self.request_timeout);
        let deadline = (Instant::now() + attempt).min(safe_until);
        let outcome = tokio::select! {
            biased;
            _ = self.stop.cancelled() => return HoldState::Done,
            r = tokio::time::timeout_at(deadline, self.connect()) => r,
        };
        match outcome {
            Ok(Ok(alive)) => HoldState::Alive(Box::new(alive)),
            Ok(Err(ConnectError::Lost(reason))) => self.lose(reason),
            Ok(Err(ConnectError::Transient(error))) => {
                let wait = backoff.next_delay(&mut rand::rng());
                tracing::debug!(lease_id = self.lease_id, %error, failures = backoff.failures(), "keep-alive reconnect failed");
                HoldState::Connecting {
                    retry_at: Instant::now() + wait,
                    backoff,
                }
            }
            // The attempt used up its time already: try again at once.
            Err(_) => HoldState::Connecting {
                retry_at: Instant::now(),
                backoff,
            },
        }
    }

    /// Renews on time and reads etcd's answers; a renewal unanswered for too long, or a
    /// broken stream, reconnects.
    async fn alive(&mut self, safe_until: Instant, mut alive: Box<Alive>) -> HoldState {
        let Alive {
            keeper,
            responses,
            next_renewal,
            in_flight,
        } = &mut *alive;
        let reconnect = HoldState::Connecting {
            retry_at: Instant::now(),
            backoff: reconnect_backoff(),
        };
        let unanswered_at = in_flight
            .front()
            .map(|sent| *sent + answer_timeout(self.ttl, self.request_timeout));
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => HoldState::Done,
            _ = sleep_until(safe_until) => self.lose(LossReason::RenewalOverdue),
            // `unwrap_or` is never awaited: the branch is off without a renewal out.
            _ = sleep_until(unanswered_at.unwrap_or(safe_until)), if unanswered_at.is_some() => {
                tracing::info!(lease_id = self.lease_id, "lease renewal unanswered; reopening the keep-alive stream");
                reconnect
            }
            msg = responses.message() => match msg {
                Ok(Some(resp)) if resp.ttl() > 0 => {
                    if let Some(sent_at) = in_flight.pop_front() {
                        self.renewed(sent_at);
                    }
                    HoldState::Alive(alive)
                }
                Ok(Some(_)) => self.lose(LossReason::LeaseExpired),
                Ok(None) => reconnect,
                Err(error) => {
                    tracing::debug!(lease_id = self.lease_id, %error, "keep-alive stream broke");
                    reconnect
                }
            },
            _ = sleep_until(*next_renewal) => {
                let now = Instant::now();
                *next_renewal = now + self.ttl / 3;
                match keeper.keep_alive().await {
                    Ok(()) => {
                        in_flight.push_back(now);
                        HoldState::Alive(alive)
                    }
                    Err(_) => reconnect,
                }
            }
        }
    }

    /// Opens the keep-alive stream (its first request is itself a renewal).
    async fn connect(&self) -> Result<Alive, ConnectError> {
        let sent_at = Instant::now();
        let mut lease = self.client.lease_client();
        let (keeper, responses) = match lease.keep_alive(self.lease_id).await {
            Ok(v) => v,
            Err(etcd_client::Error::LeaseKeepAliveError(m)) if m.contains("not found") => {
                return Err(ConnectError::Lost(LossReason::LeaseExpired))
            }
            Err(e) => return Err(ConnectError::Transient(e.to_string())),
        };
        self.renewed(sent_at);
        Ok(Alive {
            keeper,
            responses,
            next_renewal: sent_at + self.ttl / 3,
            in_flight: VecDeque::new(),
        })
    }
}

/// Keep-alive reconnects: from 50 ms doubling to 400 ms, jittered; short because the safe
/// window is short.
pub(crate) fn reconnect_backoff() -> ReconnectBackoff {
    ReconnectBackoff::new(Duration::from_millis(50), Duration::from_millis(400))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_window_is_two_thirds_of_ttl() {
        assert_eq!(safe_window(Duration::from_secs(3)), Duration::from_secs(2));
        let mut backoff = reconnect_backoff();
        assert_eq!(backoff.base(), Duration::from_millis(50));
        for _ in 0..10 {
            assert!(backoff.next_delay(&mut rand::rng()) <= Duration::from_millis(400));
        }
        assert_eq!(backoff.base(), Duration::from_millis(400));
    }

    #[test]
    fn a_renewal_is_given_up_with_time_left_to_renew_elsewhere() {
        let t = Duration::from_secs(5);
        let ttl = Duration::from_secs(10);
        assert_eq!(answer_timeout(ttl, t), Duration::from_secs(1));
        // Sent TTL/3 after the last confirmed renewal and given up: two more attempts fit.
        assert!(ttl / 3 + 3 * answer_timeout(ttl, t) < safe_window(ttl));
        assert_eq!(
            answer_timeout(Duration::from_secs(2), t),
            Duration::from_millis(500)
        );
        assert_eq!(
            answer_timeout(Duration::from_secs(120), t),
            t,
            "never past the request timeout"
        );
    }
}
