//! Test support shared by the crates' integration tests.
//!
//! `scripts/test.sh` starts one etcd and one Redis for the whole run and exports their
//! addresses as `AX_TEST_ETCD` and `AX_TEST_REDIS`; [`etcd_endpoint`] and [`redis_url`] read
//! them. A test that needs a server and finds no address panics: it never passes silently,
//! under CI or anywhere else.
//!
//! Tests that must stop or restart a server (connection loss, compaction, failover) start a
//! private one with [`EtcdServer::start`] or [`RedisServer::start`], from the `etcd` and
//! `redis-server` binaries that `scripts/setup.sh` installs. Each owns its temp data folder
//! and is killed when dropped. Tests of TLS start theirs with [`EtcdServer::start_with_tls`]
//! or [`RedisServer::start_with_tls`] and certificates from a [`TlsMaterial`]; the server
//! keeps copies of its files, so it restarts with them whatever the test dropped.
//!
//! Tests of partitions put a [`link::Link`] between a process and a server and cut it, or
//! run the process in a network namespace of a [`netns::Net`] and cut its veth link, with
//! the servers also listening on the host's address on the net's bridges
//! ([`EtcdServer::start_on`], [`RedisServer::start_on`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub mod link;
pub mod netns;
mod tls;

pub use tls::TlsMaterial;

/// The etcd endpoint of the shared test server (`http://127.0.0.1:PORT`).
///
/// # Panics
/// When `AX_TEST_ETCD` is not set: run the tests through `scripts/test.sh`.
pub fn etcd_endpoint() -> String {
    required_env("AX_TEST_ETCD", "etcd")
}

/// The Redis URL of the shared test server (`redis://127.0.0.1:PORT`).
///
/// # Panics
/// When `AX_TEST_REDIS` is not set: run the tests through `scripts/test.sh`.
pub fn redis_url() -> String {
    required_env("AX_TEST_REDIS", "Redis")
}

/// The node URLs of the shared test Redis Cluster (`AX_TEST_REDIS_CLUSTER`, comma-separated
/// `redis://` URLs), when the tests run against one: the cluster suite (`scripts/cluster.sh`)
/// sets it and runs the queue's tests again, connected to the cluster. `None` when unset:
/// the tests then use the single server of [`redis_url`] (and fail without it).
pub fn redis_cluster_nodes() -> Option<Vec<String>> {
    let nodes: Vec<String> = std::env::var("AX_TEST_REDIS_CLUSTER")
        .ok()?
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    (!nodes.is_empty()).then_some(nodes)
}

fn required_env(var: &str, what: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "{var} is not set: this test needs a real {what} server. Run the tests with \
             scripts/test.sh, which starts one, or export {var} yourself."
        ),
    }
}

/// A name unique to this process and call, for keeping tests apart on the shared servers
/// (etcd prefixes, Redis key prefixes, queue names).
pub fn unique_name(label: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{label}-{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A free TCP port on 127.0.0.1 (bound, then released for the caller to use).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port on loopback");
    listener
        .local_addr()
        .expect("local address of a bound listener")
        .port()
}

fn wait_until(deadline: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not become ready within {deadline:?}");
}

fn http_get_contains(port: u16, path: &str, needle: &str) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body.contains(needle)
}

fn accepts(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

fn redis_ping(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(stream.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

fn binary(name: &str) -> PathBuf {
    for dir in std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
    {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("`{name}` is not installed: run scripts/setup.sh");
}

/// A private etcd server on free loopback ports, for tests that stop or restart it.
pub struct EtcdServer {
    client_port: u16,
    peer_port: u16,
    /// Serves `/health` over plain HTTP when the client port has TLS (and so would want a
    /// client certificate from the readiness check).
    metrics_port: Option<u16>,
    data: tempfile::TempDir,
    child: Option<Child>,
    extra_args: Vec<String>,
    /// An address it listens on besides loopback, and advertises.
    host: Option<String>,
}

impl EtcdServer {
    /// Starts a single-member etcd with its data in a new temp folder and waits until it is
    /// healthy.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Like [`EtcdServer::start`], with more command-line flags (e.g. auto-compaction).
    pub fn start_with(extra_args: &[&str]) -> Self {
        Self::start_plain(extra_args, None)
    }

    /// Like [`EtcdServer::start`], listening on `host` too (a bridge address of a
    /// [`netns::Net`]), which its endpoint and advertised URL then name.
    pub fn start_on(host: &str) -> Self {
        Self::start_plain(&[], Some(host.to_owned()))
    }

    fn start_plain(extra_args: &[&str], host: Option<String>) -> Self {
        let data = tempfile::tempdir().expect("temp folder for etcd data");
        let mut server = EtcdServer {
            client_port: free_port(),
            peer_port: free_port(),
            metrics_port: None,
            data,
            child: None,
            extra_args: extra_args.iter().map(|a| (*a).to_owned()).collect(),
            host,
        };
        server.restart();
        server
    }

    /// Like [`EtcdServer::start`] with TLS on the client port: the server certificate of
    /// `tls`, and (`--client-cert-auth`) only clients with a certificate signed by its CA.
    pub fn start_with_tls(tls: &TlsMaterial) -> Self {
        let data = tempfile::tempdir().expect("temp folder for etcd data");
        tls.copy_server_files(data.path());
        let file = |name: &str| data.path().join(name).display().to_string();
        let extra_args = vec![
            "--cert-file".to_owned(),
            file("server.crt"),
            "--key-file".to_owned(),
            file("server.key"),
            "--trusted-ca-file".to_owned(),
            file("ca.crt"),
            "--client-cert-auth".to_owned(),
        ];
        let mut server = EtcdServer {
            client_port: free_port(),
            peer_port: free_port(),
            metrics_port: Some(free_port()),
            data,
            child: None,
            extra_args,
            host: None,
        };
        server.restart();
        server
    }

    /// The client endpoint, `http://127.0.0.1:PORT` (`https://` with TLS; the host of
    /// [`EtcdServer::start_on`] in place of loopback).
    pub fn endpoint(&self) -> String {
        let scheme = if self.metrics_port.is_some() {
            "https"
        } else {
            "http"
        };
        let host = self.host.as_deref().unwrap_or("127.0.0.1");
        format!("{scheme}://{host}:{}", self.client_port)
    }

    /// The data folder (kept across restarts).
    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (SIGKILL); its data stays for [`EtcdServer::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same ports and data (killing it first if it runs).
    pub fn restart(&mut self) {
        self.kill();
        let client = self.endpoint();
        let listen = match &self.host {
            Some(_) => format!("{client},http://127.0.0.1:{}", self.client_port),
            None => client.clone(),
        };
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let metrics: Vec<String> = self
            .metrics_port
            .map(|p| {
                vec![
                    "--listen-metrics-urls".to_owned(),
                    format!("http://127.0.0.1:{p}"),
                ]
            })
            .unwrap_or_default();
        let log = std::fs::File::create(self.data.path().join("etcd.log"))
            .expect("create the etcd log file");
        let child = Command::new(binary("etcd"))
            .arg("--name")
            .arg("ax-test")
            .arg("--data-dir")
            .arg(self.data.path().join("data"))
            .arg("--listen-client-urls")
            .arg(&listen)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("ax-test={peer}"))
            .args(&metrics)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd");
        self.child = Some(child);
        let port = self.metrics_port.unwrap_or(self.client_port);
        wait_until(Duration::from_secs(20), "private etcd", || {
            http_get_contains(port, "/health", "\"health\":\"true\"")
        });
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends `signal` (`STOP`, `CONT`, ...) to process `pid`, as `kill -SIGNAL` does.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// Whether a Redis server with TLS asks clients for a certificate (`--tls-auth-clients`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// A client must present a certificate signed by the CA.
    Required,
    /// A client may present one; without, it is let in.
    Optional,
}

/// A private Redis server on a free loopback port, for tests that stop or restart it;
/// without persistence unless started with [`RedisServer::start_with_aof`].
pub struct RedisServer {
    port: u16,
    data: tempfile::TempDir,
    child: Option<Child>,
    aof: bool,
    tls: Option<ClientAuth>,
    /// An address it listens on besides loopback.
    host: Option<String>,
}

impl RedisServer {
    /// Starts Redis without persistence and waits until it answers PING.
    pub fn start() -> Self {
        Self::start_as(false)
    }

    /// Starts Redis with the append-only file on (`appendfsync always`), so a SIGKILL loses
    /// nothing it acknowledged.
    pub fn start_with_aof() -> Self {
        Self::start_as(true)
    }

    /// Starts Redis with TLS only (no plain port): the server certificate of `tls`, clients
    /// checked against its CA as `auth` says.
    pub fn start_with_tls(tls: &TlsMaterial, auth: ClientAuth) -> Self {
        let data = tempfile::tempdir().expect("temp folder for Redis");
        tls.copy_server_files(data.path());
        let mut server = RedisServer {
            port: free_port(),
            data,
            child: None,
            aof: false,
            tls: Some(auth),
            host: None,
        };
        server.restart();
        server
    }

    /// Like [`RedisServer::start`], listening on `host` too (a bridge address of a
    /// [`netns::Net`]), which its URL then names.
    pub fn start_on(host: &str) -> Self {
        Self::start_at(false, Some(host.to_owned()))
    }

    fn start_as(aof: bool) -> Self {
        Self::start_at(aof, None)
    }

    fn start_at(aof: bool, host: Option<String>) -> Self {
        let data = tempfile::tempdir().expect("temp folder for Redis");
        let mut server = RedisServer {
            port: free_port(),
            data,
            child: None,
            aof,
            tls: None,
            host,
        };
        server.restart();
        server
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The URL, `redis://127.0.0.1:PORT` (`rediss://` with TLS; the host of
    /// [`RedisServer::start_on`] in place of loopback).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let host = self.host.as_deref().unwrap_or("127.0.0.1");
        format!("{scheme}://{host}:{}", self.port)
    }

    /// Kills the server (SIGKILL). Without persistence its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (killing it first if it runs).
    pub fn restart(&mut self) {
        self.kill();
        let dir = self.data.path();
        let ports: Vec<String> = match self.tls {
            None => vec!["--port".into(), self.port.to_string()],
            Some(auth) => vec![
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                self.port.to_string(),
                "--tls-cert-file".into(),
                dir.join("server.crt").display().to_string(),
                "--tls-key-file".into(),
                dir.join("server.key").display().to_string(),
                "--tls-ca-cert-file".into(),
                dir.join("ca.crt").display().to_string(),
                "--tls-auth-clients".into(),
                match auth {
                    ClientAuth::Required => "yes",
                    ClientAuth::Optional => "optional",
                }
                .into(),
            ],
        };
        let child = Command::new(binary("redis-server"))
            .args(&ports)
            .arg("--bind")
            .arg("127.0.0.1")
            .args(self.host.iter())
            // Clients from a namespace are not on loopback; the server is the test's own.
            .args(if self.host.is_some() {
                &["--protected-mode", "no"][..]
            } else {
                &[]
            })
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg(if self.aof { "yes" } else { "no" })
            .arg("--appendfsync")
            .arg("always")
            .arg("--dir")
            .arg(self.data.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let port = self.port;
        // A plain PING cannot cross TLS; Redis binds its port only once it serves, and with no
        // data to load an accepted connection is a ready server.
        let tls = self.tls.is_some();
        wait_until(Duration::from_secs(10), "private Redis", || {
            if tls {
                accepts(port)
            } else {
                redis_ping(port)
            }
        });
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A valid task spec for tests: `ns/{id}` on `queue`, handler `handler`, every 60 s, payload
/// `{"n": id}`, defaults otherwise (an `http` handler gets a loopback target to replace).
/// Built through `TaskSpec::from_json` (the path a real spec takes), so the fixture cannot
/// drift from the spec's defaults; adjust fields after.
pub fn spec(id: &str, queue: &str, handler: &str) -> ax_scheduler_core::TaskSpec {
    let mut json = serde_json::json!({
        "handler": handler,
        "schedule": {"every": "60s"},
        "queue": queue,
        "payload": {"n": id},
        "overlap": "allow",
        "timeout": "3s",
    });
    if handler == "http" {
        json["http"] = serde_json::json!({"url": "http://127.0.0.1:9/"});
    }
    ax_scheduler_core::TaskSpec::from_json(json.to_string().as_bytes(), "ns", id)
        .unwrap_or_else(|e| panic!("the test spec fixture does not validate: {e}"))
}

/// The libfaketime library, for tests that step a process's wall clock (`LD_PRELOAD`).
pub fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib").ok().and_then(|dirs| {
        dirs.filter_map(Result::ok)
            .map(|d| d.path().join("faketime/libfaketime.so.1"))
            .find(|p| p.exists())
    });
    found.unwrap_or_else(|| panic!("libfaketime is not installed: run scripts/setup.sh"))
}
