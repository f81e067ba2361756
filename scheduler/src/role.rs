//! The role's loop: keep the catalog, win authority, run a term per authority held.
//!
//! One task runs it ([`run`]). It keeps the registry catalog warm (watching even when not
//! scheduling, so a takeover starts from memory) and gets its authority from one of two
//! sources ([`Source`]): with one shard, the campaign for the leader key; with more, the
//! shard ownership loop ([`ax_election::ShardOwner`]), which gives it shards as the map
//! assigns them and asks for them back when a replica joins. Each authority held runs one
//! [`Term`] in a task of its own, armed from the catalog's entries in its scope; the role
//! hands each registry change to the term whose scope holds its key. Every term is the same
//! code: with one shard it is the one leader's term, with many, one shard's.
//!
//! A handover stops the shard's term the way a shutdown does (it writes what it holds, then
//! releases the key), so the next owner starts from written states. Losing a key ends its
//! term at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ax_election::{Leadership, ShardEvent, ShardOwner};
use ax_registry::TaskWatcher;
use ax_scheduler_core::ReconnectBackoff;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};

use super::authority::{Authority, Scope};
use super::catalog::{apply_event, Catalog, CatalogSlice, Change};
use super::feeds::Feeds;
use super::term::{self, TermEnd, TermInput};
use super::{Error, LeaderDeps, LeaderSettings};
use crate::deps::TermDeps;
use crate::supervise::{self, supervise, ROLE};
use gates::{wait_for_redis, ClockAgreement};

mod gates;

/// Changes a term may have waiting: a burst past this makes the role wait for the term
/// (the watch waits meanwhile) instead of growing without bound.
const CHANGES_CAPACITY: usize = 4096;

/// A term running in its task.
struct RunningTerm {
    changes: mpsc::Sender<Change>,
    /// Cancelled to hand the shard over: the term writes what it holds and releases it.
    stop: CancellationToken,
    /// Its takeover is done: it fires (what the metrics count).
    started: bool,
    /// Which term of its shard this is: a shard lost and taken again has a new term before
    /// the old one's end is reported, and that report must not remove the new one.
    generation: u64,
}

/// What a term's task reports.
struct TermNote {
    shard: Option<u32>,
    generation: u64,
    kind: NoteKind,
}

enum NoteKind {
    /// The takeover is done.
    Started,
    /// The term is over, and how (see [`TermEnd`]): one that ended in its takeover (a
    /// backend refused) or panicked campaigns again, or starts the shard again, after a
    /// pause.
    Ended(TermEnd),
}

/// Where authority comes from.
enum Source {
    /// One shard: campaign for the leader key while no term runs.
    Election {
        campaign: Option<oneshot::Receiver<Result<Leadership, Error>>>,
        campaign_after: Instant,
    },
    /// Several shards: the ownership loop, once the catalog is synced, Redis answers and the
    /// clock check passed (`gate`).
    Shards {
        owner: Option<ShardOwner>,
        gate: Option<oneshot::Receiver<()>>,
    },
}

/// What lives across terms.
struct Role {
    settings: LeaderSettings,
    deps: LeaderDeps,
    /// What each term is given of `deps`.
    term_deps: TermDeps,
    watcher: TaskWatcher,
    catalog: Catalog,
    /// The newest registry revision the catalog reflects, for the terms (see
    /// [`Catalog::may_not_have_seen`]).
    seen: Arc<AtomicI64>,
    feeds: Feeds,
    cancel: CancellationToken,
    terms: BTreeMap<Option<u32>, RunningTerm>,
    /// The generation of the next term.
    generation: u64,
    notes_tx: mpsc::UnboundedSender<TermNote>,
    /// Waits between failed takeovers: a takeover that fails at once (a backend refusing)
    /// would otherwise campaign again at once, each time with a new lease and token.
    takeover_backoff: ReconnectBackoff,
    /// The same per shard: a shard whose takeover failed is released, taken again at once
    /// by the ownership loop, and started only after its pause.
    shard_backoff: HashMap<u32, (ReconnectBackoff, Instant)>,
    /// Shards held and waiting for their pause to end before their term starts.
    delayed: Vec<(Instant, Authority)>,
    /// Leaving the shard ownership until Redis answers ([`Role::leave_for_redis`]).
    leaving: bool,
}

/// Runs the scheduler role until `cancel` fires. Nothing ends it earlier: what fails is
/// retried, reported, or ends a term; a panic of the role's loop is counted and the loop
/// started again ([`crate::supervise`]).
pub async fn run(settings: LeaderSettings, deps: LeaderDeps, cancel: CancellationToken) {
    let (metrics, tracker) = (Arc::clone(&deps.metrics), deps.tracker.clone());
    supervise(ROLE, metrics, tracker, cancel.clone(), move || {
        // The attempt's own token: a panic cancels it (the guard drops in the unwind), so
        // its pollers, its watch and its campaign stop, and its terms stop as at a shutdown
        // (their stop tokens are its children) before the next attempt campaigns.
        let attempt = cancel.child_token();
        let (settings, deps) = (settings.clone(), deps.clone());
        async move {
            let _stop_with_the_attempt = attempt.clone().drop_guard();
            run_once(settings, deps, attempt).await;
        }
        .instrument(tracing::Span::current())
    })
    .await;
}

/// One attempt of the role's loop, until `cancel` fires.
async fn run_once(settings: LeaderSettings, deps: LeaderDeps, cancel: CancellationToken) {
    let (mut role, mut source, mut notes_rx) = Role::new(settings, deps, cancel);
    role.deps.metrics.set_leader(false);
    loop {
        role.start_source(&mut source);
        let waiting_until = role.waiting_until(&source);
        tokio::select! {
            biased;
            _ = role.cancel.cancelled() => break,
            Some(note) = notes_rx.recv() => role.on_term_note(&mut source, note),
            event = role.watcher.next() => match event {
                Some(event) => role.on_registry_event(event).await,
                None => break,
            },
            event = source_event(&mut source) => role.on_source_event(&mut source, event),
            _ = sleep_until(waiting_until) => role.start_delayed(),
        }
    }
    role.shut_down(source, notes_rx).await;
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What the source of authority said.
enum SourceEvent {
    Campaign(Result<Result<Box<Leadership>, Error>, ()>),
    Shard(Option<ShardEvent>),
    ClockChecked,
}

async fn source_event(source: &mut Source) -> SourceEvent {
    match source {
        Source::Election {
            campaign: Some(rx), ..
        } => SourceEvent::Campaign(rx.await.map(|r| r.map(Box::new)).map_err(|_| ())),
        Source::Shards {
            owner: Some(owner), ..
        } => SourceEvent::Shard(owner.next().await),
        Source::Shards {
            owner: None,
            gate: Some(gate),
        } => match gate.await {
            Ok(()) => SourceEvent::ClockChecked,
            // Only the role's cancellation drops the gate's sender (the check starts again
            // by itself after a panic).
            Err(_) => std::future::pending().await,
        },
        _ => std::future::pending().await,
    }
}

impl Role {
    /// The role before its loop starts: no term, no authority sought yet; with the receiver
    /// of its terms' notes.
    fn new(
        settings: LeaderSettings,
        deps: LeaderDeps,
        cancel: CancellationToken,
    ) -> (Self, Source, mpsc::UnboundedReceiver<TermNote>) {
        let watcher = deps.registry.watch(cancel.child_token());
        let published = deps.queue_names.clone();
        let term_deps = TermDeps::of(&deps);
        let feeds = Feeds::start(&term_deps, settings.trigger_interval, &cancel);
        let (notes_tx, notes_rx) = mpsc::unbounded_channel();
        let source = if settings.placement.is_sharded() {
            Source::Shards {
                owner: None,
                gate: None,
            }
        } else {
            Source::Election {
                campaign: None,
                campaign_after: Instant::now(),
            }
        };
        let role = Role {
            settings,
            deps,
            term_deps,
            watcher,
            catalog: Catalog::publishing(published),
            seen: Arc::new(AtomicI64::new(0)),
            feeds,
            cancel,
            terms: BTreeMap::new(),
            generation: 0,
            notes_tx,
            takeover_backoff: ReconnectBackoff::new(
                Duration::from_secs(1),
                Duration::from_secs(30),
            ),
            shard_backoff: HashMap::new(),
            delayed: Vec::new(),
            leaving: false,
        };
        (role, source, notes_rx)
    }

    /// When the loop next has something to start: the campaign after its pause, or the
    /// first delayed shard.
    fn waiting_until(&self, source: &Source) -> Option<Instant> {
        match source {
            Source::Election {
                campaign: None,
                campaign_after,
            } if Instant::now() < *campaign_after => Some(*campaign_after),
            _ => self.delayed.iter().map(|(at, _)| *at).min(),
        }
    }

    /// Acts on what the source of authority said.
    fn on_source_event(&mut self, source: &mut Source, event: SourceEvent) {
        match event {
            SourceEvent::Campaign(won) => self.on_campaign(source, won),
            SourceEvent::Shard(Some(event)) => self.on_shard_event(source, event),
            // The loop stopped (only with the role's cancellation): nothing more comes.
            SourceEvent::Shard(None) => {
                if let Source::Shards { owner, .. } = source {
                    *owner = None;
                }
            }
            SourceEvent::ClockChecked => self.own_shards(source),
        }
    }

    /// Shutdown: each term's stop token is a child of the role's, so every term writes what
    /// it holds and gives its key up; the ownership loop is stopped only then (its session
    /// holds the owner keys the terms' writes are fenced on).
    async fn shut_down(mut self, source: Source, mut notes_rx: mpsc::UnboundedReceiver<TermNote>) {
        let mut open: std::collections::BTreeSet<u64> =
            self.terms.values().map(|t| t.generation).collect();
        self.terms.clear();
        self.delayed.clear();
        while !open.is_empty() {
            match notes_rx.recv().await {
                Some(TermNote {
                    generation,
                    kind: NoteKind::Ended(_),
                    ..
                }) => {
                    open.remove(&generation);
                }
                Some(_) => {}
                None => break,
            }
        }
        if let Source::Shards {
            owner: Some(owner), ..
        } = source
        {
            owner.stop().await;
        }
        if self.settings.placement.is_sharded() {
            self.deps.metrics.set_shards_owned(0);
        } else {
            self.deps.metrics.set_leader(false);
        }
    }

    /// Starts the campaign or the ownership loop when it is time: once the catalog is
    /// synced (a term arms from it), and for the campaign, while no term runs and no pause
    /// after a failed takeover is pending.
    fn start_source(&mut self, source: &mut Source) {
        if !self.catalog.synced || self.cancel.is_cancelled() {
            return;
        }
        match source {
            Source::Election {
                campaign,
                campaign_after,
            } => {
                if campaign.is_none() && self.terms.is_empty() && Instant::now() >= *campaign_after
                {
                    *campaign = Some(start_campaign(&self.settings, &self.deps, &self.cancel));
                }
            }
            Source::Shards { owner, gate } => {
                if owner.is_none() && gate.is_none() {
                    let (tx, rx) = oneshot::channel();
                    let (check, cancel) = (
                        ClockAgreement::of(&self.settings, &self.deps),
                        self.cancel.clone(),
                    );
                    let queue = Arc::clone(&self.deps.queue);
                    // As before a campaign: a replica that cannot reach Redis would take
                    // shards and enqueue nothing for them.
                    self.deps.tracker.spawn(
                        async move {
                            if wait_for_redis(&*queue, &cancel).await
                                && check.wait_supervised(&cancel).await
                            {
                                let _ = tx.send(());
                            }
                        }
                        .instrument(info_span!("shard_gate")),
                    );
                    *gate = Some(rx);
                }
            }
        }
    }

    /// Joins the shard ownership, once the clock check passed.
    fn own_shards(&mut self, source: &mut Source) {
        let Source::Shards { owner, gate } = source else {
            return;
        };
        // Not a child of the role's token: at shutdown the loop must outlive the terms,
        // whose last state writes are fenced on the owner keys its session holds. The role
        // stops it once they are done (and dropping it stops it too).
        match self.deps.candidate.own_shards(
            self.settings.placement.shards,
            self.settings.placement.layout(),
            self.settings.shard_orphan_after,
            &CancellationToken::new(),
        ) {
            Ok(o) => {
                *owner = Some(o);
                *gate = None;
            }
            // Only a bad configuration fails here, which validation refused; the gate stays
            // passed, so this is not retried in a loop.
            Err(e) => warn!(error = %e, "cannot take part in shard ownership"),
        }
    }

    async fn on_registry_event(&mut self, event: ax_registry::RegistryEvent) {
        let Some((key, entry)) = apply_event(&mut self.catalog, &*self.deps.metrics, event) else {
            self.seen.store(self.catalog.revision, Ordering::Release);
            return;
        };
        let scope_key = if self.settings.placement.is_sharded() {
            Some(self.settings.placement.shard_of(&key))
        } else {
            None
        };
        if let Some(term) = self.terms.get(&scope_key) {
            let entry = entry.map(|e| e.placed(&self.settings.placement, &key));
            // A term that ended drops its receiver; its end is on its way.
            let _ = term.changes.send(Change { key, entry }).await;
        }
        // After the change is handed on: a term that sees this revision finds the change in
        // its channel (see `Term::take_trigger`).
        self.seen.store(self.catalog.revision, Ordering::Release);
    }

    fn on_campaign(
        &mut self,
        source: &mut Source,
        won: Result<Result<Box<Leadership>, Error>, ()>,
    ) {
        let Source::Election {
            campaign,
            campaign_after,
        } = source
        else {
            return;
        };
        *campaign = None;
        match won {
            Ok(Ok(leadership)) => {
                self.spawn_terms(vec![Authority::Leader(leadership)]);
            }
            Ok(Err(e)) => {
                if self.cancel.is_cancelled() {
                    return;
                }
                let wait = self.takeover_backoff.next_delay(&mut rand::rng());
                warn!(error = %format!("{e:#}"), retry_in = ?wait, "campaign ended with an error; retrying");
                *campaign_after = Instant::now() + wait;
            }
            // The campaign's task panicked (counted under `role`): campaign again after a
            // pause.
            Err(()) => {
                if !self.cancel.is_cancelled() {
                    *campaign_after = Instant::now() + crate::supervise::RESTART_PAUSE;
                }
            }
        }
    }

    fn on_shard_event(&mut self, source: &mut Source, first: ShardEvent) {
        let Source::Shards {
            owner: Some(owner), ..
        } = source
        else {
            return;
        };
        let mut steps = Vec::new();
        let mut next = Some(first);
        while let Some(event) = next {
            match event {
                // Leaving: dropping the guard releases the shard for another replica.
                ShardEvent::Acquired(guard) if self.leaving => {
                    info!(
                        shard = guard.shard(),
                        "releasing a shard acquired while leaving"
                    );
                }
                ShardEvent::Acquired(guard) => {
                    info!(
                        shard = guard.shard(),
                        fencing_token = guard.revision(),
                        "shard acquired"
                    );
                    steps.push(BatchStep::Acquired(Authority::Shard(guard)));
                }
                ShardEvent::HandOver(shard) => {
                    info!(shard, "handing the shard over");
                    if let Some(term) = self.terms.get(&Some(shard)) {
                        term.stop.cancel();
                    }
                    // A shard still waiting to start goes at once (dropping its guard
                    // releases it).
                    self.delayed.retain(|(_, a)| a.shard() != Some(shard));
                    steps.push(BatchStep::HandOver(shard));
                }
                ShardEvent::Map(map) => {
                    let loads = map.loads();
                    info!(?loads, "shard map changed");
                }
            }
            next = owner.try_next();
        }
        let mut acquired = Vec::new();
        for authority in to_start(steps, Authority::shard) {
            let pause = authority
                .shard()
                .and_then(|shard| self.shard_backoff.get(&shard))
                .map(|(_, at)| *at);
            match pause {
                Some(at) if at > Instant::now() => self.delayed.push((at, authority)),
                _ => acquired.push(authority),
            }
        }
        self.spawn_terms(acquired);
    }

    /// Starts the terms of the delayed shards whose pause is over.
    fn start_delayed(&mut self) {
        let now = Instant::now();
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.delayed)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.delayed = waiting;
        self.spawn_terms(due.into_iter().map(|(_, a)| a).collect());
    }

    fn on_term_note(&mut self, source: &mut Source, note: TermNote) {
        let current = self
            .terms
            .get(&note.shard)
            .is_some_and(|t| t.generation == note.generation);
        let end = match note.kind {
            NoteKind::Started => {
                if let Some(term) = self.terms.get_mut(&note.shard).filter(|_| current) {
                    term.started = true;
                }
                self.publish_owned();
                return;
            }
            NoteKind::Ended(end) => end,
        };
        let failed_to_start = matches!(end, TermEnd::NotStarted | TermEnd::Panicked);
        // (`failed_to_start` also after a term that panicked: it is taken again after the
        // same pause.)
        if !current {
            // An earlier term of a shard held again: its successor runs on.
            self.leave_when_idle(source);
            return;
        }
        self.terms.remove(&note.shard);
        self.publish_owned();
        if end == TermEnd::RedisUnreachable && matches!(source, Source::Shards { .. }) {
            self.leave_for_redis();
        }
        self.leave_when_idle(source);
        if let Some(shard) = note.shard {
            if failed_to_start {
                let (backoff, at) = self.shard_backoff.entry(shard).or_insert_with(|| {
                    (
                        ReconnectBackoff::new(Duration::from_secs(1), Duration::from_secs(30)),
                        Instant::now(),
                    )
                });
                let wait = backoff.next_delay(&mut rand::rng());
                *at = Instant::now() + wait;
                warn!(shard, retry_in = ?wait, "could not take the shard over; starting it again after a pause");
            } else {
                self.shard_backoff.remove(&shard);
            }
        }
        if let Source::Election { campaign_after, .. } = source {
            if failed_to_start {
                let wait = self.takeover_backoff.next_delay(&mut rand::rng());
                warn!(retry_in = ?wait, "could not take over; campaigning again after a pause");
                *campaign_after = Instant::now() + wait;
            } else {
                self.takeover_backoff.reset();
            }
        }
    }

    /// A shard's term gave its key up because Redis did not answer. The ownership loop would
    /// take the shard straight back and stall it again while replicas that reach Redis stand
    /// by, so this replica leaves the ownership: every term stops (writing what it holds,
    /// etcd answers), shards waiting to start are released, and the loop stops once the
    /// terms are done ([`Role::leave_when_idle`]); the gate joins again once Redis answers.
    fn leave_for_redis(&mut self) {
        if self.leaving {
            return;
        }
        warn!(
            terms = self.terms.len(),
            "Redis does not answer: leaving the shard ownership until it does, so that replicas reaching it take the shards"
        );
        self.leaving = true;
        for term in self.terms.values() {
            term.stop.cancel();
        }
        self.delayed.clear();
    }

    /// Stops the ownership loop of a replica leaving it once its last term has ended (their
    /// last writes are fenced on the owner keys the loop's session holds).
    fn leave_when_idle(&mut self, source: &mut Source) {
        if !self.leaving || !self.terms.is_empty() {
            return;
        }
        self.leaving = false;
        if let Source::Shards { owner, gate } = source {
            *gate = None;
            if let Some(owner) = owner.take() {
                self.deps.tracker.spawn(owner.stop());
            }
            info!("left the shard ownership; joining again once Redis answers");
        }
    }

    fn publish_owned(&self) {
        let metrics = &self.deps.metrics;
        let started = self.terms.values().filter(|t| t.started).count();
        if self.settings.placement.is_sharded() {
            metrics.set_shards_owned(started);
        } else {
            metrics.set_leader(started > 0);
        }
    }

    /// Starts a term for each authority, all armed from one pass over the catalog.
    fn spawn_terms(&mut self, authorities: Vec<Authority>) {
        if authorities.is_empty() {
            return;
        }
        let placement = self.settings.placement;
        let scopes: Vec<Scope> = authorities.iter().map(|a| a.scope(placement)).collect();
        let mut slices = self.catalog.slices(&placement, &scopes);
        for (authority, slice) in authorities.into_iter().zip(slices.drain(..)) {
            self.spawn_term(authority, slice);
        }
    }

    fn spawn_term(&mut self, authority: Authority, slice: CatalogSlice) {
        let shard = authority.shard();
        let generation = self.generation;
        self.generation += 1;
        let (changes_tx, changes_rx) = mpsc::channel(CHANGES_CAPACITY);
        let stop = self.cancel.child_token();
        let input = TermInput {
            slice,
            changes: changes_rx,
            seen: Arc::clone(&self.seen),
            feeds: self.feeds.clone(),
        };
        let settings = self.settings.clone();
        let deps = self.term_deps.clone();
        let notes_tx = self.notes_tx.clone();
        let term_stop = stop.clone();
        let span = match shard {
            Some(shard) => info_span!("shard", shard),
            None => info_span!("leader"),
        };
        self.deps.tracker.spawn(
            async move {
                let started = {
                    let notes_tx = notes_tx.clone();
                    move || {
                        let _ = notes_tx.send(TermNote {
                            shard,
                            generation,
                            kind: NoteKind::Started,
                        });
                    }
                };
                let end = term::serve(settings, deps, input, authority, term_stop, started).await;
                let _ = notes_tx.send(TermNote {
                    shard,
                    generation,
                    kind: NoteKind::Ended(end),
                });
            }
            .instrument(span),
        );
        self.terms.insert(
            shard,
            RunningTerm {
                changes: changes_tx,
                stop,
                started: false,
                generation,
            },
        );
    }
}

/// One ownership event of a batch, as far as starting terms goes.
enum BatchStep<A> {
    Acquired(A),
    HandOver(u32),
}

/// The shards of a batch to start once the batch is read (its terms are armed from one pass
/// over the catalog): those acquired and not asked back later in the same batch. A handover
/// is told once, and a shard acquired and asked back before its term exists has no term to
/// hear it: started, it would be held for good against the map. Dropping the withdrawn
/// guard releases the shard for its new owner.
fn to_start<A>(steps: Vec<BatchStep<A>>, shard_of: impl Fn(&A) -> Option<u32>) -> Vec<A> {
    let mut start: Vec<A> = Vec::new();
    for step in steps {
        match step {
            BatchStep::Acquired(a) => start.push(a),
            BatchStep::HandOver(shard) => start.retain(|a| shard_of(a) != Some(shard)),
        }
    }
    start
}

fn start_campaign(
    settings: &LeaderSettings,
    deps: &LeaderDeps,
    cancel: &CancellationToken,
) -> oneshot::Receiver<Result<Leadership, Error>> {
    let (tx, rx) = oneshot::channel();
    let candidate = deps.candidate.clone();
    let cancel = cancel.clone();
    let check = ClockAgreement::of(settings, deps);
    let queue = Arc::clone(&deps.queue);
    let campaign = async move {
        if !wait_for_redis(&*queue, &cancel).await || !check.wait_supervised(&cancel).await {
            return;
        }
        let result = candidate.campaign(&cancel).await.map_err(Error::from);
        let _ = tx.send(result);
    }
    .instrument(info_span!("campaign"));
    // A panic drops the answer's sender: the role campaigns again after a pause.
    let (metrics, tracker) = (Arc::clone(&deps.metrics), deps.tracker.clone());
    deps.tracker.spawn(async move {
        supervise::watch(ROLE, &*metrics, &tracker, campaign).await;
    });
    rx
}

#[cfg(test)]
mod etcd_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(a: &u32) -> Option<u32> {
        Some(*a)
    }

    #[test]
    fn a_shard_acquired_and_asked_back_in_one_batch_does_not_start() {
        // The first replica up takes every shard, and the join of the next one asks for
        // some back before the role has read the acquisitions.
        let steps = vec![
            BatchStep::Acquired(1),
            BatchStep::Acquired(2),
            BatchStep::Acquired(3),
            BatchStep::HandOver(1),
            BatchStep::HandOver(3),
        ];
        assert_eq!(to_start(steps, shard), vec![2]);
    }

    #[test]
    fn a_shard_asked_back_then_acquired_again_in_one_batch_starts() {
        let steps = vec![
            BatchStep::Acquired(1),
            BatchStep::HandOver(1),
            BatchStep::Acquired(1),
            BatchStep::HandOver(4),
        ];
        assert_eq!(to_start(steps, shard), vec![1]);
    }
}
