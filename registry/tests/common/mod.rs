//! Helpers shared by the registry's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ax_registry::{Registry, RegistryConfig};
use ax_scheduler_core::TaskSpec;
use etcd_client::Client;

pub(crate) async fn registry_at(endpoint: &str, label: &str) -> (Registry, Client) {
    let client = Client::connect([endpoint], None).await.unwrap();
    let config = RegistryConfig {
        prefix: format!("/{}", ax_testkit::unique_name(label)),
        request_timeout: Duration::from_secs(2),
        ..RegistryConfig::default()
    };
    (Registry::new(client.clone(), config), client)
}

pub(crate) async fn registry(label: &str) -> (Registry, Client) {
    registry_at(&ax_testkit::etcd_endpoint(), label).await
}

/// A valid spec JSON with a version and a marker in the payload.
pub(crate) fn spec_json(version: u64, marker: i64) -> String {
    format!(
        r#"{{"handler":"log","schedule":{{"every":"10s"}},"version":{version},"payload":{{"m":{marker}}}}}"#
    )
}

pub(crate) fn spec(ns: &str, id: &str, version: u64, marker: i64) -> TaskSpec {
    TaskSpec::from_json(spec_json(version, marker).as_bytes(), ns, id).unwrap()
}
