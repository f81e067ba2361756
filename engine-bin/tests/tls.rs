//! ax against etcd and Redis with TLS and client certificates, as the configuration's
//! `ca_file`, `cert_file` and `key_file` settings describe them: private servers the tests
//! start themselves on loopback (`etcd` and `redis-server` are required, never skipped), each
//! with its own throwaway CA.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ax::config::Config;
use ax::http::ApiBackend;
use ax_control::backend::Backend;
use ax_control::clock_check::ClockCheck;
use ax_control::connect::{connect_etcd, connect_queue, election_config, etcd_tls};
use ax_election::Candidate;
use ax_testkit::{unique_name, ClientAuth, EtcdServer, RedisServer, TlsMaterial};

fn path(p: std::path::PathBuf) -> String {
    p.display().to_string()
}

/// The error of a connect that must fail, with its causes.
async fn etcd_error(c: &Config) -> String {
    match connect_etcd(&c.cluster()).await {
        Ok(_) => panic!("connected to etcd with {c:?}"),
        Err(e) => format!("{e:#}"),
    }
}

/// A valid configuration for `etcd` and `redis`, trusting `ca`'s CA and presenting
/// `identity`'s client certificate to both.
fn config(
    etcd: &EtcdServer,
    redis: &RedisServer,
    ca: &TlsMaterial,
    identity: Option<&TlsMaterial>,
) -> Config {
    let mut c = Config::default();
    c.instance.id = "ax-tls".into();
    c.etcd.endpoints = vec![etcd.endpoint()];
    c.etcd.prefix = format!("/{}", unique_name("tls"));
    c.etcd.timeout = Duration::from_secs(3);
    c.etcd.ca_file = path(ca.ca_file());
    c.redis.url = redis.url();
    c.redis.key_prefix = unique_name("tls");
    c.redis.ca_file = path(ca.ca_file());
    if let Some(id) = identity {
        c.etcd.cert_file = path(id.client_cert_file());
        c.etcd.key_file = path(id.client_key_file());
        c.redis.cert_file = path(id.client_cert_file());
        c.redis.key_file = path(id.client_key_file());
    }
    c.validate().unwrap();
    c
}

#[tokio::test]
async fn registry_election_and_queue_work_over_mutual_tls() {
    let tls = TlsMaterial::new();
    let etcd = EtcdServer::start_with_tls(&tls);
    let redis = RedisServer::start_with_tls(&tls, ClientAuth::Required);
    let c = config(&etcd, &redis, &tls, Some(&tls));

    // The CLI's and the API's backend: etcd now, Redis on first use (the lazy path).
    let backend = Backend::connect_lazy(&c.cluster()).await.unwrap();
    let spec = ax_testkit::spec("t1", "default", "log");
    backend.registry().register(&spec).await.unwrap();
    let stored = backend.registry().get("ns", "t1").await.unwrap().unwrap();
    assert_eq!(&*stored.spec.id, "t1");
    assert!(backend.dlq_list(None, 10).await.unwrap().is_empty());

    let candidate = Candidate::new(
        backend.etcd().clone(),
        election_config(&c.cluster()),
        "ax-tls",
        serde_json::json!({}),
    )
    .unwrap();
    let leadership = candidate.try_campaign().await.unwrap().expect("leads");
    assert!(leadership.is_valid());
    leadership.resign().await.unwrap();

    // A replica's path to Redis.
    let queue = connect_redis(&c).await.unwrap();
    assert_eq!(queue.depth("default").await.unwrap(), 0);
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused_naming_ca_file() {
    let tls = TlsMaterial::new();
    let other = TlsMaterial::new();
    let etcd = EtcdServer::start_with_tls(&tls);
    let redis = RedisServer::start_with_tls(&tls, ClientAuth::Required);
    let c = config(&etcd, &redis, &other, Some(&tls));

    let e = etcd_error(&c).await;
    assert!(e.contains("check etcd.ca_file"), "{e}");
    let e = format!("{:#}", connect_redis(&c).await.unwrap_err());
    assert!(e.contains("check redis.ca_file"), "{e}");

    // Without redis.ca_file, rediss:// trusts the system's roots, which know no private CA.
    let mut system = config(&etcd, &redis, &tls, Some(&tls));
    system.redis.ca_file.clear();
    let e = format!("{:#}", connect_redis(&system).await.unwrap_err());
    assert!(e.contains("set redis.ca_file"), "{e}");
}

#[tokio::test]
async fn a_missing_or_foreign_client_certificate_is_refused_naming_cert_file() {
    let tls = TlsMaterial::new();
    let other = TlsMaterial::new();
    let etcd = EtcdServer::start_with_tls(&tls);
    let redis = RedisServer::start_with_tls(&tls, ClientAuth::Required);

    let none = config(&etcd, &redis, &tls, None);
    let e = etcd_error(&none).await;
    assert!(e.contains("check etcd.cert_file and etcd.key_file"), "{e}");
    let e = format!("{:#}", connect_redis(&none).await.unwrap_err());
    assert!(e.contains("redis.cert_file"), "{e}");

    let foreign = config(&etcd, &redis, &tls, Some(&other));
    let e = etcd_error(&foreign).await;
    assert!(e.contains("check etcd.cert_file and etcd.key_file"), "{e}");
    let e = format!("{:#}", connect_redis(&foreign).await.unwrap_err());
    assert!(
        e.contains("check redis.cert_file and redis.key_file"),
        "{e}"
    );
}

#[tokio::test]
async fn the_clock_check_reads_tls_etcds_clock_and_fails_loudly_without_its_ca() {
    let tls = TlsMaterial::new();
    let other = TlsMaterial::new();
    let etcd = EtcdServer::start_with_tls(&tls);
    let redis = RedisServer::start_with_tls(&tls, ClientAuth::Optional);

    // The same CA and client certificate as the etcd client; etcd runs on this host, so
    // the clocks agree within the check's precision.
    let c = config(&etcd, &redis, &tls, Some(&tls));
    let check =
        ClockCheck::new(&[etcd.endpoint()], etcd_tls(&c.cluster()).unwrap().as_ref()).unwrap();
    let skew = check.skew().await.unwrap();
    assert!(skew.abs() <= 1.5, "{skew}");

    let wrong_ca = config(&etcd, &redis, &other, Some(&tls));
    let check = ClockCheck::new(
        &[etcd.endpoint()],
        etcd_tls(&wrong_ca.cluster()).unwrap().as_ref(),
    )
    .unwrap();
    let e = format!("{:#}", check.skew().await.unwrap_err());
    assert!(e.contains("check etcd.ca_file"), "{e}");

    // etcd's --client-cert-auth covers its HTTP endpoints too.
    let no_cert = config(&etcd, &redis, &tls, None);
    let check = ClockCheck::new(
        &[etcd.endpoint()],
        etcd_tls(&no_cert.cluster()).unwrap().as_ref(),
    )
    .unwrap();
    let e = format!("{:#}", check.skew().await.unwrap_err());
    assert!(e.contains("check etcd.cert_file and etcd.key_file"), "{e}");
}

/// The replica's path to Redis, on the host's clock.
async fn connect_redis(c: &Config) -> anyhow::Result<ax_queue::Queue> {
    Ok(connect_queue(
        &c.cluster(),
        std::sync::Arc::new(ax_scheduler_core::SystemClock),
    )
    .await?)
}
