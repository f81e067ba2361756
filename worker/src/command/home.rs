//! A home directory of its own for each attempt of a command.
//!
//! Programs read configuration from `$HOME` (`.gitconfig`, `.ssh/config`, `.curlrc`, Python's
//! user site `.pth` files) and some of it runs code. A shared, world-writable `HOME` (`/tmp`)
//! lets any local user plant such files for the command's user. So each attempt gets a new
//! directory, created exclusively with a random name and mode 0700 (owned by the command's
//! user when it runs as another one), under the command's `working_dir` or else [`HOMES`],
//! and removed when the attempt ends. An operator who sets `HOME` in the command's `env`
//! keeps that one.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tempfile::TempDir;

use super::user::Identity;
use super::CommandConfig;

/// Where homes go for a command without a `working_dir`: the one writable directory of
/// ax's container (its root file system is read-only).
pub(crate) const HOMES: &str = "/tmp";

/// A new private home for one attempt of `cfg` as `identity`; `None` when the operator set
/// `HOME` in the command's `env`.
pub(crate) fn private_home(
    cfg: &CommandConfig,
    identity: &Identity,
) -> std::io::Result<Option<TempDir>> {
    if cfg.env.contains_key("HOME") {
        return Ok(None);
    }
    let base = cfg.working_dir.as_deref().unwrap_or(Path::new(HOMES));
    // A name no one can guess, made exclusively; then 0700 (the mode it is made with
    // follows the umask, and only its owner may write into it either way).
    let home = tempfile::Builder::new()
        .prefix(".ax-home-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(base)?;
    if identity.uid.is_some() || identity.gid.is_some() {
        std::os::unix::fs::chown(home.path(), identity.uid, identity.gid)?;
    }
    Ok(Some(home))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attempt_gets_a_new_private_home_unless_the_operator_set_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = CommandConfig::new("/bin/true");
        cfg.working_dir = Some(dir.path().to_path_buf());
        let me = Identity {
            uid: None,
            gid: None,
        };
        let a = private_home(&cfg, &me).unwrap().unwrap();
        let b = private_home(&cfg, &me).unwrap().unwrap();
        assert_ne!(a.path(), b.path());
        assert!(a.path().starts_with(dir.path()));
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        let kept = a.path().to_path_buf();
        drop(a);
        assert!(!kept.exists(), "removed when the attempt ends");
        cfg.env.insert("HOME".into(), "/var/lib/backup".into());
        assert!(private_home(&cfg, &me).unwrap().is_none());
    }
}
