//! Secrets by reference: `${secret:NAME}` in a task's header value or URL.
//!
//! A task that must not hold its credential names it instead; the worker puts the value in
//! at run time from a source the operator provides (a directory of files, one per name, as
//! a mounted Kubernetes Secret is), so the value is never stored, shown or logged by ax.
//! This module is the syntax alone, shared by validation (which checks it) and the worker
//! (which resolves it): no I/O here.

/// What opens a reference.
pub const OPEN: &str = "${secret:";

/// Longest secret name.
pub const MAX_SECRET_NAME: usize = 128;

/// A piece of a text that may hold references.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text as written.
    Text(&'a str),
    /// A `${secret:NAME}` reference: the name.
    Secret(&'a str),
}

/// Whether `name` is a usable secret name: letters, digits, `_`, `.` and `-`, at most
/// [`MAX_SECRET_NAME`] bytes, and not `.` or starting with `..` (a directory source keeps
/// its own entries under such names, as Kubernetes does with `..data`).
pub fn check_name(name: &str) -> Result<(), String> {
    let chars_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !chars_ok || name.len() > MAX_SECRET_NAME {
        return Err(format!(
            "`{name}` is not a secret name: use 1 to {MAX_SECRET_NAME} letters, digits, `_`, \
             `.` or `-`"
        ));
    }
    if name == "." || name.starts_with("..") {
        return Err(format!(
            "`{name}` is not a secret name: `.` and names starting with `..` are reserved"
        ));
    }
    Ok(())
}

/// `text` cut into plain text and references, in order; an error names the first
/// `${secret:` that does not open a well-formed reference.
pub fn pieces(text: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        if i > 0 {
            out.push(Piece::Text(&rest[..i]));
        }
        let after = &rest[i + OPEN.len()..];
        let Some(len) = after.find('}') else {
            return Err(format!(
                "has `{OPEN}` without its closing `}}`: write ${{secret:NAME}}"
            ));
        };
        check_name(&after[..len])?;
        out.push(Piece::Secret(&after[..len]));
        rest = &after[len + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Ok(out)
}

/// The names `text` refers to, in order.
pub fn names(text: &str) -> Result<Vec<&str>, String> {
    Ok(pieces(text)?
        .into_iter()
        .filter_map(|p| match p {
            Piece::Secret(name) => Some(name),
            Piece::Text(_) => None,
        })
        .collect())
}

/// Whether `text` holds a reference (well-formed or not).
pub fn has_references(text: &str) -> bool {
    text.contains(OPEN)
}

/// `text` with each reference replaced by `with`: how validation checks the shape of a URL
/// whose parts are references, with a stand-in that every URL part takes.
pub fn substitute(text: &str, with: &str) -> Result<String, String> {
    Ok(pieces(text)?
        .into_iter()
        .map(|p| match p {
            Piece::Text(t) => t,
            Piece::Secret(_) => with,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_found_and_checked() {
        let t = "Bearer ${secret:api.token} and ${secret:B-2_x}";
        assert_eq!(names(t).unwrap(), ["api.token", "B-2_x"]);
        assert_eq!(
            pieces("a${secret:b}").unwrap(),
            [Piece::Text("a"), Piece::Secret("b")]
        );
        assert!(names("no reference, ${other} or $secret")
            .unwrap()
            .is_empty());
        for bad in [
            "${secret:}",
            "${secret:a b}",
            "${secret:a/b}",
            "${secret:..data}",
            "${secret:.}",
            "${secret:open",
        ] {
            assert!(pieces(bad).is_err(), "{bad}");
        }
        assert!(pieces(&format!("${{secret:{}}}", "a".repeat(129))).is_err());
        assert_eq!(
            substitute("${secret:u}://h/${secret:p}", "x").unwrap(),
            "x://h/x"
        );
    }
}
