//! Where the `http` handler finds the values of a task's `${secret:NAME}` references.
//!
//! The operator gives a directory (`worker.secrets_dir`) holding one file per secret, named
//! by the secret, as a Kubernetes Secret mounted as a volume is; the file's content less one
//! trailing newline is the value. Files are read at each attempt, so a rotated Secret is
//! used without a restart, and values live only in the attempt's memory: no error, output
//! or log line of the handler holds one (the pool redacts what a server echoes). A secret
//! that cannot be read fails the attempt permanently, naming the secret and the directory.

use std::path::PathBuf;
use std::sync::Arc;

use ax_scheduler_core::secret_ref;

use crate::handler::HandlerError;

/// Largest secret file read: a secret is a token or a URL, not a document.
pub const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// The source of secret values: a directory, or none (every reference then fails).
#[derive(Clone, Debug, Default)]
pub struct SecretSource {
    dir: Option<Arc<PathBuf>>,
}

impl SecretSource {
    /// Secrets read from files in `dir`.
    pub fn dir(dir: impl Into<PathBuf>) -> Self {
        SecretSource {
            dir: Some(Arc::new(dir.into())),
        }
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
