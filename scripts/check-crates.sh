#!/usr/bin/env bash
# The library crates as a Rust user gets them: each packages with the metadata publishing
# needs, the API docs build without a warning, and the Cargo.toml lines and the program of
# docs/embedded.md and docs/rust-sdk.md (the block after `<!-- scratch project -->`) build as
# written in a project of their own outside the workspace, the crates taken by path where
# the docs say git.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

libs=(ax-scheduler-core ax-tokio-clock ax-metrics ax-registry ax-election ax-queue ax-worker
  ax-control ax-embedded ax-sdk)
echo "check-crates: cargo package (${#libs[@]} library crates)"
cargo package --locked --allow-dirty --no-verify --quiet $(printf -- '-p %s ' "${libs[@]}")

echo "check-crates: cargo doc, no warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked --quiet

scratch=$(mktemp -d -t ax-scratch.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
for doc in docs/embedded.md docs/rust-sdk.md; do
  name=$(basename "$doc" .md)
  dir="$scratch/$name"
  mkdir -p "$dir/src"
  python3 - "$doc" "$dir" "$root" <<'PY'
import re, sys
doc, out, root = sys.argv[1:]
text = open(doc, encoding="utf-8").read()
mark = text.find("<!-- scratch project -->")
if mark < 0:
    sys.exit(f"{doc}: no `<!-- scratch project -->` marker")
# The fence may carry rustdoc's attributes (`rust,no_run`: compiled, not run, by cargo test).
blocks = re.findall(r"```(toml|rust)[^\n]*\n(.*?)```", text[mark:], re.S)
toml = next((b for k, b in blocks if k == "toml"), None)
rust = next((b for k, b in blocks if k == "rust"), None)
if toml is None or rust is None:
    sys.exit(f"{doc}: the scratch project needs a toml and a rust block after its marker")
git = 'git = "https://github.com/ax-scheduler/ax"'
if git not in toml:
    sys.exit(f"{doc}: the Cargo.toml lines must take ax from {git}")
crates = {"ax-embedded": "embedded", "ax-sdk": "sdk"}
def by_path(m):
    return f'{m.group(1)} = {{ path = "{root}/{crates[m.group(1)]}"'
toml = re.sub(r'(ax-[a-z]+) = \{ ' + re.escape(git), by_path, toml)
# The workspace's dev profile, so the build shares the workspace's compiled dependencies.
manifest = f"""[package]
name = "scratch-{out.rsplit('/', 1)[-1]}"
version = "0.0.0"
edition = "2021"
publish = false

{toml}
[profile.dev]
debug = "line-tables-only"

[profile.dev.package."*"]
debug = false

[workspace]
"""
open(f"{out}/Cargo.toml", "w").write(manifest)
open(f"{out}/src/main.rs", "w").write(rust)
PY
  cp Cargo.lock "$dir/Cargo.lock"
  echo "check-crates: $doc builds as written outside the workspace"
  out=$(cd "$dir" && CARGO_TARGET_DIR="$root/target" cargo build --quiet --message-format short 2>&1) || {
    echo "$out" >&2
    exit 1
  }
  if grep -q "warning" <<<"$out"; then
    echo "check-crates: $doc's program builds with warnings:" >&2
    echo "$out" >&2
    exit 1
  fi
done
echo "check-crates: ok"
