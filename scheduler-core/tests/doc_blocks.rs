//! Every Rust code block of the repository's Markdown is compiled by `cargo test --doc`: a
//! file with one is included in a crate's `lib.rs` as
//! `#[cfg(doctest)] #[doc = include_str!("../../docs/x.md")] mod x_md {}`, so rustdoc builds
//! (and, unless `no_run`, runs) each of its blocks against the crate's API, and the docs
//! cannot drift from it. This test fails when a Markdown file has a block rustdoc would read
//! as Rust (```` ```rust ````, an attribute alone such as ```` ```no_run ````, or no language
//! at all) and no crate includes the file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace's root: this crate's parent folder.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crate in a workspace")
        .to_path_buf()
}

/// The Markdown files under `dir`, leaving out build output and hidden folders.
fn markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable folder") {
        let path = entry.expect("folder entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                markdown(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// Whether rustdoc reads a fence's info string as Rust: no language, `rust`, or only
/// rustdoc's own attributes.
fn is_rust(info: &str) -> bool {
    const ATTRIBUTES: [&str; 6] = [
        "no_run",
        "ignore",
        "should_panic",
        "compile_fail",
        "test_harness",
        "standalone_crate",
    ];
    let mut tokens = info.split([',', ' ', '\t']).filter(|t| !t.is_empty());
    tokens.all(|t| t == "rust" || ATTRIBUTES.contains(&t) || t.starts_with("edition"))
}

/// The line numbers (from 1) of the opening fences of `text`'s Rust blocks.
fn rust_blocks(text: &str) -> Vec<usize> {
    let mut open: Option<&str> = None;
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence = if trimmed.starts_with("```") {
            "```"
        } else if trimmed.starts_with("~~~") {
            "~~~"
        } else {
            continue;
        };
        match open {
            Some(opened) if opened == fence && trimmed.trim_end() == fence => open = None,
            Some(_) => {}
            None => {
                open = Some(fence);
                if is_rust(trimmed.trim_start_matches(fence).trim()) {
                    found.push(i + 1);
                }
            }
        }
    }
    found
}

/// The Markdown files a crate includes for its doctests: `#[doc = include_str!("…md")]` in a
/// `lib.rs` of the workspace, resolved from that file's folder.
fn included(root: &Path) -> BTreeSet<PathBuf> {
    let mut files = BTreeSet::new();
    for entry in fs::read_dir(root).expect("readable root") {
        let lib = entry.expect("root entry").path().join("src/lib.rs");
        let Ok(source) = fs::read_to_string(&lib) else {
            continue;
        };
        for piece in source.split("#[doc = include_str!(\"").skip(1) {
            let relative = piece.split('"').next().unwrap_or_default();
            if relative.ends_with(".md") {
                let path = lib.parent().expect("src folder").join(relative);
                files.insert(path.canonicalize().unwrap_or(path));
            }
        }
    }
    files
}

#[test]
fn every_rust_block_in_markdown_is_compiled() {
    let root = root();
    let covered = included(&root);
    let mut files = Vec::new();
    markdown(&root, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("readable Markdown");
        let blocks = rust_blocks(&text);
        let canonical = file.canonicalize().expect("existing file");
        if blocks.is_empty() || covered.contains(&canonical) {
            continue;
        }
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for line in blocks {
            problems.push(format!("{shown}:{line}"));
        }
    }
    assert!(
        problems.is_empty(),
        "Rust code blocks in Markdown no crate compiles:\n  {}\n\
         Include the file in the lib.rs of the crate whose API it shows\n    \
         #[cfg(doctest)]\n    #[doc = include_str!(\"../../docs/<file>.md\")]\n    \
         mod <file>_md {{}}\n\
         or, for a block that is not Rust, name its language (```text, ```toml, ```sh, ...).",
        problems.join("\n  ")
    );
}

#[test]
fn fences_read_as_rustdoc_reads_them() {
    let text = "```rust\na\n```\n```toml\nb\n```\n```\nc\n```\n  ```no_run\nd\n  ```\n\
                ```rust,ignore\ne\n```\n```text\n```rust\n```\n";
    assert_eq!(rust_blocks(text), vec![1, 7, 10, 13]);
}
