//! The `ax` binary as a script sees it: output, stderr and exit codes; and `ax serve`
//! answering probes and stopping on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `ax` with a clean environment (plus `HOSTNAME`), so the machine's variables do not leak in.
fn ax(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.args(args).env_clear().env("HOSTNAME", "test-host");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn config_print_shows_the_effective_config_with_secrets_masked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ax.toml");
    std::fs::write(
        &file,
        "[etcd]\nprefix = \"/from-file\"\npassword = \"etcd-secret\"\nusername = \"ax\"\n",
    )
    .unwrap();
    let out = ax(
        &[
            "config",
            "print",
            "--config",
            file.to_str().unwrap(),
            "--worker-concurrency",
            "9",
        ],
        &[
            ("AX_REDIS_URL", "rediss://:url-secret@redis:6380/0"),
            ("AX_API_TOKEN", "token-secret-0123456789abcdef01234567"),
            (
                "AX_FEISHU_WEBHOOK",
                "https://open.feishu.cn/open-apis/bot/v2/hook/hook-secret",
            ),
            ("AX_TICK", "5ms"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    for secret in ["etcd-secret", "url-secret", "token-secret", "hook-secret"] {
        assert!(!shown.contains(secret), "{secret} in\n{shown}");
    }
    for line in [
        "prefix = \"/from-file\"",
        "url = \"rediss://:***@redis:6380/0\"",
        "api_token = \"***\"",
        "feishu_webhook = \"***\"",
        "tick = \"5ms\"",
        "concurrency = 9",
        "id = \"test-host\"",
    ] {
        assert!(shown.contains(line), "{line} missing in\n{shown}");
    }
    // What is printed is a valid config file.
    let reparsed = ax::config::Config::from_toml_str(&shown).unwrap();
    assert_eq!(reparsed.worker.concurrency, 9);
}

#[test]
fn config_errors_exit_2_with_the_key_on_stderr() {
    let out = ax(&["config", "print"], &[("AX_REDIS_URL", "http://nope")]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("ax: error:") && err.contains("redis.url"),
        "{err}"
    );

    let out = ax(&["config", "print"], &[("AX_LEASE_TTL", "soon")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("AX_LEASE_TTL"),
        "{}",
        text(&out.stderr)
    );

    let out = ax(&["serve", "--roles", "leader"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_unreachable_etcd_exits_1_naming_the_endpoint() {
    let port = ax_testkit::free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    for args in [
        &["status"][..],
        &["task", "list"],
        &["task", "history", "t1", "-n", "ops"],
        &["dlq", "requeue", "--all"],
    ] {
        let mut full = args.to_vec();
        full.extend(["--etcd-endpoints", &endpoint]);
        let out = ax(&full, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.starts_with("ax: error: ") && err.contains(&endpoint),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
}

/// `ax` with `stdin` piped in.
fn ax_stdin(args: &[&str], stdin: &str) -> Output {
    ax_stdin_env(args, stdin, &[])
}

/// `ax` with `stdin` piped in and `env` set.
fn ax_stdin_env(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .env_clear()
        .env("HOSTNAME", "test-host")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn task_put_dry_run_previews_the_next_five_fires() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/tasks/cron-report.json"
    );
    let out = ax(&["task", "put", example, "--dry-run"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with("task default/cron-report is valid"),
        "{shown}"
    );
    // 02:30 in Shanghai is 18:30 UTC the day before.
    let fires: Vec<_> = shown.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(fires.len(), 5, "{shown}");
    assert!(
        fires
            .iter()
            .all(|l| l.contains("T18:30:00.000Z  ") && l.ends_with(" 02:30:00 CST (+08:00)")),
        "each fire in UTC and in the task's zone: {shown}"
    );

    let out = ax_stdin(
        &["task", "put", "-", "--dry-run", "--id", "beat", "-n", "ops"],
        r#"{"handler": "log", "schedule": {"every": "10s"}}"#,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("task ops/beat is valid"));
}

#[test]
fn task_put_refuses_args_the_command_does_not_take() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ax.toml");
    std::fs::write(
        &config,
        "[worker.commands.sync]\npath = \"/usr/bin/rsync\"\n\
         [worker.commands.report]\npath = \"/usr/local/bin/report\"\n\
         task_args = \"patterns\"\narg_patterns = [\"[a-z]+\"]\n",
    )
    .unwrap();
    let env = [("AX_CONFIG", config.to_str().unwrap())];
    let task = |name: &str, args: &str| {
        format!(
            r#"{{"handler": "command", "schedule": {{"every": "1m"}},
                "command": {{"name": "{name}", "args": {args}}}}}"#
        )
    };
    let put = ["task", "put", "-", "--dry-run", "--id", "t"];
    let out = ax_stdin_env(&put, &task("sync", r#"["-e", "sh -c id"]"#), &env);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "command.args: command `sync` takes no arguments from a task \
                      (worker.commands.sync.task_args is \"none\")"
        ),
        "{err}"
    );
    let out = ax_stdin_env(&put, &task("report", r#"["--exec"]"#), &env);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("does not match the pattern `[a-z]+`"));
    let out = ax_stdin_env(&put, &task("report", r#"["daily"]"#), &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = ax_stdin_env(&put, &task("sync", "[]"), &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn task_put_reports_every_problem_and_exits_3() {
    let out = ax_stdin(
        &["task", "put", "-", "--dry-run", "--id", "bad"],
        r#"{"schedule": {"cron": "61 * * * *"}, "priority": 12}"#,
    );
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    for field in ["handler:", "schedule.cron", "priority:"] {
        assert!(err.contains(field), "{field} missing in {err}");
    }
    assert!(out.stdout.is_empty());

    // Validation comes before any connection: no etcd is needed to be told what is wrong.
    let out = ax_stdin(
        &[
            "task",
            "put",
            "-",
            "--id",
            "bad",
            "--etcd-endpoints",
            "http://127.0.0.1:1",
        ],
        r#"{"schedule": {"every": "10s"}}"#,
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("handler:"));
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status = resp.split(' ').nth(1)?.parse().ok()?;
    let body = resp.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

#[test]
fn serve_answers_probes_and_stops_on_sigterm() {
    let port = ax_testkit::free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(["serve", "--http-listen", &listen, "--log-format", "json"])
        .env_clear()
        .env("HOSTNAME", "test-host")
        .env("AX_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let start = Instant::now();
    let health = loop {
        if let Some(r) = http_get(port, "/healthz") {
            break r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "ax serve did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(health, (200, "ok".to_owned()));
    let (status, body) = http_get(port, "/readyz").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("etcd") && body.contains("redis"), "{body}");
    let (status, body) = http_get(port, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("scheduler_is_leader 0"), "{body}");

    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "ax serve ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert_eq!(status.code(), Some(0), "stdout:\n{stdout}");
    // Every log line is JSON, and the stop was logged.
    assert!(stdout.lines().count() >= 2, "{stdout}");
    for line in stdout.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    assert!(stdout.contains("SIGTERM"), "{stdout}");
}

#[test]
fn serve_fails_with_exit_1_when_the_port_is_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let out = ax(&["serve", "--http-listen", &listen], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot listen on"),
        "{}",
        text(&out.stderr)
    );
}
