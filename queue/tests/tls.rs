//! The queue over `rediss://`, against a private Redis with TLS that the tests start
//! themselves (and fail without: `redis-server` is required, never skipped).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ax_queue::{ClientIdentity, ExecutionMessage, Queue, QueueConfig, QueueError, RedisTls};
use ax_scheduler_core::UtcMillis;
use ax_testkit::{unique_name, ClientAuth, RedisServer, TlsMaterial};

fn config(tls: Option<RedisTls>) -> QueueConfig {
    QueueConfig {
        prefix: unique_name("axq-tls"),
        // The refused handshakes below should fail in seconds, not after the full retries.
        connect_timeout: Duration::from_secs(2),
        reconnect_retries: 1,
        tls,
        ..QueueConfig::default()
    }
}

fn mutual(ca_of: &TlsMaterial, identity_of: &TlsMaterial) -> RedisTls {
    RedisTls {
        ca: Some(ca_of.ca_pem()),
        client: Some(ClientIdentity {
            cert: identity_of.client_cert_pem(),
            key: identity_of.client_key_pem(),
        }),
    }
}

#[tokio::test]
async fn enqueue_take_and_ack_over_mutual_tls() {
    let tls = TlsMaterial::new();
    let redis = RedisServer::start_with_tls(&tls, ClientAuth::Required);
    let q = Queue::connect(&redis.url(), config(Some(mutual(&tls, &tls))))
        .await
        .unwrap();

    let now = UtcMillis::now();
    let spec = ax_testkit::spec("t", "default", "log");
    let msgs: Vec<_> = (0..3)
        .map(|i| ExecutionMessage::for_fire(&spec, UtcMillis(i), now, 1))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    // A consumer has a connection of its own: it must carry the same TLS settings.
    let mut consumer = q
        .consumer("default", "w", Duration::from_millis(200), now)
        .await
        .unwrap();
    let taken = consumer.take(3).await.unwrap();
    assert_eq!(taken.len(), 3);
    assert_eq!(q.ack_many(&taken).await.unwrap(), [true, true, true]);
    let stats = q.stats("default", UtcMillis::now()).await.unwrap();
    assert_eq!((stats.ready, stats.unsettled), (0, 0));
}

#[tokio::test]
async fn a_server_that_asks_for_a_client_certificate_refuses_a_client_without_one() {
    let tls = TlsMaterial::new();
    let redis = RedisServer::start_with_tls(&tls, ClientAuth::Required);
    let server_only = RedisTls {
        ca: Some(tls.ca_pem()),
        client: None,
    };
    let e = Queue::connect(&redis.url(), config(Some(server_only.clone())))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("CertificateRequired"), "{e}");

    // Where the certificate is optional, the CA alone is enough.
    let optional = RedisServer::start_with_tls(&tls, ClientAuth::Optional);
    Queue::connect(&optional.url(), config(Some(server_only)))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused() {
    let tls = TlsMaterial::new();
    let other = TlsMaterial::new();
    let redis = RedisServer::start_with_tls(&tls, ClientAuth::Optional);
    let e = Queue::connect(&redis.url(), config(Some(mutual(&other, &tls))))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    // Nor do the system roots trust a private CA.
    let e = Queue::connect(&redis.url(), config(None))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
}

#[tokio::test]
async fn tls_settings_need_a_rediss_url_and_valid_pem() {
    let tls = TlsMaterial::new();
    let e = Queue::connect("redis://127.0.0.1:1", config(Some(mutual(&tls, &tls))))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, QueueError::InvalidConfig(m) if m.contains("rediss://")),
        "{e}"
    );
    let garbage = RedisTls {
        ca: Some(b"not a certificate".to_vec()),
        client: Some(ClientIdentity {
            cert: tls.client_cert_pem(),
            key: b"not a key".to_vec(),
        }),
    };
    let e = Queue::connect("rediss://127.0.0.1:1", config(Some(garbage)))
        .await
        .unwrap_err();
    assert!(matches!(&e, QueueError::InvalidConfig(_)), "{e}");
}
