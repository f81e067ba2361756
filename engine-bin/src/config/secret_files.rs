//! Secrets read from files: the `*_file` variant of every secret setting.
//!
//! A secret in an environment variable is readable by whatever can read the process's
//! environment (`/proc/<pid>/environ`, a crash report, `kubectl describe` of a pod that sets
//! it inline) and is inherited by default by every child. A file mounted from a Kubernetes
//! Secret is read once, here, and lives only in ax's memory. So each secret setting has a
//! `*_file` twin naming a file whose content (white space around it dropped: Secrets and
//! editors add a trailing newline) becomes the setting's value. Setting both a secret and its
//! file is refused rather than one silently winning. Files are read after the environment and
//! flags are applied, before validation, so the value read is checked like any other.

use ax_control::config::{
    cluster_secret_files, read_secret_files, SecretFile, SecretFileError, CLUSTER_SECRET_FILE_KEYS,
};

use super::{Config, ConfigError};

/// Each secret with a file twin: (the file key, the secret's key); the cluster's first.
pub const SECRET_FILE_KEYS: [(&str, &str); 7] = {
    let [etcd_password, redis_url, redis_password] = CLUSTER_SECRET_FILE_KEYS;
    [
        etcd_password,
        redis_url,
        redis_password,
        ("http.api_token_file", "http.api_token"),
        ("alerts.feishu_webhook_file", "alerts.feishu_webhook"),
        ("alerts.feishu_secret_file", "alerts.feishu_secret"),
        ("alerts.webhook_url_file", "alerts.webhook_url"),
    ]
};

impl Config {
    /// Reads every secret a `*_file` key names into its setting, the cluster's as a client
    /// reads them (see [`cluster_secret_files`]) and this replica's own.
    pub(crate) fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        let [.., token, feishu, feishu_secret, webhook] = SECRET_FILE_KEYS;
        let (http, alerts) = (&mut self.http, &mut self.alerts);
        let own = [
            SecretFile::new(token, &mut http.api_token_file, &mut http.api_token),
            SecretFile::new(
                feishu,
                &mut alerts.feishu_webhook_file,
                &mut alerts.feishu_webhook,
            ),
            SecretFile::new(
                feishu_secret,
                &mut alerts.feishu_secret_file,
                &mut alerts.feishu_secret,
            ),
            SecretFile::new(
                webhook,
                &mut alerts.webhook_url_file,
                &mut alerts.webhook_url,
            ),
        ];
        let cluster = cluster_secret_files(&mut self.etcd, &mut self.redis);
        read_secret_files(cluster.into_iter().chain(own)).map_err(|e| match e {
            SecretFileError::Unreadable { key, path, source } => {
                ConfigError::SecretFile { key, path, source }
            }
            SecretFileError::Invalid(problem) => ConfigError::Invalid(vec![problem]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_secret_is_read_from_its_file_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let mut c = Config::default();
        c.etcd.password_file = write("etcd", "etcd-pw\n");
        c.redis.url_file = write("url", "redis://r.example:6379/1\n");
        c.redis.password_file = write("redis", " redis-pw ");
        c.http.api_token_file = write("token", "0123456789abcdef0123456789abcdef\n");
        c.alerts.feishu_webhook_file = write("feishu", "https://open.feishu.cn/hook/x\n");
        c.alerts.feishu_secret_file = write("fsecret", "fs\n");
        c.alerts.webhook_url_file = write("hook", "https://hooks.example/t\n");
        c.read_secret_files().unwrap();
        assert_eq!(c.etcd.password, "etcd-pw");
        assert_eq!(c.redis.url, "redis://r.example:6379/1");
        assert_eq!(c.redis.password, "redis-pw");
        assert_eq!(c.http.api_token, "0123456789abcdef0123456789abcdef");
        assert_eq!(c.alerts.feishu_webhook, "https://open.feishu.cn/hook/x");
        assert_eq!(c.alerts.feishu_secret, "fs");
        assert_eq!(c.alerts.webhook_url, "https://hooks.example/t");
        assert_eq!(SECRET_FILE_KEYS.len(), 7);

        let mut both = Config::default();
        both.http.api_token = "inline".into();
        both.http.api_token_file = write("t2", "x");
        let e = both.read_secret_files().unwrap_err().to_string();
        assert!(
            e.contains("http.api_token_file: is set together with http.api_token"),
            "{e}"
        );

        let mut missing = Config::default();
        missing.etcd.password_file = dir.path().join("nope").display().to_string();
        let e = missing.read_secret_files().unwrap_err().to_string();
        assert!(e.starts_with("etcd.password_file: cannot read "), "{e}");
    }
}
