//! The process-wide `tracing` subscriber: the binary installs it once, libraries only emit.
//!
//! Level filter from `AX_LOG` (env-filter syntax, default `info`); format from
//! `--log-format`, else `AX_LOG_FORMAT`, else text. The server logs to stdout (the
//! deployment contract); one-shot commands log to stderr at `warn` by default so their
//! stdout stays machine-readable.

use std::collections::HashMap;
use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::EnvFilter;

/// Environment variable holding the level filter.
pub const LOG_ENV_VAR: &str = "AX_LOG";
/// Environment variable holding the format.
pub const LOG_FORMAT_ENV_VAR: &str = "AX_LOG_FORMAT";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line, fields at the top level.
    Json,
}

/// Where log lines go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogTarget {
    /// Standard output (the server).
    Stdout,
    /// Standard error (one-shot commands).
    Stderr,
}

/// A resolved logging setup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSettings {
    /// Format.
    pub format: LogFormat,
    /// env-filter directives, such as `info` or `ax=debug,info`.
    pub filter: String,
    /// Destination.
    pub target: LogTarget,
}

impl LogSettings {
    /// Resolves the settings: `flag` over `AX_LOG_FORMAT`, `AX_LOG` over `default_filter`.
    pub fn resolve(
        flag: Option<LogFormat>,
        env: &HashMap<String, String>,
        default_filter: &str,
        target: LogTarget,
    ) -> Result<LogSettings, String> {
        let format = match flag {
            Some(f) => f,
            None => match env.get(LOG_FORMAT_ENV_VAR).map(|v| v.trim()) {
                None | Some("") => LogFormat::default(),
                Some(v) => LogFormat::from_str(v, true).map_err(|_| {
                    format!(
                        "environment variable {LOG_FORMAT_ENV_VAR}: `{v}` is not `json` or `text`"
                    )
                })?,
            },
        };
        let filter = env
            .get(LOG_ENV_VAR)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .unwrap_or(default_filter)
            .to_owned();
        // Checked here so that a typo is a usage error and not a silently default level.
        EnvFilter::try_new(&filter)
            .map_err(|e| format!("environment variable {LOG_ENV_VAR}: `{filter}`: {e}"))?;
        Ok(LogSettings {
            format,
            filter,
            target,
        })
    }
}

/// Installs the global subscriber. Fails if one is already installed.
pub fn init(settings: &LogSettings) -> Result<LogGuard, String> {
    let filter = EnvFilter::try_new(&settings.filter).map_err(|e| e.to_string())?;
    // The server writes through a dedicated thread: at thousands of executions a second,
    // a blocking write to stdout under its lock would stall the runtime's threads on the
    // fire path. Not lossy: when the buffer is full, logging waits rather than dropping
    // lines. The thread writes what has piled up in one system call, not one per line:
    // it flushes whenever it has written everything sent to it, so a line waits for no
    // others. One-shot commands write to stderr directly.
    let (writer, guard) = match settings.target {
        LogTarget::Stdout => {
            let (w, g) = tracing_appender::non_blocking::NonBlockingBuilder::default()
                .lossy(false)
                .finish(std::io::BufWriter::with_capacity(
                    64 * 1024,
                    std::io::stdout(),
                ));
            (BoxMakeWriter::new(w), Some(g))
        }
        LogTarget::Stderr => (BoxMakeWriter::new(std::io::stderr), None),
    };
    let ansi = match settings.target {
        LogTarget::Stdout => std::io::stdout().is_terminal(),
        LogTarget::Stderr => std::io::stderr().is_terminal(),
    };
    let result = match settings.format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(writer)
            .try_init(),
        // json-subscriber keeps each span's fields as JSON values, where tracing-subscriber's
        // JSON format parses them again for every line: a tenth of a busy replica's CPU.
        LogFormat::Json => json_subscriber::fmt()
            .with_env_filter(filter)
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(writer)
            .try_init(),
    };
    result.map_err(|e| e.to_string())?;
    Ok(LogGuard { _guard: guard })
}

/// Keeps the log writer thread alive; dropping it flushes what is buffered. Hold it until
/// the process exits.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    _guard: Option<tracing_appender::non_blocking::WorkerGuard>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn flag_beats_env_beats_default() {
        let e = env(&[("AX_LOG_FORMAT", "json"), ("AX_LOG", "debug")]);
        let s = LogSettings::resolve(None, &e, "info", LogTarget::Stdout).unwrap();
        assert_eq!((s.format, s.filter.as_str()), (LogFormat::Json, "debug"));
        let s = LogSettings::resolve(Some(LogFormat::Text), &e, "info", LogTarget::Stdout).unwrap();
        assert_eq!(s.format, LogFormat::Text);
        let s = LogSettings::resolve(None, &env(&[]), "warn", LogTarget::Stderr).unwrap();
        assert_eq!((s.format, s.filter.as_str()), (LogFormat::Text, "warn"));
    }

    #[test]
    fn bad_values_are_errors_naming_the_variable() {
        let err = LogSettings::resolve(
            None,
            &env(&[("AX_LOG_FORMAT", "xml")]),
            "info",
            LogTarget::Stdout,
        )
        .unwrap_err();
        assert!(err.contains("AX_LOG_FORMAT"), "{err}");
        let err = LogSettings::resolve(
            None,
            &env(&[("AX_LOG", "info,=[")]),
            "info",
            LogTarget::Stdout,
        )
        .unwrap_err();
        assert!(err.contains("AX_LOG"), "{err}");
    }
}
