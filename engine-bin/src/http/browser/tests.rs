use axum::body::Body;

use super::*;

fn request(method: Method, headers: &[(&str, &str)]) -> Request {
    let mut b = Request::builder().method(method).uri("/api/v1/tasks");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::empty()).unwrap()
}

fn reason(guard: &BrowserGuard, method: Method, headers: &[(&str, &str)]) -> Option<&'static str> {
    guard.refusal(&request(method, headers)).map(|(r, _)| r)
}

fn loopback() -> BrowserGuard {
    BrowserGuard::new(
        &["https://console.example.com".into()],
        "https://ax.example.com/base",
        &["ax-tunnel".into(), "pf.example:9000".into()],
        "127.0.0.1:18080",
    )
}

#[test]
fn a_loopback_replica_answers_only_under_loopback_names_and_the_allowed_ones() {
    let g = loopback();
    for host in [
        "127.0.0.1:18080",
        "localhost:18080",
        "LOCALHOST",
        "127.0.0.2",
        "[::1]:18080",
        "ax-tunnel:1234",
        "ax-tunnel",
        "pf.example:9000",
    ] {
        assert_eq!(reason(&g, Method::GET, &[("host", host)]), None, "{host}");
    }
    for host in [
        "attacker.example:18080",
        "attacker.example",
        "pf.example:9001",
        "127.0.0.1.attacker.example",
        "localhost.attacker.example",
        "[::2]:18080",
        "not a host",
    ] {
        assert_eq!(
            reason(&g, Method::GET, &[("host", host)]),
            Some("unknown_host"),
            "{host}"
        );
    }
    // No Host: nothing names another server.
    assert_eq!(reason(&g, Method::GET, &[]), None);
    // A replica the network reaches answers under any name (its tokens guard it).
    let open = BrowserGuard::new(&[], "", &[], "0.0.0.0:8080");
    assert_eq!(
        reason(&open, Method::GET, &[("host", "ax.example.com")]),
        None
    );
}

#[test]
fn without_tokens_a_network_replica_answers_only_addresses_and_its_known_names() {
    // No token stops a rebound page here: the Host does. An address is what a person
    // types; a page rebound to the replica's address sends its own name.
    let open = BrowserGuard::new(
        &[],
        "https://ax.example.com",
        &["ax.internal".into()],
        "0.0.0.0:8080",
    )
    .admitting_anonymous(true);
    for host in [
        "10.0.0.5:8080",
        "[fd00::1]:8080",
        "localhost:8080",
        "ax.example.com",
        "ax.internal:8080",
    ] {
        assert_eq!(
            reason(&open, Method::GET, &[("host", host)]),
            None,
            "{host}"
        );
    }
    for host in [
        "attacker.example",
        "ax.example.com.attacker.example:8080",
        "evil",
    ] {
        assert_eq!(
            reason(&open, Method::GET, &[("host", host)]),
            Some("unknown_host"),
            "{host}"
        );
    }
}

#[test]
fn only_the_own_origin_and_the_allowed_ones_may_send_requests() {
    let g = loopback();
    let host = ("host", "127.0.0.1:18080");
    for origin in [
        "http://127.0.0.1:18080",
        "HTTP://127.0.0.1:18080",
        "https://console.example.com",
        "https://console.example.com:443",
        "https://ax.example.com",
    ] {
        assert_eq!(
            reason(&g, Method::POST, &[host, ("origin", origin)]),
            None,
            "{origin}"
        );
    }
    for origin in [
        "http://127.0.0.1:8000",
        "http://127.0.0.2:18080",
        "https://127.0.0.1:18080",
        "http://console.example.com",
        "null",
        "",
        "https://ax.example.com.attacker.example",
    ] {
        assert_eq!(
            reason(&g, Method::GET, &[host, ("origin", origin)]),
            Some("cross_origin"),
            "{origin}"
        );
    }
    // Behind a TLS proxy the own origin is https.
    let proxied = BrowserGuard::new(&[], "", &[], "0.0.0.0:8080");
    let behind = [
        ("host", "ax.example.com"),
        ("x-forwarded-proto", "https"),
        ("origin", "https://ax.example.com"),
    ];
    assert_eq!(reason(&proxied, Method::POST, &behind), None);
    assert_eq!(
        reason(
            &proxied,
            Method::POST,
            &[
                ("host", "ax.example.com"),
                ("origin", "https://ax.example.com")
            ]
        ),
        Some("cross_origin")
    );
}

#[test]
fn bodies_must_be_declared_json() {
    let g = BrowserGuard::new(&[], "", &[], "0.0.0.0:8080");
    for ok in [
        vec![
            ("content-type", "application/json"),
            ("content-length", "2"),
        ],
        vec![("content-type", "Application/JSON; charset=utf-8")],
        vec![],
        vec![("content-length", "0")],
    ] {
        assert_eq!(reason(&g, Method::POST, &ok), None, "{ok:?}");
    }
    for refused in [
        vec![("content-type", "text/plain"), ("content-length", "2")],
        vec![("content-type", "application/x-www-form-urlencoded")],
        vec![("content-type", "multipart/form-data; boundary=x")],
        vec![("content-type", "text/plain")],
        vec![("content-length", "12")],
        vec![("transfer-encoding", "chunked")],
    ] {
        assert_eq!(
            reason(&g, Method::POST, &refused),
            Some("media_type"),
            "{refused:?}"
        );
        assert_eq!(reason(&g, Method::DELETE, &refused), Some("media_type"));
    }
    // Reads carry no body anyone reads.
    assert_eq!(
        reason(&g, Method::GET, &[("content-type", "text/plain")]),
        None
    );
}

#[test]
fn loopback_listeners_are_told_apart() {
    for listen in [
        "127.0.0.1:8080",
        "[::1]:8080",
        "localhost:8080",
        "127.0.0.2:1",
    ] {
        assert!(is_loopback_listen(listen), "{listen}");
    }
    for listen in [
        "0.0.0.0:8080",
        "[::]:8080",
        "10.0.0.5:8080",
        "ax.example.com:80",
    ] {
        assert!(!is_loopback_listen(listen), "{listen}");
    }
}
