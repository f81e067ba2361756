//! The `command` handler running real scripts: arguments and a clean environment, exit
//! codes, capped output of a chatty command, and stopping (cancel, timeout, leftovers) that
//! kills the whole process group. Scripts run as `/bin/sh <file>`, so no test executes a
//! file another thread may still hold open for writing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_queue::ExecutionMessage;
use ax_scheduler_core::{AttemptOutcome, TaskSpec};
use ax_worker::command::TaskArgs;
use ax_worker::egress::{EgressClient, EgressPolicy};
use ax_worker::{
    Cancel, ChannelReporter, CommandConfig, CommandHandler, CommandsConfig, HandlerContext,
    HandlerError, HandlerRegistry, OutputSlot, WorkerPool,
};
use common::*;
use tokio_util::sync::CancellationToken;

/// A temp dir holding `script` as `run.sh`, and the config running it as `/bin/sh run.sh`.
fn script(body: &str) -> (tempfile::TempDir, CommandConfig) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.sh");
    std::fs::write(&file, body).unwrap();
    let cfg = CommandConfig {
        args: vec![file.to_str().unwrap().to_owned()],
        working_dir: Some(dir.path().to_owned()),
        kill_grace: Duration::from_millis(500),
        ..CommandConfig::new("/bin/sh")
    };
    (dir, cfg)
}

fn handler(cfg: CommandConfig) -> CommandHandler {
    CommandHandler::new(CommandsConfig {
        commands: [("job".to_owned(), cfg)].into(),
        // Test machines may run as root; the refusal itself has a unit test.
        allow_root: true,
    })
    .unwrap()
}

fn exec(call: &str) -> ExecutionMessage {
    let spec = TaskSpec::from_json(
        format!(
            r#"{{"handler":"command","schedule":{{"every":"1m"}},"payload":{{"k":"v w"}},
            "timeout":"30s","retry":{{"max_retries":0}},"command":{call}}}"#
        )
        .as_bytes(),
        "ns",
        "cmd",
    )
    .unwrap();
    msg(&spec, 1_767_225_600_000)
}

fn new_ctx() -> (HandlerContext, Cancel, OutputSlot) {
    let cancel = Cancel::new();
    let output = OutputSlot::default();
    let ctx = HandlerContext {
        worker_id: "w".into(),
        cancel: cancel.clone(),
        http: EgressClient::new(EgressPolicy::default()).unwrap(),
        output: output.clone(),
        completion: None,
    };
    (ctx, cancel, output)
}

/// Whether a process runs (a zombie does not: it waits only to be reaped by its parent,
/// which for an orphan is the container's init).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// The pid a script wrote to `name` in `dir`, once it is there.
async fn pid_in(dir: &Path, name: &str) -> u32 {
    let file: PathBuf = dir.join(name);
    for _ in 0..250 {
        if let Ok(text) = std::fs::read_to_string(&file) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no pid in {}", file.display());
}

#[tokio::test]
async fn a_command_gets_its_arguments_a_clean_environment_and_the_payload() {
    let (_dir, mut cfg) = script(
        r#"for a in "$@"; do echo "arg=$a"; done
env | sort
pwd
"#,
    );
    cfg.args.push("--fixed".into());
    cfg.task_args = TaskArgs::AfterSeparator;
    cfg.allow_env = vec!["TARGET".into()];
    cfg.env = [("HOME".to_owned(), "/var/lib/job".to_owned())].into();
    let dir = cfg.working_dir.clone().unwrap();
    let h = handler(cfg);
    let (ctx, _cancel, out) = new_ctx();
    let exec =
        exec(r#"{"name":"job","args":["two words","$HOME;rm -rf /"],"env":{"TARGET":"a b"}}"#);
    h.run_with(ctx, &exec).await.unwrap();
    let out = out.take().expect("the output is kept");
    assert_eq!(out.exit_code, Some(0));
    assert!(!out.truncated);
    let expected = format!(
        "arg=--fixed\narg=--\narg=two words\narg=$HOME;rm -rf /\n\
         AX_ATTEMPT=1\nAX_EXECUTION_ID={}\nAX_FIRE_AT=2026-01-01T00:00:00.000Z\n\
         AX_NAMESPACE=ns\nAX_PAYLOAD={{\"k\":\"v w\"}}\nAX_TASK=cmd\nHOME=/var/lib/job\n\
         LANG=C.UTF-8\nPATH=/usr/local/bin:/usr/bin:/bin\nPWD={}\nTARGET=a b\n{}\n",
        exec.execution_id,
        dir.display(),
        dir.display()
    );
    // `sh` adds PWD (and some add SHLVL or _) itself; nothing of this process's own
    // environment reaches the command.
    let body: String = out
        .body
        .lines()
        .filter(|l| !l.starts_with("SHLVL=") && !l.starts_with("_="))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(body, expected);
}

/// The name of the user with `uid` in /etc/passwd, else the uid as text.
fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[2] == uid.to_string()).then(|| f[0].to_owned())
        })
        .unwrap_or_else(|| uid.to_string())
}

#[tokio::test]
async fn a_command_runs_as_its_configured_user() {
    // As root the command runs as `nobody` (and the root refusal does not apply, since the
    // command does not run as root); otherwise as this user, the one switch allowed.
    let euid = rustix::process::geteuid().as_raw();
    let (user, uid, gid) = if euid == 0 {
        ("nobody".to_owned(), 65534, 65534)
    } else {
        (user_name(euid), euid, rustix::process::getegid().as_raw())
    };
    let h = CommandHandler::new(CommandsConfig {
        commands: [(
            "job".to_owned(),
            CommandConfig {
                args: vec!["-c".into(), "id -u; id -g".into()],
                user: Some(user),
                ..CommandConfig::new("/bin/sh")
            },
        )]
        .into(),
        allow_root: false,
    })
    .unwrap();
    let (ctx, _c, out) = new_ctx();
    h.run_with(ctx, &exec(r#"{"name":"job"}"#)).await.unwrap();
    assert_eq!(
        out.take().unwrap().body,
        format!(
            "{uid}
{gid}
"
        )
    );
}

#[tokio::test]
async fn task_args_go_only_where_the_command_s_rule_puts_them() {
    // The script records that it ran, then its arguments, one per line.
    let body = "echo ran > ran\nfor a in \"$@\"; do echo \"arg=$a\"; done\n";
    let (dir, cfg) = script(body);
    let ran = dir.path().join("ran");
    let h = handler(cfg.clone());
    let (ctx, _c, out) = new_ctx();
    let e = h
        .run_with(ctx, &exec(r#"{"name":"job","args":["-e","sh -c id"]}"#))
        .await
        .unwrap_err();
    assert!(!e.is_retryable());
    assert!(
        e.to_string()
            .starts_with("command `job` takes no arguments from a task (worker.commands.job.task_args is \"none\")"),
        "{e}"
    );
    assert!(out.take().is_none() && !ran.exists(), "nothing ran");

    let after = handler(CommandConfig {
        task_args: TaskArgs::AfterSeparator,
        ..cfg.clone()
    });
    let (ctx, _c, out) = new_ctx();
    after
        .run_with(
            ctx,
            &exec(r#"{"name":"job","args":["--checkpoint-action=exec=id"]}"#),
        )
        .await
        .unwrap();
    assert_eq!(
        out.take().unwrap().body,
        "arg=--\narg=--checkpoint-action=exec=id\n"
    );

    let patterns = handler(CommandConfig {
        task_args: TaskArgs::Patterns,
        arg_patterns: vec!["[a-z]+".into(), "[0-9]+".into()],
        ..cfg
    });
    let (ctx, _c, out) = new_ctx();
    patterns
        .run_with(ctx, &exec(r#"{"name":"job","args":["daily","7"]}"#))
        .await
        .unwrap();
    assert_eq!(out.take().unwrap().body, "arg=daily\narg=7\n");
    std::fs::remove_file(&ran).unwrap();
    for args in [r#"["-e"]"#, r#"["daily","7x"]"#, r#"["a","1","b"]"#] {
        let (ctx, _c, out) = new_ctx();
        let call = format!(r#"{{"name":"job","args":{args}}}"#);
        let e = patterns.run_with(ctx, &exec(&call)).await.unwrap_err();
        assert!(!e.is_retryable(), "{e}");
        assert!(out.take().is_none() && !ran.exists(), "{args} must not run");
    }
}

#[tokio::test]
async fn a_task_setting_a_variable_its_command_does_not_allow_fails_for_good() {
    let (_dir, cfg) = script("echo never\n");
    let h = handler(cfg);
    let (ctx, _c, out) = new_ctx();
    let e = h
        .run_with(ctx, &exec(r#"{"name":"job","env":{"LD_PRELOAD":"/x.so"}}"#))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        HandlerError::Permanent(
            "command `job` does not let a task set LD_PRELOAD: an operator lists the names a \
             task may set in worker.commands.job.allow_env"
                .into()
        )
    );
    assert!(out.take().is_none(), "nothing ran");
    let (ctx, _c, _) = new_ctx();
    let e = h
        .run_with(ctx, &exec(r#"{"name":"other"}"#))
        .await
        .unwrap_err();
    assert!(!e.is_retryable());
    assert!(e
        .to_string()
        .starts_with("unknown command `other`: this replica configures [job]"));
    let missing = handler(CommandConfig::new("/nonexistent/backup"));
    let (ctx, _c, _) = new_ctx();
    let e = missing
        .run_with(ctx, &exec(r#"{"name":"job"}"#))
        .await
        .unwrap_err();
    assert!(!e.is_retryable());
    assert!(
        e.to_string()
            .starts_with("cannot start command `job` (/nonexistent/backup):"),
        "{e}"
    );
}

#[tokio::test]
async fn a_non_zero_exit_is_a_retryable_failure_with_its_code_and_stderr() {
    let (_dir, cfg) = script("echo partial\necho 'disk full' >&2\nexit 3\n");
    let h = handler(cfg);
    let (ctx, _c, out) = new_ctx();
    let e = h
        .run_with(ctx, &exec(r#"{"name":"job"}"#))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        HandlerError::Retryable("command `job` exited with code 3; stderr: disk full".into())
    );
    let out = out.take().unwrap();
    assert_eq!(
        (out.exit_code, out.body.as_str(), out.stderr.as_str()),
        (Some(3), "partial\n", "disk full\n")
    );

    let (_dir, cfg) = script("kill -9 $$\n");
    let (ctx, _c, out) = new_ctx();
    let e = handler(cfg)
        .run_with(ctx, &exec(r#"{"name":"job"}"#))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        HandlerError::Retryable("command `job` was killed by signal 9 (SIGKILL)".into())
    );
    assert_eq!(out.take().unwrap().exit_code, None);
}

#[tokio::test]
async fn a_chatty_command_runs_to_its_end_keeping_the_start_and_end_of_each_stream() {
    // 10 MiB on each stream, far past any pipe buffer: a handler that did not read both as
    // they come would hang here until the timeout.
    let (_dir, mut cfg) = script(
        "echo FIRST; head -c 10485760 /dev/zero | tr '\\0' o; echo; echo LAST\n\
         echo ERR-FIRST >&2; head -c 10485760 /dev/zero | tr '\\0' e >&2; echo ERR-LAST >&2\n",
    );
    cfg.max_output_bytes = 1024;
    let h = handler(cfg);
    let (ctx, _c, out) = new_ctx();
    let t0 = Instant::now();
    h.run_with(ctx, &exec(r#"{"name":"job"}"#)).await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    let out = out.take().unwrap();
    assert!(out.truncated);
    assert!(out.body.starts_with("FIRST\nooo"), "{}", &out.body[..20]);
    assert!(out.body.ends_with("ooo\nLAST\n"));
    assert!(
        out.body.contains("\n[... 10484748 bytes cut ...]\n"),
        "{}",
        out.body
    );
    assert!(out.body.len() < 1100);
    assert!(out.stderr.starts_with("ERR-FIRST\neee") && out.stderr.ends_with("eeeERR-LAST\n"));
    assert!(out.stderr.len() < 1100);
}

/// Forks `sleep 600 &` (its pid in `grandchild`), writes its own pid to `child`, then
/// waits; with `trap`, it ignores SIGTERM.
const FORKS_AND_WAITS: &str = "sleep 600 &\necho $! > grandchild\necho $$ > child\n";

#[tokio::test]
async fn a_cancelled_command_and_its_grandchild_are_killed() {
    for ignores_term in [false, true] {
        let trap = if ignores_term { "trap '' TERM\n" } else { "" };
        let (dir, cfg) = script(&format!("{trap}{FORKS_AND_WAITS}echo started\nsleep 600\n"));
        let h = handler(cfg);
        let (ctx, cancel, out) = new_ctx();
        let exec = exec(r#"{"name":"job"}"#);
        let run = tokio::spawn(async move { h.run_with(ctx, &exec).await });
        let child = pid_in(dir.path(), "child").await;
        let grandchild = pid_in(dir.path(), "grandchild").await;
        assert!(alive(child) && alive(grandchild));
        let t0 = Instant::now();
        cancel.cancel();
        let e = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("the handler ends within its grace")
            .unwrap()
            .unwrap_err();
        let took = t0.elapsed();
        assert!(e.is_retryable(), "{e}");
        if ignores_term {
            assert_eq!(
                e.to_string(),
                "command `job` was killed by signal 9 (SIGKILL)"
            );
            assert!(
                took >= Duration::from_millis(450),
                "SIGKILL after the grace: {took:?}"
            );
        } else {
            assert!(
                e.to_string()
                    .starts_with("command `job` was killed by signal 15 (SIGTERM)"),
                "{e}"
            );
        }
        assert!(!alive(child), "the command is gone");
        assert!(!alive(grandchild), "its grandchild is gone too");
        assert_eq!(out.take().unwrap().body, "started\n");
    }
}

#[tokio::test]
async fn what_a_finished_command_leaves_running_is_killed() {
    let (dir, cfg) = script(&format!("{FORKS_AND_WAITS}echo done\n"));
    let h = handler(cfg);
    let (ctx, _c, out) = new_ctx();
    let t0 = Instant::now();
    h.run_with(ctx, &exec(r#"{"name":"job"}"#)).await.unwrap();
    // The grandchild holds stdout open; the attempt does not wait for it.
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let grandchild = pid_in(dir.path(), "grandchild").await;
    assert!(eventually(Duration::from_secs(2), || !alive(grandchild)).await);
    assert_eq!(out.take().unwrap().body, "done\n");
}

#[tokio::test]
async fn a_timed_out_command_is_stopped_by_the_pool_with_its_process_group() {
    let q = queue().await;
    let (dir, cfg) = script(&format!("{FORKS_AND_WAITS}echo working\nsleep 600\n"));
    let mut reg = HandlerRegistry::new();
    reg.register("command", handler(cfg));
    let (reporter, mut rx) = ChannelReporter::new();
    let pool = WorkerPool::new(q.clone(), fast_config("w"), reg, Arc::new(reporter)).unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let running = tokio::spawn(async move { pool.run(c).await });
    let mut m = exec(r#"{"name":"job"}"#);
    m.timeout_ms = 1000;
    q.enqueue(&m).await.unwrap();
    let child = pid_in(dir.path(), "child").await;
    let grandchild = pid_in(dir.path(), "grandchild").await;
    let report = loop {
        let ev = tokio::time::timeout(Duration::from_secs(15), rx.recv())
            .await
            .expect("a report in time")
            .expect("reporter open");
        if let ax_worker::ReportEvent::Finished(r) = ev {
            break *r;
        }
    };
    assert_eq!(report.end.outcome, AttemptOutcome::TimedOut);
    assert!(
        !alive(child),
        "the command is gone when its attempt is reported"
    );
    assert!(!alive(grandchild), "and so is its grandchild");
    let output = report.output.expect("what it printed before the timeout");
    assert_eq!(
        (output.body.as_str(), output.exit_code),
        ("working\n", None)
    );
    cancel.cancel();
    running.await.unwrap();
}
