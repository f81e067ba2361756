//! Candidates in separate processes: a leader SIGKILLed, and a leader SIGSTOPped past its
//! TTL that must see its loss before acting when resumed.
//!
//! This test binary has its own `main` (no libtest harness). Run plainly it is the parent;
//! with `AX_ELECTION_CHILD_ENDPOINT` set it is a child candidate that prints what it sees:
//! `LEADER <token>`, then `ACT <unix ms>` every 20 ms while `is_valid()` holds, then
//! `LOST <unix ms> token_fired=<bool>` and exits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ax_election::{Candidate, ElectionConfig};
use tokio_util::sync::CancellationToken;

const CHILD_ENDPOINT: &str = "AX_ELECTION_CHILD_ENDPOINT";
const CHILD_PREFIX: &str = "AX_ELECTION_CHILD_PREFIX";
const TTL: Duration = Duration::from_secs(2);

fn wall_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

fn config(prefix: &str) -> ElectionConfig {
    ElectionConfig {
        prefix: prefix.to_string(),
        ttl: TTL,
        request_timeout: Duration::from_secs(1),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Ok(endpoint) = std::env::var(CHILD_ENDPOINT) {
        let prefix = std::env::var(CHILD_PREFIX).unwrap();
        rt.block_on(child(endpoint, prefix));
        return;
    }
    let endpoint = ax_testkit::etcd_endpoint();
    rt.block_on(sigkill_successor_within_ttl_plus_one_second(&endpoint));
    println!("test sigkill_successor_within_ttl_plus_one_second ... ok");
    rt.block_on(sigstop_past_ttl_sees_loss_before_acting(&endpoint));
    println!("test sigstop_past_ttl_sees_loss_before_acting ... ok");
}

async fn child(endpoint: String, prefix: String) {
    let client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    let candidate =
        Candidate::new(client, config(&prefix), "child", serde_json::json!({})).unwrap();
    let leader = candidate.campaign(&CancellationToken::new()).await.unwrap();
    println!("LEADER {}", leader.fencing_token());
    let lost = leader.lost();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The check a leader makes right before acting.
        if leader.is_valid() {
            println!("ACT {}", wall_ms());
        } else {
            println!("LOST {} token_fired={}", wall_ms(), lost.is_cancelled());
            return;
        }
    }
}

struct ChildProc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl ChildProc {
    fn spawn(endpoint: &str, prefix: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD_ENDPOINT, endpoint)
            .env(CHILD_PREFIX, prefix)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        ChildProc { child, lines }
    }

    /// Waits for a line starting with `prefix`, returning it and the lines before it.
    fn wait_for(&self, prefix: &str, within: Duration) -> (String, Vec<String>) {
        let deadline = Instant::now() + within;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return (line, before),
                Ok(line) => before.push(line),
                Err(e) => panic!("child printed no {prefix} line within {within:?}: {e}"),
            }
        }
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} failed");
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn sigkill_successor_within_ttl_plus_one_second(endpoint: &str) {
    let prefix = format!("/{}", ax_testkit::unique_name("proc-kill"));
    let child = ChildProc::spawn(endpoint, &prefix);
    let (line, _) = child.wait_for("LEADER", Duration::from_secs(10));
    let child_token: i64 = line["LEADER ".len()..].parse().unwrap();

    let client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    let me = Candidate::new(client, config(&prefix), "parent", serde_json::json!({})).unwrap();
    let cancel = CancellationToken::new();
    let campaign = tokio::spawn(async move { me.campaign(&cancel).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!campaign.is_finished(), "parent won while the child led");

    let killed = Instant::now();
    child.signal("KILL");
    let leader = tokio::time::timeout(TTL + Duration::from_secs(2), campaign)
        .await
        .expect("successor elected")
        .unwrap()
        .unwrap();
    let took = killed.elapsed();
    assert!(
        took <= TTL + Duration::from_secs(1),
        "successor after {took:?}"
    );
    assert!(leader.fencing_token() > child_token);
    leader.resign().await.unwrap();
}

async fn sigstop_past_ttl_sees_loss_before_acting(endpoint: &str) {
    let prefix = format!("/{}", ax_testkit::unique_name("proc-stop"));
    let child = ChildProc::spawn(endpoint, &prefix);
    let (line, _) = child.wait_for("LEADER", Duration::from_secs(10));
    let child_token: i64 = line["LEADER ".len()..].parse().unwrap();
    child.wait_for("ACT", Duration::from_secs(2));

    let client = etcd_client::Client::connect([endpoint], None)
        .await
        .unwrap();
    let me = Candidate::new(client, config(&prefix), "parent", serde_json::json!({})).unwrap();
    let cancel = CancellationToken::new();
    let campaign = tokio::spawn(async move { me.campaign(&cancel).await });

    child.signal("STOP");
    let stopped_wall = wall_ms();
    let stopped = Instant::now();
    let leader = tokio::time::timeout(TTL + Duration::from_secs(2), campaign)
        .await
        .expect("successor elected while the child is paused")
        .unwrap()
        .unwrap();
    assert!(stopped.elapsed() <= TTL + Duration::from_secs(1));
    assert!(leader.fencing_token() > child_token);
    // Stay paused well past the TTL, then resume the old leader while the new one acts.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(leader.is_valid());
    child.signal("CONT");
    let (lost, before) = child.wait_for("LOST", Duration::from_secs(3));
    // Every ACT it printed predates the pause: after waking it acted not once.
    for act in before.iter().filter(|l| l.starts_with("ACT ")) {
        let at: u128 = act["ACT ".len()..].parse().unwrap();
        assert!(
            at <= stopped_wall + 20,
            "the paused leader acted after resuming: {act} (paused at {stopped_wall})"
        );
    }
    println!("child on resume: {lost}");
    assert!(leader.is_valid(), "the new leader is unaffected");
    leader.resign().await.unwrap();
}
