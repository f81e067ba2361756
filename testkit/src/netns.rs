//! Network namespaces and bridges a test makes, cuts and removes (iproute2; root only).
//!
//! A [`Net`] owns a few bridges on the host, each a subnet whose `.1` is the host's own
//! address on it (servers the test starts listen there too). Each namespace it adds has one
//! veth link per bridge, so a process run in it ([`Net::exec_in`]) reaches the host's
//! servers only through those links. [`Net::cut`] takes one link off its bridge: frames
//! vanish both ways, no reset, no error, and the process keeps running, as behind a real
//! partition (its kernel retransmits, its writes block once the send buffer is full, which a
//! relay in user space never shows). [`Net::heal`] puts it back.
//!
//! Everything is removed when the `Net` drops, also on a failing test's unwind. A test
//! process killed outright leaves its namespaces behind; the next `Net` removes those whose
//! process is gone (their names carry its pid, and each bridge's alias does).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The first octets of the bridges' subnets: bridge `i` is `10.{BASE + i}.{n}.0/24`.
const BASE: u32 = 233;

/// Bridges and namespaces of one test, removed on drop.
pub struct Net {
    /// Short and unique within the process: interface names hold at most 15 bytes.
    tag: String,
    /// The third octet of every subnet of this net.
    third: u32,
    bridges: usize,
    namespaces: Vec<String>,
}

impl Net {
    /// A net of `bridges` bridges (at most 8), removing first what killed test processes
    /// left.
    ///
    /// # Panics
    /// When `ip` is missing or cannot make a bridge (not root): the partition tests run as
    /// root, as CI does.
    pub fn new(bridges: usize) -> Net {
        assert!((1..=8).contains(&bridges), "1 to 8 bridges");
        remove_orphans();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let net = Net {
            tag: format!("axp{}{n}", pid % 10_000),
            third: (pid + n * 7) % 250 + 1,
            bridges,
            namespaces: Vec::new(),
        };
        for b in 0..bridges {
            let name = net.bridge(b);
            ip(&["link", "add", &name, "type", "bridge"]);
            ip(&["link", "set", "dev", &name, "alias", &format!("axp-{pid}")]);
            ip(&[
                "addr",
                "add",
                &format!("{}/24", net.addr(b, 1)),
                "dev",
                &name,
            ]);
            ip(&["link", "set", &name, "up"]);
        }
        net
    }

    /// The host's own address on bridge `b`: where its servers listen for the namespaces.
    pub fn host(&self, b: usize) -> String {
        self.addr(b, 1)
    }

    /// Adds namespace number `i` (0 to 99) with one link per bridge; returns its address on
    /// each bridge, in bridge order.
    pub fn add(&mut self, i: usize) -> Vec<String> {
        assert!(i < 100, "at most 100 namespaces");
        let ns = self.namespace(i);
        ip(&["netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let mut addrs = Vec::new();
        for b in 0..self.bridges {
            let link = self.link(i, b);
            let inside = format!("eth{b}");
            ip(&[
                "link", "add", &link, "type", "veth", "peer", "name", &inside, "netns", &ns,
            ]);
            ip(&["link", "set", &link, "master", &self.bridge(b), "up"]);
            let addr = self.addr(b, 10 + i);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                &inside,
            ]);
            ip(&["-n", &ns, "link", "set", &inside, "up"]);
            addrs.push(addr);
        }
        addrs
    }

    /// The command line that runs a program inside namespace `i`, the program's path and
    /// arguments to follow (`ip netns exec NS`, which execs it: the child's pid is the
    /// program's).
    pub fn exec_in(&self, i: usize) -> Vec<String> {
        vec![
            crate::binary("ip").display().to_string(),
            "netns".into(),
            "exec".into(),
            self.namespace(i),
        ]
    }

    /// Cuts namespace `i` from bridge `b`.
    pub fn cut(&self, i: usize, b: usize) {
        ip(&["link", "set", &self.link(i, b), "nomaster"]);
    }

    /// Joins namespace `i` to bridge `b` again.
    pub fn heal(&self, i: usize, b: usize) {
        ip(&["link", "set", &self.link(i, b), "master", &self.bridge(b)]);
    }

    fn bridge(&self, b: usize) -> String {
        format!("{}b{b}", self.tag)
    }

    fn link(&self, i: usize, b: usize) -> String {
        format!("{}n{i}b{b}", self.tag)
    }

    fn namespace(&self, i: usize) -> String {
        format!("axp-{}-{}-{i}", std::process::id(), self.tag)
    }

    fn addr(&self, b: usize, host: usize) -> String {
        format!("10.{}.{}.{host}", BASE as usize + b, self.third)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace deletes its links' both ends.
        for ns in &self.namespaces {
            let _ = quiet(&["netns", "del", ns]);
        }
        for b in 0..self.bridges {
            let _ = quiet(&["link", "del", &self.bridge(b)]);
        }
    }
}

/// Runs `ip ARGS`, failing the test if it fails.
fn ip(args: &[&str]) {
    let out = Command::new(crate::binary("ip"))
        .args(args)
        .output()
        .expect("run ip (iproute2: scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "ip {} failed: {} (network namespaces need root, as CI runs)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Runs `ip ARGS`; its output, if it ran and succeeded.
fn quiet(args: &[&str]) -> Option<String> {
    let out = Command::new(crate::binary("ip")).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Removes the namespaces and bridges of test processes that are gone.
fn remove_orphans() {
    let gone = |pid: &str| {
        pid.parse::<u32>()
            .is_ok_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
    };
    for line in quiet(&["netns", "list"]).unwrap_or_default().lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if let Some(pid) = name.strip_prefix("axp-").and_then(|r| r.split('-').next()) {
            if gone(pid) {
                let _ = quiet(&["netns", "del", name]);
            }
        }
    }
    // `ip -o link show type bridge`: "N: NAME: <...> ... alias axp-PID" per bridge.
    for line in quiet(&["-o", "link", "show", "type", "bridge"])
        .unwrap_or_default()
        .lines()
    {
        let Some(pid) = line.split("alias axp-").nth(1).map(str::trim) else {
            continue;
        };
        let name = line.split(": ").nth(1).unwrap_or_default();
        if gone(pid) && !name.is_empty() {
            let _ = quiet(&["link", "del", name]);
        }
    }
}
