//! What every CLI command shares: the backend connection (etcd now, Redis on first use),
//! an API error as the CLI's exit code, and stdout.

use std::io::Write;

use crate::cli::CliError;
use crate::config::Config;
use ax_control::api::ApiError;
use ax_control::backend::Backend;

/// Connects the backend (etcd now, Redis on first use); failing is exit 1.
pub(crate) async fn backend(config: &Config) -> Result<Backend, CliError> {
    Ok(Backend::connect_lazy(&config.cluster())
        .await
        .map_err(anyhow::Error::from)?)
}

/// An API error as the CLI reports it (and its exit code).
pub(crate) fn api_error(e: ApiError) -> CliError {
    match e {
        ApiError::Invalid { errors, .. } => CliError::Invalid(errors),
        ApiError::BadCursor(m) => CliError::Invalid(vec![m]),
        ApiError::NotFound(m) => CliError::NotFound(m),
        ApiError::Conflict(m) => CliError::Conflict(m),
        ApiError::Limit { message, .. } => CliError::Invalid(vec![message]),
        ApiError::Unauthorized(m)
        | ApiError::Forbidden(m)
        | ApiError::Closed(m)
        | ApiError::CrossOrigin(m)
        | ApiError::UnknownHost(m)
        | ApiError::UnsupportedMediaType(m)
        | ApiError::Unavailable(m)
        | ApiError::Internal(m) => CliError::Failed(anyhow::anyhow!(m)),
    }
}

/// Writes `text` to stdout; a closed stdout is a failure (exit 1).
pub(crate) fn print_stdout(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Failed(anyhow::anyhow!("cannot write to stdout: {e}")))
}
