//! A command's child cannot read the serving process's secrets: neither from the environment
//! it starts with nor from `/proc/<ax pid>/environ`, once the process is hardened the way
//! `ax serve` hardens itself.
//!
//! The test runs twice, as two processes: the outer run starts this same test again as the
//! "server" (as an unprivileged user when the machine runs tests as root, since root reads
//! every process's `/proc` files whatever their flags), with a secret in its environment.
//! The server runs a real command through the `command` handler before and after
//! hardening; the command tries to read its parent's environ and prints what it got.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::process::Command;

use ax_queue::ExecutionMessage;
use ax_scheduler_core::{TaskSpec, UtcMillis};
use ax_worker::egress::{EgressClient, EgressPolicy};
use ax_worker::{
    CommandConfig, CommandHandler, CommandsConfig, Handler, HandlerContext, OutputSlot,
};

const ROLE: &str = "AX_HARDENING_TEST_ROLE";
const SECRET_VAR: &str = "AX_REDIS_PASSWORD";
const SECRET: &str = "s3cret-of-the-replica-4f1c";
const NAME: &str = "a_command_cannot_read_the_replica_s_secrets";
/// The uid the server runs as when the tests run as root: `nobody`.
const UNPRIVILEGED: u32 = 65534;

#[test]
fn a_command_cannot_read_the_replica_s_secrets() {
    if std::env::var(ROLE).as_deref() == Ok("server") {
        server();
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", NAME, "--nocapture", "--test-threads", "1"])
        .env_clear()
        .env(ROLE, "server")
        .env(SECRET_VAR, SECRET)
        .current_dir("/");
    if rustix::process::geteuid().is_root() {
        cmd.uid(UNPRIVILEGED).gid(UNPRIVILEGED);
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the server run failed:\n{text}");
    assert!(text.contains("server checks passed"), "{text}");
}

/// What a command printed: its parent's environ (or the error reading it), then its own
/// view of the secret variable.
fn probe(h: &CommandHandler) -> String {
    let spec = TaskSpec::from_json(
        br#"{"handler":"command","schedule":{"every":"1m"},"command":{"name":"probe"}}"#,
        "ns",
        "probe",
    )
    .unwrap();
    let exec = ExecutionMessage::for_fire(&spec, UtcMillis(0), UtcMillis::now(), 1);
    let output = OutputSlot::default();
    let ctx = HandlerContext {
        worker_id: "w".into(),
        cancel: ax_worker::Cancel::new(),
        http: EgressClient::new(EgressPolicy::default()).unwrap(),
        output: output.clone(),
        completion: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ctx = ax_worker::ClusterAttempt::context(ctx, exec, UtcMillis::now());
    rt.block_on(h.run(ctx)).unwrap();
    let out = output.take().unwrap();
    format!("{}\n{}", out.body, out.stderr)
}

fn server() {
    assert_eq!(std::env::var(SECRET_VAR).as_deref(), Ok(SECRET));
    let script = "tr '\\0' '\\n' < /proc/$PPID/environ || echo unreadable; \
                  echo \"own=${AX_REDIS_PASSWORD:-unset}\"";
    let h = CommandHandler::new(CommandsConfig {
        commands: [(
            "probe".to_owned(),
            CommandConfig {
                args: vec!["-c".into(), script.into()],
                ..CommandConfig::new("/bin/sh")
            },
        )]
        .into(),
        allow_root: false,
    })
    .unwrap();
    // Before hardening, the child reads the secret from its parent's environ: what the
    // hardening is for (and the proof that this test can fail).
    let before = probe(&h);
    assert!(before.contains(SECRET), "{before}");
    assert!(before.contains("own=unset"), "{before}");
    ax::serve::hardening::make_undumpable().unwrap();
    assert!(ax::serve::hardening::is_undumpable());
    let after = probe(&h);
    assert!(
        !after.contains(SECRET),
        "the child read the secret: {after}"
    );
    assert!(
        after.contains("unreadable") && after.contains("own=unset"),
        "{after}"
    );
    println!("server checks passed");
}
