//! The role's state machine: follow until the campaign is won, lead until the term ends.
//!
//! One task runs it ([`run`]). `Following` keeps the registry catalog warm (watching even when
//! not leading, so a takeover starts from memory) and waits for the campaign, which runs in
//! its own task; `Leading` runs a [`Term`]. The registry watcher and the catalog live across
//! terms, in [`Role`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ax_election::Leadership;
use ax_registry::TaskWatcher;
use ax_scheduler_core::ReconnectBackoff;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info_span, warn, Instrument};

use super::catalog::{apply_event, Catalog};
use super::term::Term;
use super::{LeaderDeps, LeaderSettings};
use crate::metrics::BACKEND_ETCD;

enum Phase {
    Following,
    Leading(Box<Term>),
}

/// What lives across terms.
struct Role {
    settings: LeaderSettings,
    deps: LeaderDeps,
    watcher: TaskWatcher,
    catalog: Catalog,
    cancel: CancellationToken,
    /// Waits between failed takeovers: a takeover that fails at once (a backend refusing)
    /// would otherwise campaign again at once, each time with a new lease and token.
    takeover_backoff: ReconnectBackoff,
}

/// Runs the scheduler role until `cancel` fires. Nothing ends it earlier: what fails is
/// retried, reported, or ends a term.
pub async fn run(settings: LeaderSettings, deps: LeaderDeps, cancel: CancellationToken) {
    let watcher = deps.registry.watch(cancel.child_token());
    let mut role = Role {
        settings,
        deps,
        watcher,
        catalog: Catalog::default(),
        cancel,
        takeover_backoff: ReconnectBackoff::new(Duration::from_secs(1), Duration::from_secs(30)),
    };
    let mut phase = Phase::Following;
    loop {
        phase = match phase {
            Phase::Following => role.follow().await,
            Phase::Leading(term) => {
                let Role {
                    settings,
                    deps,
                    watcher,
                    catalog,
                    cancel,
                    ..
                } = &mut role;
                term.run(settings, deps, watcher, catalog, cancel).await;
                Phase::Following
            }
        };
        if role.cancel.is_cancelled() {
            return;
        }
    }
}

impl Role {
    async fn follow(&mut self) -> Phase {
        let (settings, deps, watcher, catalog, cancel, backoff) = (
            &self.settings,
            &self.deps,
            &mut self.watcher,
            &mut self.catalog,
            &self.cancel,
            &mut self.takeover_backoff,
        );
        deps.metrics.set_leader(false);
        let mut campaign: Option<oneshot::Receiver<anyhow::Result<Leadership>>> = None;
        let mut campaign_after = Instant::now();
        loop {
            let waiting = Instant::now() < campaign_after;
            if campaign.is_none() && catalog.synced && !waiting {
                campaign = Some(start_campaign(settings, deps, cancel));
            }
            tokio::select! {
                _ = tokio::time::sleep_until(campaign_after), if waiting => {}
                _ = cancel.cancelled() => return Phase::Following,
                event = watcher.next() => match event {
                    Some(event) => { apply_event(catalog, &deps.metrics, event); }
                    None => return Phase::Following,
                },
                won = async { match campaign.as_mut() { Some(rx) => rx.await, None => std::future::pending().await } } => {
                    campaign = None;
                    match won {
                        Ok(Ok(leadership)) => {
                            match Term::start(settings, deps, catalog, leadership, cancel).await {
                                Ok(term) => {
                                    backoff.reset();
                                    return Phase::Leading(Box::new(term));
                                }
                                Err(e) => {
                                    let wait = backoff.next_delay(&mut rand::rng());
                                    warn!(error = %format!("{e:#}"), retry_in = ?wait, "could not take over; campaigning again after a pause");
                                    campaign_after = Instant::now() + wait;
                                }
                            }
                        }
                        Ok(Err(e)) => {
                            if cancel.is_cancelled() {
                                return Phase::Following;
                            }
                            let wait = backoff.next_delay(&mut rand::rng());
                            warn!(error = %format!("{e:#}"), retry_in = ?wait, "campaign ended with an error; retrying");
                            campaign_after = Instant::now() + wait;
                        }
                        Err(_) => {}
                    }
                }
            }
        }
    }
}

fn start_campaign(
    settings: &LeaderSettings,
    deps: &LeaderDeps,
    cancel: &CancellationToken,
) -> oneshot::Receiver<anyhow::Result<Leadership>> {
    let (tx, rx) = oneshot::channel();
    let candidate = deps.candidate.clone();
    let cancel = cancel.clone();
    let max_skew = settings.max_clock_skew;
    let clock_check = settings.clock_check.clone();
    let metrics = Arc::clone(&deps.metrics);
    deps.tracker.spawn(
        async move {
            // A replica whose clock disagrees with etcd's would fire early or late for
            // everyone: it does not lead until the clocks agree.
            if let Some(check) = clock_check {
                loop {
                    match check.skew().await {
                        Ok(skew) if skew.abs() <= max_skew.as_secs_f64() => break,
                        Ok(skew) => warn!(
                            skew_seconds = skew,
                            max_seconds = max_skew.as_secs_f64(),
                            "clock skew against etcd is too large: refusing to lead; fix NTP on this host"
                        ),
                        Err(e) => {
                            // The check guards against a bad clock, not a bad etcd: leading
                            // goes on without it (the gRPC client may well reach etcd), but
                            // never unannounced.
                            metrics.backend_error(BACKEND_ETCD);
                            warn!(
                                error = %format!("{e:#}"),
                                "cannot check this host's clock against etcd's (scheduler.max_clock_skew); campaigning without the check"
                            );
                            break;
                        }
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                    }
                }
            }
            let result = candidate.campaign(&cancel).await.context("campaign failed");
            let _ = tx.send(result);
        }
        .instrument(info_span!("campaign")),
    );
    rx
}
