#!/usr/bin/env bash
# Sourced by the suites and checks: cargo resolves a shared dependency's features from the
# packages a command names, so `cargo test -p ax` after `cargo test --workspace` builds
# dozens of crates a second time (about a minute each time on two cores). Every helper here
# names the whole workspace, so scripts/test.sh's one build serves every suite after it.
#   ax_cargo_test ARGS...   cargo test --workspace --locked ARGS... (select targets with
#                           --test NAME: with --workspace that picks the package having it)
#   ax_build_binary         builds target/debug/ax as the test build does
#   ax_test_crate DIR       runs the tests (unit and integration) of the crate in DIR, every
#                           binary even after a failure, and fails if one failed

ax_cargo_test() {
  cargo test --workspace --locked "$@"
}

ax_build_binary() {
  # The engine's integration tests need the binary, so building one of them builds
  # target/debug/ax with the test build's features; `cargo build -p ax` would not.
  cargo build --workspace --locked --quiet --test e2e
}

ax_test_crate() { # dir
  local dir manifest failed=0 bin
  dir=$(cd "$1" && pwd)
  manifest="$dir/Cargo.toml"
  local bins
  bins=$(cargo test --workspace --tests --no-run --locked --message-format=json \
    | MANIFEST="$manifest" python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m.get("manifest_path") == os.environ["MANIFEST"] and m["profile"]["test"]:
        print(m["executable"])
')
  [ -n "$bins" ] || { echo "ax_test_crate: no test binary found for $dir" >&2; return 1; }
  for bin in $bins; do
    echo "     Running $(basename "$bin")"
    (cd "$dir" && "$bin") || failed=1
  done
  return "$failed"
}
