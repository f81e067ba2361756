//! Loading: the file layer, the flag layer, and the order in which all layers apply.
//!
//! Everything from outside the process comes in through [`LoadOptions`], gathered by `main`,
//! so that tests assemble a configuration from plain values. Settings that no longer exist
//! are named with what to do instead rather than reported as unknown keys.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{Config, ConfigError, ReplicaRole, CONFIG_ENV_VAR};

/// Overrides from command-line flags, the top layer. `None` leaves a key as the lower layers
/// set it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigOverrides {
    /// `--etcd-endpoints`.
    pub etcd_endpoints: Option<Vec<String>>,
    /// `--etcd-prefix`.
    pub etcd_prefix: Option<String>,
    /// `--redis-url`.
    pub redis_url: Option<String>,
    /// `--instance-id`.
    pub instance_id: Option<String>,
    /// `--roles`.
    pub roles: Option<Vec<ReplicaRole>>,
    /// `--worker-concurrency`.
    pub worker_concurrency: Option<usize>,
    /// `--worker-queues`.
    pub worker_queues: Option<Vec<String>>,
    /// `--http-listen`.
    pub http_listen: Option<String>,
}

/// Everything [`Config::load`] needs, gathered at the edge of the process.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions<'a> {
    /// `--config`, if given (the file must exist).
    pub config_flag: Option<&'a Path>,
    /// The process environment (only `AX_*` variables are read).
    pub env: &'a HashMap<String, String>,
    /// Flag overrides.
    pub overrides: &'a ConfigOverrides,
    /// File read when neither `--config` nor `AX_CONFIG` names one, if it exists
    /// (the binary passes [`DEFAULT_CONFIG_PATH`](super::DEFAULT_CONFIG_PATH)).
    pub default_path: Option<&'a Path>,
    /// The host name, used as instance id when none is configured.
    pub hostname: Option<&'a str>,
}

/// Settings that no longer exist, with what to do instead: `(key, variable, why)`. Left
/// silently ignored, a removed setting would change what a replica does without a word.
const REMOVED_SETTINGS: &[(&str, &str, &str)] = &[(
    "instance.namespaces",
    "AX_NAMESPACES",
    "removed: it filtered what the one leader fires, so a replica scoped to some namespaces \
     that won the election never fired the others (and dropped their run-now requests); every \
     leader now fires every namespace. Delete the setting; to keep teams' tasks apart, give \
     each installation its own `etcd.prefix` and `redis.key_prefix`",
)];

/// The first removed setting `text` (a config file) sets, as an error message.
fn removed_setting_in(text: &str) -> Option<String> {
    let table: toml::Table = text.parse().ok()?;
    REMOVED_SETTINGS.iter().find_map(|(key, _, why)| {
        let mut parts = key.split('.');
        let section = table.get(parts.next()?)?.as_table()?;
        section
            .contains_key(parts.next()?)
            .then(|| format!("`{key}` was {why}"))
    })
}

impl Config {
    /// Assembles and validates the effective configuration: defaults, then the file (from
    /// `--config`, `AX_CONFIG` or the default path), then the environment, then flags.
    pub fn load(opts: LoadOptions<'_>) -> Result<Config, ConfigError> {
        let mut config = match config_file_path(opts.config_flag, opts.env, opts.default_path) {
            Some(path) => Config::from_file(&path)?,
            None => Config::default(),
        };
        for (key, var, why) in REMOVED_SETTINGS {
            if opts.env.get(*var).is_some_and(|v| !v.trim().is_empty()) {
                return Err(ConfigError::Env {
                    var: (*var).to_owned(),
                    message: format!("sets `{key}`, which was {why}"),
                });
            }
        }
        config.apply_env(opts.env)?;
        config.apply_overrides(opts.overrides);
        config.read_secret_files()?;
        // A token pasted or kept in a Secret often ends in a newline no client sends.
        config.http.api_token = config.http.api_token.trim().to_owned();
        if config.instance.id.is_empty() {
            if let Some(host) = opts.hostname.map(str::trim).filter(|h| !h.is_empty()) {
                config.instance.id = host.to_owned();
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a TOML file (no environment, no validation).
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse_toml(&text, path)
    }

    /// Parses TOML text (no environment, no validation). Unknown keys are errors.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        Config::parse_toml(text, Path::new("<string>"))
    }

    fn parse_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            // A removed setting is an unknown key to the parser; say what became of it.
            message: removed_setting_in(text)
                .unwrap_or_else(|| e.to_string().trim_end().to_owned()),
        })
    }

    /// Applies flag overrides.
    pub fn apply_overrides(&mut self, o: &ConfigOverrides) {
        if let Some(v) = &o.etcd_endpoints {
            self.etcd.endpoints = v.clone();
        }
        if let Some(v) = &o.etcd_prefix {
            self.etcd.prefix = v.clone();
        }
        if let Some(v) = &o.redis_url {
            self.redis.url = v.clone();
        }
        if let Some(v) = &o.instance_id {
            self.instance.id = v.clone();
        }
        if let Some(v) = &o.roles {
            self.instance.roles = v.clone();
        }
        if let Some(v) = o.worker_concurrency {
            self.worker.concurrency = v;
        }
        if let Some(v) = &o.worker_queues {
            self.worker.queues = v.clone();
        }
        if let Some(v) = &o.http_listen {
            self.http.listen = v.clone();
        }
    }
}

/// The file to read: `--config`, else `AX_CONFIG`, else `default_path` if it exists.
pub fn config_file_path(
    flag: Option<&Path>,
    env: &HashMap<String, String>,
    default_path: Option<&Path>,
) -> Option<PathBuf> {
    if let Some(path) = flag {
        return Some(path.to_owned());
    }
    if let Some(path) = env.get(CONFIG_ENV_VAR).filter(|v| !v.trim().is_empty()) {
        return Some(PathBuf::from(path));
    }
    default_path.filter(|p| p.exists()).map(Path::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_setting_is_refused_with_what_to_do_instead() {
        let e = Config::from_toml_str("[instance]\nnamespaces = [\"billing\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`instance.namespaces` was removed"), "{e}");
        assert!(e.contains("etcd.prefix"), "{e}");
        // Other unknown keys keep the parser's message.
        let e = Config::from_toml_str("[instance]\nnamespace = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `namespace`"), "{e}");

        let env: HashMap<String, String> = [("AX_NAMESPACES".to_owned(), "billing".to_owned())]
            .into_iter()
            .collect();
        let e = Config::load(LoadOptions {
            config_flag: None,
            env: &env,
            overrides: &ConfigOverrides::default(),
            default_path: None,
            hostname: Some("h"),
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("AX_NAMESPACES") && e.contains("`instance.namespaces`"),
            "{e}"
        );
    }

    #[test]
    fn config_path_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let default = dir.path().join("ax.toml");
        let mut env = HashMap::new();
        assert_eq!(config_file_path(None, &env, Some(&default)), None);
        std::fs::write(&default, "").unwrap();
        assert_eq!(
            config_file_path(None, &env, Some(&default)),
            Some(default.clone())
        );
        env.insert(CONFIG_ENV_VAR.to_owned(), "/from/env.toml".to_owned());
        assert_eq!(
            config_file_path(None, &env, Some(&default)),
            Some(PathBuf::from("/from/env.toml"))
        );
        assert_eq!(
            config_file_path(Some(Path::new("/flag.toml")), &env, Some(&default)),
            Some(PathBuf::from("/flag.toml"))
        );
    }
}
