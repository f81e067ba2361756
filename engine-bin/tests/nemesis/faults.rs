//! The nemesis's faults and the replicas' rigs.
//!
//! Every replica is started behind a [`Rig`]: its own links to etcd and to Redis
//! ([`Link`], cut silently or slowed) and its own wall clock (libfaketime reading a file the
//! test writes), so any fault can land on any replica. Replicas talk to each other only
//! through etcd and Redis, so a partition between two replicas is what their links show.
//!
//! A schedule of faults is drawn from a seeded generator: the kind, how long it lasts, the
//! pause after it, whether it aims at the leader and whether a second fault on another
//! replica overlaps it. The draws do not depend on timing, so a seed replays the same
//! schedule; which replica leads when a fault lands does, and the log says.

use std::fmt;
use std::time::Duration;

use ax_testkit::link::Link;
use rand::rngs::StdRng;
use rand::Rng;

use super::harness::{now_ms, Cluster, Roles};

/// One replica's links and clock.
pub(crate) struct Rig {
    pub(crate) id: &'static str,
    etcd: Link,
    redis: Link,
    clock: tempfile::NamedTempFile,
}

impl Rig {
    /// Links to `c`'s etcd and Redis and a clock at the right time, for replica `id`.
    pub(crate) async fn new(c: &Cluster, id: &'static str) -> Rig {
        let clock = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(clock.path(), "+0\n").unwrap();
        Rig {
            id,
            etcd: Link::to(c.etcd_endpoint.trim_start_matches("http://")).await,
            redis: Link::to(c.redis_url.trim_start_matches("redis://")).await,
            clock,
        }
    }

    /// Starts the replica (both roles, the chart's default) behind this rig.
    pub(crate) async fn start(&self, c: &mut Cluster) {
        c.env = vec![
            (
                "AX_ETCD_ENDPOINTS",
                format!("http://127.0.0.1:{}", self.etcd.port),
            ),
            (
                "AX_REDIS_URL",
                format!("redis://127.0.0.1:{}", self.redis.port),
            ),
            (
                "LD_PRELOAD",
                ax_testkit::libfaketime().display().to_string(),
            ),
            (
                "FAKETIME_TIMESTAMP_FILE",
                self.clock.path().display().to_string(),
            ),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            ("DONT_FAKE_MONOTONIC", "1".to_owned()),
            (
                "AX_LOG",
                std::env::var("NEMESIS_LOG").unwrap_or_else(|_| "warn".into()),
            ),
        ];
        c.start_replica(self.id, Roles::Both).await;
        c.env.clear();
    }

    fn step_clock(&self, seconds: i64) {
        std::fs::write(self.clock.path(), format!("{seconds:+}\n")).unwrap();
    }
}

/// What a fault does to its replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Its link to etcd drops everything, both ways.
    CutEtcd,
    /// Its link to Redis drops everything.
    CutRedis,
    /// Both links drop everything.
    CutAll,
    /// Its link to etcd delays each chunk by this many ms.
    SlowEtcd(u64),
    /// Its link to Redis delays each chunk by this many ms.
    SlowRedis(u64),
    /// SIGSTOP, then SIGCONT at the heal.
    Pause,
    /// SIGKILL, then a restart at the heal.
    Kill,
    /// Its wall clock steps by this many seconds (its monotonic clock not), back at the heal.
    ClockStep(i64),
}

impl Kind {
    /// The kind's name in the summary, without its amount.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::CutEtcd => "cut from etcd",
            Kind::CutRedis => "cut from Redis",
            Kind::CutAll => "cut from both",
            Kind::SlowEtcd(_) => "slow etcd link",
            Kind::SlowRedis(_) => "slow Redis link",
            Kind::Pause => "SIGSTOP",
            Kind::Kill => "SIGKILL and restart",
            Kind::ClockStep(_) => "clock step",
        }
    }

    /// Whether the replica's worker may lose what it held: it stops, dies or cannot settle.
    pub(crate) fn hits_worker(self) -> bool {
        matches!(
            self,
            Kind::CutRedis | Kind::CutAll | Kind::Pause | Kind::Kill
        )
    }
}

/// One fault of the schedule.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) kind: Kind,
    /// The replica's index in the rigs.
    pub(crate) replica: usize,
    /// Wall time it was applied and healed (ms since the epoch).
    pub(crate) at: i64,
    pub(crate) healed_at: i64,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let amount = match self.kind {
            Kind::SlowEtcd(ms) | Kind::SlowRedis(ms) => format!(" {ms} ms"),
            Kind::ClockStep(s) => format!(" {s:+} s"),
            _ => String::new(),
        };
        write!(
            f,
            "r{} {}{amount} for {} ms",
            self.replica + 1,
            self.kind.name(),
            self.healed_at - self.at
        )
    }
}

/// One round of the schedule, as drawn: one or two faults, how long they last, the pause.
struct Round {
    kinds: Vec<(Kind, bool, usize)>,
    lasts: Duration,
    pause: Duration,
}

fn draw_kind(rng: &mut StdRng) -> Kind {
    match rng.random_range(0..8) {
        0 => Kind::CutEtcd,
        1 => Kind::CutRedis,
        2 => Kind::CutAll,
        3 => Kind::SlowEtcd(rng.random_range(20..=300)),
        4 => Kind::SlowRedis(rng.random_range(20..=300)),
        5 => Kind::Pause,
        6 => Kind::Kill,
        _ => {
            let s = rng.random_range(1..=10);
            Kind::ClockStep(if rng.random_bool(0.5) { s } else { -s })
        }
    }
}

/// A round: each fault with whether it aims at the leader and a replica index to fall back
/// on (or to aim at), all drawn whatever the cluster does.
fn draw_round(rng: &mut StdRng, replicas: usize) -> Round {
    let n = if rng.random_bool(0.25) { 2 } else { 1 };
    let kinds = (0..n)
        .map(|_| {
            (
                draw_kind(rng),
                rng.random_bool(0.6),
                rng.random_range(0..replicas),
            )
        })
        .collect();
    Round {
        kinds,
        lasts: Duration::from_millis(rng.random_range(2_000..=10_000)),
        pause: Duration::from_millis(rng.random_range(1_000..=4_000)),
    }
}

async fn apply(c: &mut Cluster, rig: &Rig, kind: Kind) {
    match kind {
        Kind::CutEtcd => rig.etcd.cut(),
        Kind::CutRedis => rig.redis.cut(),
        Kind::CutAll => {
            rig.etcd.cut();
            rig.redis.cut();
        }
        Kind::SlowEtcd(ms) => rig.etcd.slow(Duration::from_millis(ms)),
        Kind::SlowRedis(ms) => rig.redis.slow(Duration::from_millis(ms)),
        Kind::Pause => ax_testkit::signal(c.replica(rig.id).pid().unwrap(), "STOP"),
        Kind::Kill => c.replica(rig.id).kill(),
        Kind::ClockStep(s) => rig.step_clock(s),
    }
}

async fn heal(c: &mut Cluster, rig: &Rig, kind: Kind) {
    match kind {
        Kind::CutEtcd | Kind::CutRedis | Kind::CutAll => {
            rig.etcd.heal();
            rig.redis.heal();
        }
        Kind::SlowEtcd(_) | Kind::SlowRedis(_) => {
            rig.etcd.slow(Duration::ZERO);
            rig.redis.slow(Duration::ZERO);
        }
        Kind::Pause => ax_testkit::signal(c.replica(rig.id).pid().unwrap(), "CONT"),
        Kind::Kill => rig.start(c).await,
        Kind::ClockStep(_) => rig.step_clock(0),
    }
}

/// What a run of the schedule did.
pub(crate) struct Run {
    pub(crate) faults: Vec<Fault>,
    /// Each change of leader seen (the new leader's id), polled between steps.
    pub(crate) leaders: Vec<String>,
}

/// Draws and applies rounds of faults on `rigs`' replicas for `lasting`, healing each
/// round before the next; everything is healed when it returns.
pub(crate) async fn run(c: &mut Cluster, rigs: &[Rig], rng: &mut StdRng, lasting: Duration) -> Run {
    let end = tokio::time::Instant::now() + lasting;
    let mut run = Run {
        faults: Vec::new(),
        leaders: Vec::new(),
    };
    while tokio::time::Instant::now() < end {
        let round = draw_round(rng, rigs.len());
        let leader = note_leader(c, rigs, &mut run.leaders).await;
        let mut taken: Vec<usize> = Vec::new();
        let mut applied = Vec::new();
        for (kind, at_leader, fallback) in round.kinds {
            let aimed = if at_leader { leader } else { None };
            let Some(replica) = aimed
                .into_iter()
                .chain((0..rigs.len()).map(|i| (fallback + i) % rigs.len()))
                .find(|r| !taken.contains(r))
            else {
                continue;
            };
            taken.push(replica);
            apply(c, &rigs[replica], kind).await;
            applied.push(Fault {
                kind,
                replica,
                at: now_ms(),
                healed_at: 0,
            });
        }
        watch_leaders(c, rigs, &mut run.leaders, round.lasts).await;
        for mut fault in applied {
            heal(c, &rigs[fault.replica], fault.kind).await;
            fault.healed_at = now_ms();
            println!("nemesis: fault {fault}");
            run.faults.push(fault);
        }
        watch_leaders(c, rigs, &mut run.leaders, round.pause).await;
    }
    run
}

/// The leader's index among `rigs`, noting a change.
async fn note_leader(c: &Cluster, rigs: &[Rig], seen: &mut Vec<String>) -> Option<usize> {
    let leader = c.leader().await?;
    if seen.last() != Some(&leader) {
        seen.push(leader.clone());
    }
    rigs.iter().position(|r| r.id == leader)
}

async fn watch_leaders(c: &Cluster, rigs: &[Rig], seen: &mut Vec<String>, lasting: Duration) {
    let end = tokio::time::Instant::now() + lasting;
    while tokio::time::Instant::now() < end {
        note_leader(c, rigs, seen).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
