//! The few facts read from the outside world at start: environment and host name.
//!
//! Read once in `main` and passed down as plain values, so that everything below is a function
//! of its inputs and tests never depend on the machine they run on.

use std::collections::HashMap;

/// What the process learned from its surroundings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Edge {
    /// Environment variables (those that are valid UTF-8).
    pub env: HashMap<String, String>,
    /// Host name (the pod name under Kubernetes), if it could be read.
    pub hostname: Option<String>,
}

impl Edge {
    /// Reads the process environment and the host name.
    pub fn from_process() -> Edge {
        let env: HashMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let hostname = hostname(&env, |path| std::fs::read_to_string(path).ok());
        Edge { env, hostname }
    }
}

/// The host name: `HOSTNAME` if set (Kubernetes sets it to the pod name), else the kernel's
/// (`/proc/sys/kernel/hostname`), else `/etc/hostname`.
pub fn hostname(
    env: &HashMap<String, String>,
    read: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let from_env = env.get("HOSTNAME").cloned();
    from_env
        .into_iter()
        .chain(read("/proc/sys/kernel/hostname"))
        .chain(read("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .find(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_sources_in_order() {
        let mut env = HashMap::new();
        let files = |path: &str| match path {
            "/proc/sys/kernel/hostname" => Some("kernel-name\n".to_owned()),
            _ => Some("etc-name\n".to_owned()),
        };
        assert_eq!(hostname(&env, files).as_deref(), Some("kernel-name"));
        assert_eq!(hostname(&env, |_| None), None);
        assert_eq!(
            hostname(&env, |p: &str| p
                .starts_with("/etc")
                .then(|| "etc-name".to_owned()))
            .as_deref(),
            Some("etc-name")
        );
        env.insert("HOSTNAME".to_owned(), "ax-0".to_owned());
        assert_eq!(hostname(&env, files).as_deref(), Some("ax-0"));
        env.insert("HOSTNAME".to_owned(), " ".to_owned());
        assert_eq!(hostname(&env, files).as_deref(), Some("kernel-name"));
    }
}
