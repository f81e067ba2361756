//! Environment variables a task may never set, whatever `allow_env` says.
//!
//! A command runs a program the operator chose; the variables below make the dynamic
//! loader, a shell or an interpreter load or run code of the setter's choosing before that
//! program does anything (`LD_PRELOAD`, `BASH_ENV`, `PYTHONSTARTUP`, `NODE_OPTIONS`,
//! `GIT_SSH_COMMAND`...), change which program a bare name runs (`PATH`), which
//! configuration and certificates it trusts (`HOME`, `XDG_*`, `OPENSSL_CONF`,
//! `SSL_CERT_FILE`) or where its traffic goes (`*_PROXY`). Letting a task
//! set one turns "run the operator's command with these values" into "run anything", so a
//! configuration that lists one in `allow_env` is refused when it is loaded rather than
//! trusted. The operator's own `env` may still set them: that is the operator's choice, not
//! the task's. Names are compared without regard to case, so a spelling a loader ignores
//! today is not a way around the list tomorrow.

/// Names refused in `allow_env`, exactly (besides the families of [`DENIED_PREFIXES`]).
const DENIED_NAMES: &[&str] = &[
    "PATH",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "PS4",
    "PROMPT_COMMAND",
    "CDPATH",
    "GLOBIGNORE",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "LUA_INIT",
    "LUA_PATH",
    "LUA_CPATH",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "TCLLIBPATH",
    "GCONV_PATH",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "RESOLV_HOST_CONF",
    "NLSPATH",
    "TMPDIR",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "HOME",
    "CURL_HOME",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "WGETRC",
    "GNUPGHOME",
    "NETRC",
];

/// Name prefixes refused in `allow_env`: families of loader and tool variables.
const DENIED_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "GIT_",
    "BASH_FUNC_",
    "PYTHON",
    "NODE_",
    "NPM_CONFIG_",
    "PERL",
    "RUBY",
    "GEM_",
    "BUNDLE_",
    "JAVA_",
    "GLIBC_",
    "MALLOC_",
    "LUA_INIT",
    "OPENSSL_",
    "SSL_",
    "XDG_",
];

/// Name suffixes refused in `allow_env`: where a program sends its traffic (`HTTP_PROXY`,
/// `ALL_PROXY`, `NO_PROXY`...).
const DENIED_SUFFIXES: &[&str] = &["_PROXY"];

/// Why a task may not set `name`, or `None` when it may.
pub(crate) fn denied(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    if DENIED_NAMES.contains(&upper.as_str()) {
        return Some(format!(
            "`{name}` changes what a loader, shell or interpreter runs and may not be set \
             by a task; set a fixed value in `env` instead if the command needs it"
        ));
    }
    if let Some(s) = DENIED_SUFFIXES.iter().find(|s| upper.ends_with(*s)) {
        return Some(format!(
            "`{name}` is a *{s} variable, which sends the command's traffic elsewhere, and \
             may not be set by a task; set a fixed value in `env` instead if the command \
             needs it"
        ));
    }
    DENIED_PREFIXES
        .iter()
        .find(|p| upper.starts_with(*p))
        .map(|p| {
            format!(
                "`{name}` is a {p}* variable, which changes what a loader, shell or \
                 interpreter runs, and may not be set by a task; set a fixed value in `env` \
                 instead if the command needs it"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::denied;

    #[test]
    fn loader_and_interpreter_variables_are_denied() {
        for name in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "ld_audit",
            "DYLD_INSERT_LIBRARIES",
            "PATH",
            "Path",
            "BASH_ENV",
            "ENV",
            "SHELLOPTS",
            "IFS",
            "PS4",
            "PYTHONPATH",
            "PYTHONHOME",
            "PYTHONSTARTUP",
            "NODE_OPTIONS",
            "NODE_PATH",
            "PERL5LIB",
            "PERL5OPT",
            "RUBYOPT",
            "RUBYLIB",
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "GIT_SSH_COMMAND",
            "GIT_CONFIG_PARAMETERS",
            "BASH_FUNC_x%%",
            "LUA_INIT_5_4",
            "HTTP_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "SSL_CERT_FILE",
            "CURL_CA_BUNDLE",
            "REQUESTS_CA_BUNDLE",
            "OPENSSL_CONF",
            "HOME",
            "XDG_CONFIG_HOME",
        ] {
            assert!(denied(name).is_some(), "{name} must be denied");
        }
        for name in ["TARGET", "BACKUP_DAY", "REGION", "LANGUAGE_CODE", "MY_PATH"] {
            assert_eq!(denied(name), None, "{name} must be allowed");
        }
        let e = denied("LD_PRELOAD").unwrap();
        assert!(e.contains("`LD_PRELOAD` is a LD_* variable"), "{e}");
    }
}
