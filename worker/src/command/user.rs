//! The user and group a command runs as, when its configuration names them.
//!
//! A command run as ax's own user can do whatever ax can: read its TLS keys and the files
//! its secrets come from, signal it, write where it writes. Naming another `user` (and
//! `group`) for a command gives it that identity's rights instead; ax must then be allowed
//! to switch (root, or `CAP_SETUID`/`CAP_SETGID`), else the command fails to start, for good.
//! The switch is std's (`CommandExt::uid`/`gid`, which also drops the supplementary groups
//! of a root parent) between fork and exec.
//!
//! Names are looked up in `/etc/passwd` and `/etc/group`, the files a container image
//! carries (no NSS: ax's image has no resolver for users), when the configuration is loaded:
//! a name that does not exist is refused there, not at the first execution. A number is taken
//! as an id as it is, since images often run ids no file lists.

use std::path::Path;

/// The ids a command runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The user id.
    pub(crate) uid: Option<u32>,
    /// The group id: the configured group, else the user's primary group.
    pub(crate) gid: Option<u32>,
}

const PASSWD: &str = "/etc/passwd";
const GROUP: &str = "/etc/group";

/// The ids of `user` and `group` (either may be absent); the error names the field
/// (`user` or `group`) and what is wrong.
pub(crate) fn resolve(
    user: Option<&str>,
    group: Option<&str>,
) -> Result<Identity, (&'static str, String)> {
    resolve_in(user, group, Path::new(PASSWD), Path::new(GROUP))
}

fn resolve_in(
    user: Option<&str>,
    group: Option<&str>,
    passwd: &Path,
    groups: &Path,
) -> Result<Identity, (&'static str, String)> {
    let mut id = Identity {
        uid: None,
        gid: None,
    };
    if let Some(user) = user {
        let entry = lookup(passwd, user).map_err(|e| ("user", e))?;
        match (entry, user.parse::<u32>()) {
            (Some((uid, gid)), _) => {
                id.uid = Some(uid);
                id.gid = Some(gid);
            }
            (None, Ok(uid)) => {
                id.uid = Some(uid);
                id.gid = Some(uid);
            }
            (None, Err(_)) => {
                return Err((
                    "user",
                    format!(
                        "no user `{user}` in {}: create it in the image, or give a numeric uid",
                        passwd.display()
                    ),
                ))
            }
        }
    }
    if let Some(group) = group {
        let entry = lookup(groups, group).map_err(|e| ("group", e))?;
        match (entry, group.parse::<u32>()) {
            (Some((gid, _)), _) | (None, Ok(gid)) => id.gid = Some(gid),
            (None, Err(_)) => {
                return Err((
                    "group",
                    format!(
                        "no group `{group}` in {}: create it in the image, or give a numeric gid",
                        groups.display()
                    ),
                ))
            }
        }
    }
    Ok(id)
}

/// The (third, fourth) fields of the entry of `file` named `name`, or whose third field
/// (the id) is `name` when it is a number: (uid, gid) in `/etc/passwd`, (gid, _) in
/// `/etc/group`.
fn lookup(file: &Path, name: &str) -> Result<Option<(u32, u32)>, String> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    };
    let parsed = text.lines().filter_map(|line| {
        let mut f = line.split(':');
        let entry = f.next()?;
        let _password = f.next()?;
        let id: u32 = f.next()?.parse().ok()?;
        let second: u32 = f.next().and_then(|g| g.parse().ok()).unwrap_or(id);
        Some((entry.to_owned(), id, second))
    });
    let by_name: Vec<(String, u32, u32)> = parsed.collect();
    Ok(by_name
        .iter()
        .find(|(n, ..)| n == name)
        .or_else(|| {
            name.parse::<u32>()
                .ok()
                .and_then(|n| by_name.iter().find(|(_, id, _)| *id == n))
        })
        .map(|(_, id, second)| (*id, *second)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_resolve_and_unknown_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let passwd = dir.path().join("passwd");
        let group = dir.path().join("group");
        std::fs::write(
            &passwd,
            "root:x:0:0:root:/root:/bin/sh\nbackup:x:1500:1600::/var/backup:/sbin/nologin\n",
        )
        .unwrap();
        std::fs::write(&group, "root:x:0:\nops:x:1700:backup\n").unwrap();
        let r = |u: Option<&str>, g: Option<&str>| resolve_in(u, g, &passwd, &group);
        assert_eq!(
            r(Some("backup"), None),
            Ok(Identity {
                uid: Some(1500),
                gid: Some(1600)
            })
        );
        assert_eq!(
            r(Some("backup"), Some("ops")),
            Ok(Identity {
                uid: Some(1500),
                gid: Some(1700)
            })
        );
        assert_eq!(
            r(Some("1500"), None).unwrap().gid,
            Some(1600),
            "a listed uid has its primary group"
        );
        assert_eq!(
            r(Some("4242"), Some("4343")),
            Ok(Identity {
                uid: Some(4242),
                gid: Some(4343)
            })
        );
        let (field, e) = r(Some("nobody-here"), None).unwrap_err();
        assert_eq!(field, "user");
        assert!(e.starts_with("no user `nobody-here` in "), "{e}");
        let (field, e) = r(Some("backup"), Some("wheel")).unwrap_err();
        assert_eq!(field, "group");
        assert!(e.starts_with("no group `wheel` in "), "{e}");
        assert_eq!(
            r(None, None),
            Ok(Identity {
                uid: None,
                gid: None
            })
        );
    }
}
