//! The built-in `http` handler against local HTTP servers: answers, the egress guard,
//! redirects and masked errors. Every server listens on loopback, and every request a test
//! makes goes to loopback: addresses outside it are covered by the classifier's own tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ax_queue::ExecutionMessage;
use ax_scheduler_core::task::HttpTarget;
use ax_worker::egress::parse_allow_cidr;
use ax_worker::{
    Cancel, EgressClient, EgressPolicy, HandlerContext, HandlerError, HttpHandler, OutputSlot,
    SecretRule, SecretSource, MAX_REDIRECTS,
};
use common::{Receiver, RunWith};

fn ctx_with(cidrs: &[&str], hosts: &[&str]) -> HandlerContext {
    let policy = EgressPolicy::new(
        cidrs.iter().map(|c| parse_allow_cidr(c).unwrap()).collect(),
        hosts.iter().map(|h| h.parse().unwrap()).collect(),
    );
    HandlerContext {
        worker_id: "w".into(),
        cancel: Cancel::new(),
        http: EgressClient::new(policy).unwrap(),
        output: OutputSlot::default(),
        completion: None,
    }
}

/// What the local examples and tests configure: loopback opened.
fn loopback_ctx() -> HandlerContext {
    ctx_with(&["127.0.0.0/8", "::1/128"], &[])
}

/// The default guard: public addresses only.
fn default_ctx() -> HandlerContext {
    ctx_with(&[], &[])
}

fn exec_to(url: &str, headers: &[(&str, &str)], follow_redirects: bool) -> ExecutionMessage {
    let mut s = common::spec("h", "http");
    s.timeout = Duration::from_millis(1500);
    s.http = Some(HttpTarget {
        url: url.to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        follow_redirects,
        await_completion: false,
    });
    common::msg(&s, 1)
}

async fn run(ctx: HandlerContext, exec: &ExecutionMessage) -> Result<(), HandlerError> {
    HttpHandler::default().run_with(ctx, exec).await
}

fn permanent(r: Result<(), HandlerError>) -> String {
    match r {
        Err(HandlerError::Permanent(e)) => e,
        other => panic!("expected a permanent failure, got {other:?}"),
    }
}

fn retryable(r: Result<(), HandlerError>) -> String {
    match r {
        Err(HandlerError::Retryable(e)) => e,
        other => panic!("expected a retryable failure, got {other:?}"),
    }
}

#[tokio::test]
async fn http_handler_posts_the_execution_and_classifies_answers() {
    let rx = Receiver::on("127.0.0.1").await;
    let port = rx.port;
    let to = |path: &str| {
        exec_to(
            &format!("http://127.0.0.1:{port}{path}"),
            &[("x-app-test", "yes")],
            false,
        )
    };
    let ok = to("/200");
    run(loopback_ctx(), &ok).await.unwrap();
    let req = rx.requests()[0].clone();
    assert!(req.starts_with("POST /200"), "{req}");
    assert!(req.to_ascii_lowercase().contains("x-app-test: yes"));
    let lower = req.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("x-ax-execution-id: {}", ok.execution_id)),
        "a receiver can drop a repeat by the execution id: {req}"
    );
    assert!(lower.contains("x-ax-attempt: 1"), "{req}");
    assert!(lower.contains("content-type: application/json"), "{req}");
    assert!(
        req.contains(&ok.execution_id.to_string()),
        "the body is the execution"
    );
    retryable(run(loopback_ctx(), &to("/503")).await);
    retryable(run(loopback_ctx(), &to("/429")).await);
    permanent(run(loopback_ctx(), &to("/404")).await);
    let t0 = std::time::Instant::now();
    retryable(run(loopback_ctx(), &to("/hang")).await);
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "the task timeout bounds the request"
    );
    // Nothing listens on a fresh port: a network error, retryable.
    let dead = format!("http://127.0.0.1:{}/x", ax_testkit::free_port());
    retryable(run(loopback_ctx(), &exec_to(&dead, &[], false)).await);
    let mut no_target = ok.clone();
    no_target.http = None;
    permanent(run(loopback_ctx(), &no_target).await);
}

#[tokio::test]
async fn the_default_guard_refuses_loopback_without_connecting() {
    let rx = Receiver::on("127.0.0.1").await;
    let p = rx.port;
    // An address in the URL: checked before sending.
    let e = permanent(
        run(
            default_ctx(),
            &exec_to(&format!("http://127.0.0.1:{p}/200"), &[], false),
        )
        .await,
    );
    assert!(
        e.contains("127.0.0.1 is loopback (127.0.0.0/8)") && e.contains("worker.http_allow_cidrs"),
        "{e}"
    );
    // The same address carried in IPv6.
    let e = permanent(
        run(
            default_ctx(),
            &exec_to(&format!("http://[::ffff:127.0.0.1]:{p}/200"), &[], false),
        )
        .await,
    );
    assert!(
        e.contains("loopback (127.0.0.0/8) by the IPv4 address 127.0.0.1"),
        "{e}"
    );
    // A name: checked on what it resolves to, in the client's resolver.
    let e = permanent(
        run(
            default_ctx(),
            &exec_to(&format!("http://localhost:{p}/200"), &[], false),
        )
        .await,
    );
    assert!(
        e.contains("localhost resolves to 127.0.0.1, which is loopback (127.0.0.0/8)")
            && e.contains("worker.http_allow_hosts"),
        "{e}"
    );
    assert_eq!(
        rx.requests(),
        Vec::<String>::new(),
        "the receiver saw a request"
    );
}

#[tokio::test]
async fn an_allowed_block_opens_loopback() {
    let rx = Receiver::on("127.0.0.1").await;
    let url = format!("http://127.0.0.1:{}/200", rx.port);
    run(ctx_with(&["127.0.0.0/8"], &[]), &exec_to(&url, &[], false))
        .await
        .unwrap();
    // A block that does not hold the address opens nothing.
    permanent(
        run(
            ctx_with(&["127.0.0.2/32", "10.0.0.0/8"], &[]),
            &exec_to(&url, &[], false),
        )
        .await,
    );
    assert_eq!(rx.requests().len(), 1);
}

#[tokio::test]
async fn a_host_pattern_opens_its_names_only() {
    let rx = Receiver::on("127.0.0.1").await;
    let p = rx.port;
    let ctx = || ctx_with(&[], &["LOCALHOST"]);
    run(
        ctx(),
        &exec_to(&format!("http://localhost:{p}/200"), &[], false),
    )
    .await
    .unwrap();
    // The address itself is not the name.
    permanent(
        run(
            ctx(),
            &exec_to(&format!("http://127.0.0.1:{p}/200"), &[], false),
        )
        .await,
    );
    assert_eq!(rx.requests().len(), 1);
}

#[tokio::test]
async fn a_redirect_is_not_followed_without_the_opt_in() {
    let (a, b) = (
        Receiver::on("127.0.0.1").await,
        Receiver::on("127.0.0.1").await,
    );
    let url = format!(
        "http://127.0.0.1:{}/to/302/127.0.0.1/{}/200",
        a.port, b.port
    );
    let e = permanent(run(loopback_ctx(), &exec_to(&url, &[], false)).await);
    assert!(
        e.contains("HTTP 302") && e.contains(r#""follow_redirects": true"#),
        "{e}"
    );
    assert_eq!((a.requests().len(), b.requests().len()), (1, 0));
}

#[tokio::test]
async fn an_opted_in_redirect_keeps_the_task_credentials_at_their_origin() {
    let (a, b) = (
        Receiver::on("127.0.0.1").await,
        Receiver::on("127.0.0.1").await,
    );
    let headers = [("x-api-key", "s3cret-header")];
    // 308 within the origin, to an absolute URL without the user info (method, body and
    // credentials kept), then 303 to another port: another origin, reached with a GET
    // without body or credentials.
    let url = format!(
        "http://user:s3cret-pw@127.0.0.1:{a}/to/308/127.0.0.1/{a}/to/303/127.0.0.1/{b}/200",
        a = a.port,
        b = b.port
    );
    run(loopback_ctx(), &exec_to(&url, &headers, true))
        .await
        .unwrap();
    let at_a = a.requests();
    assert_eq!(at_a.len(), 2, "{at_a:#?}");
    for req in &at_a {
        let lower = req.to_ascii_lowercase();
        assert!(req.starts_with("POST /to/"), "{req}");
        assert!(lower.contains("x-api-key: s3cret-header"), "{req}");
        // user:s3cret-pw
        assert!(
            lower.contains("authorization: basic dxnlcjpzm2nyzxqtchc="),
            "{req}"
        );
    }
    let at_b = b.requests();
    assert_eq!(at_b.len(), 1, "{at_b:#?}");
    assert!(at_b[0].starts_with("GET /200"), "{}", at_b[0]);
    assert!(!at_b[0].contains("s3cret"), "{}", at_b[0]);
    assert!(
        !at_b[0].to_ascii_lowercase().contains("authorization"),
        "{}",
        at_b[0]
    );

    // A relative 307, then a 307 to another origin: method and body kept, but not the
    // credentials (the body never repeats the target).
    let exec = exec_to(
        &format!(
            "http://127.0.0.1:{}/to/307/self/to/307/127.0.0.1/{}/200",
            a.port, b.port
        ),
        &headers,
        true,
    );
    run(loopback_ctx(), &exec).await.unwrap();
    let at_b = b.requests();
    assert_eq!(at_b.len(), 2);
    assert!(at_b[1].starts_with("POST /200"), "{}", at_b[1]);
    assert!(
        at_b[1].contains(&exec.execution_id.to_string()),
        "{}",
        at_b[1]
    );
    assert!(!at_b[1].contains("s3cret"), "{}", at_b[1]);
    let at_a = a.requests();
    assert_eq!(at_a.len(), 4, "{at_a:#?}");
    assert!(
        at_a[2..].iter().all(|r| r.contains("s3cret-header")),
        "the hops within the origin carry them: {at_a:#?}"
    );
    // As headers only: no body, at any origin, repeats the target or its credentials.
    for req in at_a.iter().chain(&at_b) {
        let body = req.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert!(
            !body.contains("s3cret") && !body.contains("\"http\":"),
            "{req}"
        );
    }
}

#[tokio::test]
async fn a_307_to_another_origin_does_not_carry_the_completion_token() {
    let (a, b) = (
        Receiver::on("127.0.0.1").await,
        Receiver::on("127.0.0.1").await,
    );
    let token = ax_queue::CompletionToken::issue("default", 0);
    let secret = token.expose().to_owned();
    let mut ctx = loopback_ctx();
    ctx.completion = Some(ax_worker::awaiting::Completion::new(
        "http://127.0.0.1:1/api/v1/executions/x/complete".into(),
        token,
    ));
    for code in [307, 308] {
        let exec = exec_to(
            &format!(
                "http://127.0.0.1:{}/to/{code}/127.0.0.1/{}/200",
                a.port, b.port
            ),
            &[],
            true,
        );
        run(ctx.clone(), &exec).await.unwrap();
    }
    let at_a = a.requests();
    assert_eq!(at_a.len(), 2, "{at_a:#?}");
    assert!(
        at_a.iter().all(|r| r.matches(&secret).count() == 2),
        "{at_a:#?}"
    );
    let at_b = b.requests();
    assert_eq!(at_b.len(), 2, "{at_b:#?}");
    for req in &at_b {
        assert!(req.starts_with("POST /200"), "{req}");
        assert!(!req.contains(&secret), "the token left its origin: {req}");
        assert!(!req.contains("completion_"), "{req}");
        assert!(
            !req.to_ascii_lowercase().contains("x-ax-completion"),
            "{req}"
        );
    }
}

#[tokio::test]
async fn a_redirect_is_checked_again_at_each_hop() {
    // An address: 127.0.0.1 is open, 127.0.0.2 (on the other side of the redirect) is not.
    let a = Receiver::on("127.0.0.1").await;
    let b = Receiver::on("127.0.0.2").await;
    let url = format!(
        "http://127.0.0.1:{}/to/307/127.0.0.2/{}/200",
        a.port, b.port
    );
    let e = permanent(run(ctx_with(&["127.0.0.1/32"], &[]), &exec_to(&url, &[], true)).await);
    assert!(e.contains("127.0.0.2 is loopback (127.0.0.0/8)"), "{e}");
    assert_eq!((a.requests().len(), b.requests().len()), (1, 0));

    // A name, checked by the resolver: the redirect from the open 127.0.0.2 points at
    // `localhost` (127.0.0.1, not open).
    let url = format!(
        "http://127.0.0.2:{}/to/302/localhost/{}/200",
        b.port, a.port
    );
    let e = permanent(run(ctx_with(&["127.0.0.2/32"], &[]), &exec_to(&url, &[], true)).await);
    assert!(e.contains("localhost resolves to 127.0.0.1"), "{e}");
    assert_eq!((a.requests().len(), b.requests().len()), (1, 1));

    // A redirect loop ends after MAX_REDIRECTS hops.
    let url = format!("http://127.0.0.1:{}/loop", a.port);
    let e = permanent(run(loopback_ctx(), &exec_to(&url, &[], true)).await);
    assert!(e.contains("redirected more than 10 times"), "{e}");
    assert_eq!(a.requests().len(), 1 + MAX_REDIRECTS + 1);
}

#[tokio::test]
async fn errors_mask_user_info_and_query_values() {
    let rx = Receiver::on("127.0.0.1").await;
    let p = rx.port;
    let dead = ax_testkit::free_port();
    let secret_url =
        |port: u16, scheme: &str| format!("{scheme}://u:pw@127.0.0.1:{port}/x?token=s");
    let cases = [
        // Refused by the guard.
        (default_ctx(), p, secret_url(p, "https"), false),
        // TLS spoken to a plain-HTTP server.
        (loopback_ctx(), p, secret_url(p, "https"), true),
        // Connection refused.
        (loopback_ctx(), dead, secret_url(dead, "http"), true),
    ];
    for (ctx, port, url, retry) in cases {
        let e = match run(ctx, &exec_to(&url, &[], false)).await {
            Err(HandlerError::Retryable(e)) if retry => e,
            Err(HandlerError::Permanent(e)) if !retry => e,
            other => panic!("{url}: {other:?}"),
        };
        assert!(
            e.contains(&format!("://***@127.0.0.1:{port}/x?token=***")),
            "{url}: {e}"
        );
        assert!(!e.contains("pw") && !e.contains("token=s"), "{url}: {e}");
    }
    // The target of a redirect that is not followed is masked too.
    let url = format!("http://127.0.0.1:{p}/to/302/127.0.0.1/{p}/y?key=s3cret");
    let e = permanent(run(loopback_ctx(), &exec_to(&url, &[], false)).await);
    assert!(e.contains(&format!("127.0.0.1:{p}/y?key=***")), "{e}");
    assert!(!e.contains("s3cret"), "{e}");
}

/// A server answering every connection with `status` and `body_len` bytes of `a` (sent
/// slowly past the first 64 KiB, so reading it all would take far longer than the test
/// allows).
async fn body_server(status: u16, body_len: usize) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = sock.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {body_len}\r\nconnection: close\r\n\r\n"
                );
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let mut left = body_len;
                let chunk = vec![b'a'; 65536];
                let mut sent = 0;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if sock.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                    sent += 1;
                    if sent > 1 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn the_answer_is_kept_capped_at_one_kib_without_reading_a_large_body() {
    let port = body_server(500, 512 * 1024 * 1024).await;
    let ctx = loopback_ctx();
    let slot = ctx.output.clone();
    let exec = exec_to(&format!("http://127.0.0.1:{port}/big"), &[], false);
    let t0 = std::time::Instant::now();
    retryable(run(ctx, &exec).await);
    assert!(
        t0.elapsed() < Duration::from_millis(1000),
        "the body is not read to its end: {:?}",
        t0.elapsed()
    );
    let out = slot.take().expect("the answer is kept");
    assert_eq!(out.status, Some(500));
    assert_eq!(out.body, "a".repeat(ax_scheduler_core::MAX_OUTPUT_BYTES));
    assert!(out.truncated);

    let port = body_server(200, 5).await;
    let ctx = loopback_ctx();
    let slot = ctx.output.clone();
    run(
        ctx,
        &exec_to(&format!("http://127.0.0.1:{port}/"), &[], false),
    )
    .await
    .unwrap();
    let out = slot.take().expect("the answer is kept");
    assert_eq!(
        (out.status, out.body.as_str(), out.truncated),
        (Some(200), "aaaaa", false)
    );
}

#[tokio::test]
async fn secret_references_are_resolved_from_the_secrets_directory() {
    let rx = Receiver::on("127.0.0.1").await;
    let port = rx.port;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("api-token"), "tok-123\n").unwrap();
    std::fs::write(dir.path().join("path.part"), "200").unwrap();
    let rules = [
        (
            "api-token",
            SecretRule::new(&["127.0.0.1".into()], false).unwrap(),
        ),
        (
            "path.part",
            SecretRule::new(&["127.0.0.1".into()], true).unwrap(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let handler = HttpHandler::new(SecretSource::dir(dir.path()).with_rules(rules));
    let exec = exec_to(
        &format!("http://127.0.0.1:{port}/${{secret:path.part}}"),
        &[("authorization", "Bearer ${secret:api-token}")],
        false,
    );
    let ctx = loopback_ctx();
    let slot = ctx.output.clone();
    handler.run_with(ctx, &exec).await.unwrap();
    let req = rx.requests()[0].clone();
    assert!(req.starts_with("POST /200 "), "{req}");
    assert!(
        req.to_ascii_lowercase()
            .contains("authorization: bearer tok-123\r\n"),
        "one trailing newline is not part of the value: {req}"
    );
    assert!(!req.contains("${secret:"), "{req}");
    let hidden = slot.hidden();
    assert!(hidden.iter().any(|v| v == "tok-123"), "{hidden:?}");

    // A missing secret: a permanent failure naming it and the directory, and no request.
    let gone = exec_to(
        &format!("http://127.0.0.1:{port}/200"),
        &[("authorization", "Bearer ${secret:gone}")],
        false,
    );
    let e = permanent(handler.run_with(loopback_ctx(), &gone).await);
    assert!(
        e.contains("`gone`") && e.contains(&dir.path().display().to_string()),
        "{e}"
    );
    let e = permanent(HttpHandler::default().run_with(loopback_ctx(), &gone).await);
    assert!(e.contains("worker.secrets_dir"), "{e}");
    assert_eq!(rx.requests().len(), 1, "no request without its secret");

    // A whole-URL secret that is no URL is named by its reference, never by its value.
    std::fs::write(dir.path().join("bad-url"), "not a url at all").unwrap();
    let bad = exec_to("${secret:bad-url}", &[], false);
    let e = permanent(handler.run_with(loopback_ctx(), &bad).await);
    assert!(
        e.contains("${secret:bad-url}") && !e.contains("not a url"),
        "{e}"
    );
}

#[tokio::test]
async fn a_secret_goes_only_to_the_hosts_its_rule_names_and_into_a_url_only_if_allowed() {
    let rx = Receiver::on("127.0.0.1").await;
    let port = rx.port;
    let dir = tempfile::tempdir().unwrap();
    for name in ["token", "unbound", "hook"] {
        std::fs::write(dir.path().join(name), format!("value-of-{name}")).unwrap();
    }
    std::fs::write(
        dir.path().join("hook-url"),
        format!("http://127.0.0.1:{port}/hook/abc"),
    )
    .unwrap();
    let rule = |hosts: &[&str], in_url: bool| {
        let hosts: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
        SecretRule::new(&hosts, in_url).unwrap()
    };
    let rules = [
        ("token", rule(&["api.example.com", "*.example.org"], false)),
        ("hook", rule(&["127.0.0.1"], false)),
        ("hook-url", rule(&["127.0.0.1"], false)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let handler = HttpHandler::new(SecretSource::dir(dir.path()).with_rules(rules));
    let here = format!("http://127.0.0.1:{port}/x");
    let cases = [
        // A task pointed at its own receiver to read a secret bound elsewhere.
        (
            exec_to(&here, &[("authorization", "Bearer ${secret:token}")], false),
            "worker.secret_destinations.token.hosts",
        ),
        // A secret no rule names goes nowhere.
        (
            exec_to(&here, &[("x-key", "${secret:unbound}")], false),
            "secret `unbound` has no destinations",
        ),
        // Allowed host, but in the query, which its rule does not allow.
        (
            exec_to(&format!("{here}?k=${{secret:hook}}"), &[], false),
            "worker.secret_destinations.hook.in_url",
        ),
    ];
    for (exec, names) in cases {
        let e = permanent(handler.run_with(loopback_ctx(), &exec).await);
        assert!(e.contains(names), "{e}");
        assert!(
            !e.contains("value-of-"),
            "a refusal never names a value: {e}"
        );
    }
    assert!(rx.requests().is_empty(), "nothing was sent");

    // Its own host, in a header; and a whole-URL secret whose host its rule names.
    let ok = exec_to(&here, &[("x-key", "${secret:hook}")], false);
    handler.run_with(loopback_ctx(), &ok).await.unwrap();
    let whole = exec_to("${secret:hook-url}", &[], false);
    handler.run_with(loopback_ctx(), &whole).await.unwrap();
    let requests = rx.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1].starts_with("POST /hook/abc "),
        "{}",
        requests[1]
    );
}
