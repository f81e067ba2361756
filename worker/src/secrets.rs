//! Where the `http` handler finds the values of a task's `${secret:NAME}` references.
//!
//! The operator gives a directory (`worker.secrets_dir`) holding one file per secret, named
//! by the secret, as a Kubernetes Secret mounted as a volume is; the file's content less one
//! trailing newline is the value. Files are read at each attempt, so a rotated Secret is
//! used without a restart, and values live only in the attempt's memory: no error, output
//! or log line of the handler holds one (the pool redacts what a server echoes). A secret
//! that cannot be read fails the attempt permanently, naming the secret and the directory.
//!
//! Whoever writes a task chooses its URL, so a secret must not go wherever a task points:
//! each secret is bound to the hosts that may receive it ([`SecretRule`], the replica's
//! `worker.secret_destinations`), checked on the URL the request goes to, and a reference in
//! a URL's path or query (where a task author could carry the value to a host of the
//! secret's list under another name, or log it in an access log) needs the rule's
//! `in_url`. A secret with no rule goes nowhere. A refusal fails the attempt permanently and
//! names the rule, never the value.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ax_scheduler_core::secret_ref;

use crate::egress::HostPattern;
use crate::handler::HandlerError;

/// Where one secret may be sent (`worker.secret_destinations.<name>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRule {
    hosts: Vec<Destination>,
    in_url: bool,
}

/// A host a secret may go to: a name pattern (`api.example.com`, `*.example.com`) or an
/// address.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Destination {
    Name(HostPattern),
    Addr(IpAddr),
}

impl SecretRule {
    /// A rule letting the secret go to `hosts` (names, `*.suffix` patterns or addresses),
    /// and into a URL's path or query when `in_url`; the problem with an entry otherwise.
    pub fn new(hosts: &[String], in_url: bool) -> Result<Self, String> {
        if hosts.is_empty() {
            return Err("hosts is empty: name the hosts this secret may be sent to".into());
        }
        let hosts = hosts
            .iter()
            .map(|h| {
                let bare = h.trim().trim_matches(['[', ']']);
                match bare.parse::<IpAddr>() {
                    Ok(addr) => Ok(Destination::Addr(addr)),
                    Err(_) => h
                        .parse::<HostPattern>()
                        .map(Destination::Name)
                        .map_err(|e| e.to_string()),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SecretRule { hosts, in_url })
    }

    fn admits(&self, host: &str) -> bool {
        let bare = host.trim_matches(['[', ']']);
        self.hosts.iter().any(|d| match d {
            Destination::Name(p) => p.matches(host),
            Destination::Addr(a) => bare.parse::<IpAddr>().is_ok_and(|h| h == *a),
        })
    }

    fn shown_hosts(&self) -> String {
        self.hosts
            .iter()
            .map(|d| match d {
                Destination::Name(p) => p.to_string(),
                Destination::Addr(a) => a.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where a task places a secret reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The whole URL is the secret: the secret says where it goes.
    WholeUrl,
    /// Inside a URL (host, path or query) written around it.
    InUrl,
    /// In a header value.
    Header,
}

/// Largest secret file read: a secret is a token or a URL, not a document.
pub const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// The source of secret values: a directory, or none (every reference then fails).
#[derive(Clone, Debug, Default)]
pub struct SecretSource {
    dir: Option<Arc<PathBuf>>,
    rules: Arc<BTreeMap<String, SecretRule>>,
}

impl SecretSource {
    /// Secrets read from files in `dir`.
    pub fn dir(dir: impl Into<PathBuf>) -> Self {
        SecretSource {
            dir: Some(Arc::new(dir.into())),
            rules: Arc::default(),
        }
    }

    /// The same source, each secret bound to the destinations of its rule (by secret name);
    /// a secret without one is sent nowhere.
    pub fn with_rules(mut self, rules: BTreeMap<String, SecretRule>) -> Self {
        self.rules = Arc::new(rules);
        self
    }

    /// Refuses sending secret `name`, placed as `placement`, to `host`, unless its rule
    /// allows it. `host` is named in the refusal only when `show_host` (it may come from a
    /// secret itself).
    pub fn check_destination(
        &self,
        name: &str,
        placement: Placement,
        host: &str,
        show_host: bool,
    ) -> Result<(), HandlerError> {
        let Some(rule) = self.rules.get(name) else {
            return Err(HandlerError::Permanent(format!(
                "secret `{name}` has no destinations: a secret goes only to the hosts its rule \
                 names (worker.secret_destinations.{name}.hosts)"
            )));
        };
        if !rule.admits(host) {
            let to = if show_host {
                format!("`{host}`")
            } else {
                "the URL's host".to_owned()
            };
            return Err(HandlerError::Permanent(format!(
                "secret `{name}` may be sent to {} (worker.secret_destinations.{name}.hosts), \
                 not to {to}",
                rule.shown_hosts()
            )));
        }
        if placement == Placement::InUrl && !rule.in_url {
            return Err(HandlerError::Permanent(format!(
                "secret `{name}` may not be placed in a URL's host, path or query \
                 (worker.secret_destinations.{name}.in_url is false): put it in a header, or \
                 make the whole URL the secret"
            )));
        }
        Ok(())
    }

    /// No source: a task naming a secret fails, saying the worker has none.
    pub fn none() -> Self {
        SecretSource::default()
    }

    /// The value of secret `name`.
    pub async fn read(&self, name: &str) -> Result<String, HandlerError> {
        let Some(dir) = &self.dir else {
            return Err(HandlerError::Permanent(format!(
                "the task names secret `{name}`, but this worker has no secrets directory \
                 (set worker.secrets_dir)"
            )));
        };
        // Validation checked the name; a message written past it must not name a path.
        secret_ref::check_name(name).map_err(HandlerError::Permanent)?;
        let path = dir.join(name);
        let fail = |why: String| {
            HandlerError::Permanent(format!(
                "secret `{name}` cannot be read from the secrets directory {}: {why}",
                dir.display()
            ))
        };
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| fail(e.kind().to_string()))?;
        if !meta.is_file() {
            return Err(fail("not a file".into()));
        }
        if meta.len() > MAX_SECRET_BYTES {
            return Err(fail(format!(
                "{} bytes; at most {MAX_SECRET_BYTES} are read",
                meta.len()
            )));
        }
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| fail(e.kind().to_string()))?;
        let mut value = String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".into()))?;
        if value.ends_with('\n') {
            value.pop();
            if value.ends_with('\r') {
                value.pop();
            }
        }
        Ok(value)
    }

    /// `text` with its references resolved, and the values put in.
    pub async fn resolve(
        &self,
        text: &str,
        values: &mut Vec<String>,
    ) -> Result<String, HandlerError> {
        let mut out = String::with_capacity(text.len());
        for piece in secret_ref::pieces(text).map_err(HandlerError::Permanent)? {
            match piece {
                secret_ref::Piece::Text(t) => out.push_str(t),
                secret_ref::Piece::Secret(name) => {
                    let value = self.read(name).await?;
                    out.push_str(&value);
                    values.push(value);
                }
            }
        }
        Ok(out)
    }
}
