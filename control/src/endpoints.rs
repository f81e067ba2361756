//! Keeping etcd members that do not answer out of the client's balanced channel.
//!
//! etcd-client spreads requests and new streams over every endpoint at random (tonic's
//! power-of-two-choices balancer, whose connections all report the same load), and counts a
//! connection usable for as long as it is open. A member that died is harmless: its
//! connection fails at once and the caller retries. A member that hangs (stopped, swapping,
//! cut off behind a firewall that drops packets) is not: its connection stays open, and its
//! share of requests, watches and lease keep-alive streams waits for each caller's timeout,
//! for as long as it hangs (the kernel of a stopped process even accepts new connections).
//! This is what Go's clientv3 health balancer guards against, and what this module adds.
//!
//! When ax has more than one endpoint, [`watch_endpoints`] probes each member alone every
//! [`PROBE_INTERVAL`], on a client of its own with the same settings: a count-only read of
//! the leader key (linearizable, so a member cut off from the quorum fails it too) under
//! [`PROBE_TIMEOUT`]. [`changes`] (the decision, pure) takes a member that did not answer out
//! of the channel and puts one that answers back; it never takes one out while no member
//! answers, since then either all are down or this host is cut off, and the channel should
//! keep trying them all.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// How often each member is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How long a probe may take (at most `etcd.timeout`): a member this slow on a cheap read is
/// better left out while others answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// One change to the set of endpoints the client uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Put the endpoint back: it answers again.
    Add(String),
    /// Take the endpoint out: it did not answer while another did.
    Remove(String),
}

/// The changes after one round of probes: `serving` is the set in the channel, `answered`
/// each endpoint's probe result. Additions come first, so the channel is never empty.
pub fn changes(serving: &BTreeSet<String>, answered: &BTreeMap<String, bool>) -> Vec<Change> {
    let any_answered = answered.values().any(|ok| *ok);
    let mut out: Vec<Change> = answered
        .iter()
        .filter(|(e, ok)| **ok && !serving.contains(*e))
        .map(|(e, _)| Change::Add(e.clone()))
        .collect();
    if any_answered {
        out.extend(
            answered
                .iter()
                .filter(|(e, ok)| !**ok && serving.contains(*e))
                .map(|(e, _)| Change::Remove(e.clone())),
        );
    }
    out
}

/// The URL etcd-client files an endpoint under: as given with a scheme, else `http://`
/// (`https://` with TLS) in front, as the client itself does. Adding and removing an endpoint
/// must name it exactly so.
pub fn endpoint_url(endpoint: &str, tls: bool) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else if tls {
        format!("https://{endpoint}")
    } else {
        format!("http://{endpoint}")
    }
}

/// Probes every endpoint of `client` until `cancel`, taking members that do not answer out of
/// its channel and putting them back when they do (see the module notes). `options` are the
/// client's own connect options, `probe_key` the key read by each probe.
pub async fn watch_endpoints(
    client: Client,
    endpoints: Vec<String>,
    options: ConnectOptions,
    probe_key: String,
    timeout: Duration,
    cancel: CancellationToken,
) {
    let timeout = PROBE_TIMEOUT.min(timeout);
    let mut probes: BTreeMap<String, Option<Client>> =
        endpoints.into_iter().map(|e| (e, None)).collect();
    let mut serving: BTreeSet<String> = probes.keys().cloned().collect();
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let round = spawn_probes(&probes, &options, &probe_key, timeout);
        let Some(heard) = hear_probes(round, &mut probes, &cancel).await else {
            return;
        };
        apply_changes(&client, &mut serving, &heard).await;
    }
}

/// What one probe round heard: whether each member answered, and why those that did not.
#[derive(Default)]
struct Heard {
    answered: BTreeMap<String, bool>,
    errors: BTreeMap<String, String>,
}

/// Starts one probe of every member, each bounded by `timeout`.
fn spawn_probes(
    probes: &BTreeMap<String, Option<Client>>,
    options: &ConnectOptions,
    probe_key: &str,
    timeout: Duration,
) -> JoinSet<(String, Result<Client, String>)> {
    let mut round = JoinSet::new();
    for (endpoint, probe) in probes {
        let endpoint = endpoint.clone();
        let probe = probe.clone();
        let options = options.clone();
        let key = probe_key.to_owned();
        round.spawn(async move {
            let outcome = tokio::time::timeout(timeout, probe_once(&endpoint, probe, options, key))
                .await
                .unwrap_or_else(|_| Err("no answer".to_owned()));
            (endpoint, outcome)
        });
    }
    round
}

/// Waits for every probe of the round, keeping the client of each member that answered for
/// its next probe; `None` once `cancel` fired.
async fn hear_probes(
    mut round: JoinSet<(String, Result<Client, String>)>,
    probes: &mut BTreeMap<String, Option<Client>>,
    cancel: &CancellationToken,
) -> Option<Heard> {
    let mut heard = Heard::default();
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return None,
            next = round.join_next() => next,
        };
        let Some(joined) = next else { break };
        // A probe task only ends by returning (nothing in it panics; it is not aborted
        // while the round is awaited).
        let Ok((endpoint, outcome)) = joined else {
            continue;
        };
        match outcome {
            Ok(client) => {
                probes.insert(endpoint.clone(), Some(client));
                heard.answered.insert(endpoint, true);
            }
            Err(error) => {
                // Said once, when the member is left out (while no member answers, the
                // rest of the replica says that etcd is down).
                debug!(%endpoint, %error, "etcd member does not answer");
                heard.answered.insert(endpoint.clone(), false);
                heard.errors.insert(endpoint, error);
            }
        }
    }
    Some(heard)
}

/// Adds to and removes from `client`'s channel the members whose answer changed (see
/// [`changes`]); `serving` follows what the client was told.
async fn apply_changes(client: &Client, serving: &mut BTreeSet<String>, heard: &Heard) {
    for change in changes(serving, &heard.answered) {
        let result = match &change {
            Change::Add(e) => client.add_endpoint(e).await,
            Change::Remove(e) => client.remove_endpoint(e).await,
        };
        match (result, change) {
            (Ok(()), Change::Add(e)) => {
                info!(endpoint = %e, "etcd member answers again; using it");
                serving.insert(e);
            }
            (Ok(()), Change::Remove(e)) => {
                let error = heard.errors.get(&e).map(String::as_str).unwrap_or_default();
                warn!(endpoint = %e, error, "etcd member does not answer; left out until it answers again");
                serving.remove(&e);
            }
            (Err(error), change) => {
                warn!(?change, %error, "cannot change the etcd client's endpoints")
            }
        }
    }
}

/// One probe of one member: its client (made on first use) reads `key`, count only.
async fn probe_once(
    endpoint: &str,
    probe: Option<Client>,
    options: ConnectOptions,
    key: String,
) -> Result<Client, String> {
    let client = match probe {
        Some(client) => client,
        None => Client::connect([endpoint], Some(options))
            .await
            .map_err(|e| e.to_string())?,
    };
    client
        .kv_client()
        .get(key, Some(GetOptions::new().with_count_only()))
        .await
        .map_err(|e| e.to_string())?;
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn answers(items: &[(&str, bool)]) -> BTreeMap<String, bool> {
        items.iter().map(|(e, ok)| ((*e).to_owned(), *ok)).collect()
    }

    #[test]
    fn a_silent_member_leaves_while_another_answers_and_returns_when_it_answers() {
        let all = set(&["a", "b", "c"]);
        assert_eq!(
            changes(&all, &answers(&[("a", true), ("b", false), ("c", true)])),
            [Change::Remove("b".into())]
        );
        let without_b = set(&["a", "c"]);
        assert!(changes(
            &without_b,
            &answers(&[("a", true), ("b", false), ("c", true)])
        )
        .is_empty());
        assert_eq!(
            changes(
                &without_b,
                &answers(&[("a", true), ("b", true), ("c", true)])
            ),
            [Change::Add("b".into())]
        );
    }

    #[test]
    fn nothing_leaves_while_no_member_answers() {
        let all = set(&["a", "b", "c"]);
        assert!(changes(&all, &answers(&[("a", false), ("b", false), ("c", false)])).is_empty());
    }

    #[test]
    fn the_channel_is_never_left_empty() {
        // Only "a" was serving and fell silent, while "b" (out) answers: "b" goes in first.
        let only_a = set(&["a"]);
        assert_eq!(
            changes(&only_a, &answers(&[("a", false), ("b", true)])),
            [Change::Add("b".into()), Change::Remove("a".into())]
        );
    }

    #[test]
    fn endpoints_are_named_as_the_client_files_them() {
        assert_eq!(endpoint_url("http://e:2379", false), "http://e:2379");
        assert_eq!(endpoint_url("e:2379", false), "http://e:2379");
        assert_eq!(endpoint_url("e:2379", true), "https://e:2379");
    }
}
