//! Secret masking of a configuration.
//!
//! Secrets are replaced by [`MASK`] only when set, so that a printed configuration still shows
//! which secrets are configured.
//! URLs are read with the WHATWG parser the clients use (see
//! [`ax_scheduler_core::redact`]); a malformed URL is left as it is for validation to report.

use ax_scheduler_core::redact::mask_url;

use super::{Config, MASK};

pub(crate) use ax_scheduler_core::redact::mask_url_password;

impl Config {
    /// A copy with every secret replaced by `***`: etcd and Redis passwords, the password in
    /// the Redis and webhook URLs, the API token, the Feishu webhook (it carries the bot
    /// token), the Feishu secret, and the values of the variables commands are given
    /// (`worker.commands.<name>.env`, where credentials go).
    pub fn masked(&self) -> Config {
        let mut c = self.clone();
        mask(&mut c.etcd.password);
        mask(&mut c.redis.password);
        c.redis.url = mask_url_password(&c.redis.url);
        for node in &mut c.redis.cluster_nodes {
            *node = mask_url_password(node);
        }
        mask(&mut c.http.api_token);
        mask(&mut c.alerts.feishu_webhook);
        mask(&mut c.alerts.feishu_secret);
        // A webhook URL may carry its token in the query as well as in the user info.
        c.alerts.webhook_url = mask_url(&c.alerts.webhook_url);
        for command in c.worker.commands.values_mut() {
            command.env.values_mut().for_each(mask);
        }
        c
    }
}

fn mask(secret: &mut String) {
    if !secret.is_empty() {
        *secret = MASK.to_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_secret_is_masked_and_unset_ones_stay_empty() {
        let mut c = Config::default();
        let shown = c.masked().to_masked_toml();
        assert!(!shown.contains(MASK), "{shown}");

        c.etcd.password = "etcd-pw".into();
        c.redis.password = "redis-pw".into();
        c.redis.url = "redis://:url-pw@h:6379/0".into();
        c.redis.cluster_nodes = vec!["redis://:node-pw@n1:7000".into()];
        c.http.api_token = "api-token".into();
        c.alerts.feishu_webhook = "https://open.feishu.cn/hook/feishu-token".into();
        c.alerts.feishu_secret = "feishu-secret".into();
        c.alerts.webhook_url = "https://u:hook-pw@example.com/hook?token=hook-token".into();
        let shown = c.to_masked_toml();
        for secret in [
            "etcd-pw",
            "redis-pw",
            "url-pw",
            "node-pw",
            "api-token",
            "feishu-token",
            "feishu-secret",
            "hook-pw",
            "hook-token",
        ] {
            assert!(!shown.contains(secret), "{secret} shown in:\n{shown}");
        }
        assert_eq!(shown.matches(MASK).count(), 9, "{shown}");
    }
}
