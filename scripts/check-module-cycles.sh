#!/usr/bin/env bash
# No cycles between the modules of a crate: within each crate of the workspace, the top-level
# modules must not import each other in a ring (`a` uses `b`, `b` uses `a`), nor the children
# of one module among themselves. A cycle ties modules that read as separate concepts into
# one, which no longer splits, tests or reads apart. The analysis is scripts/module_cycles.py
# (Python 3, standard library only): `use` trees and `crate::`, `super::`, `self::` paths in
# code, test modules (`#[cfg(test)]`) and tests/ benches/ left out.
#
# Cycles known and being removed are listed in scripts/module-cycles.allow; the check fails on
# a cycle missing from it, and on an entry that no longer occurs (remove it: the list only
# shrinks).
#   scripts/check-module-cycles.sh              check the workspace (after the self-test)
#   scripts/check-module-cycles.sh --list       also show one file:line per edge of allowed cycles
#   scripts/check-module-cycles.sh --self-test  check the analysis on a small fake crate
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
analyze="$root/scripts/module_cycles.py"

command -v python3 >/dev/null 2>&1 || { echo "check-module-cycles: python3 is missing; run scripts/setup.sh" >&2; exit 1; }

tmp=$(mktemp -d -t ax-cycles.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

self_test() {
ws="$tmp/ws"
mkdir -p "$ws/fake/src/d" "$ws/fake/src/f" "$ws/fake/tests" "$ws/other/src"
cat >"$ws/Cargo.toml" <<'TOML'
[workspace]
members = [
    "fake",
    "other",
]
TOML
# Known cycles: a <-> b (a `use` one way, a `super::` path in code the other), c <-> e (through
# the crate root's re-export of e's item), d::x <-> d::y (children of one module, `self::` and
# a `crate::` path). Known non-cycles: c -> a only; d -> c and c <- f only, whose way back is
# in test code, a comment, a string, a `#[cfg(test)]` item or tests/.
cat >"$ws/fake/src/lib.rs" <<'RS'
//! Root: `crate::c` in a comment is no edge.
pub mod a;
pub mod b;
pub mod c;
pub mod d;
pub mod e;
pub mod f;
pub use e::Item;
RS
cat >"$ws/fake/src/a.rs" <<'RS'
use crate::b::Thing;
pub fn f() -> Thing { Thing }
RS
cat >"$ws/fake/src/b.rs" <<'RS'
pub struct Thing;
pub fn g() { let _ = super::a::f(); }
RS
cat >"$ws/fake/src/c.rs" <<'RS'
use crate::{a::f, Item};
pub fn h() -> Item { f(); Item }
#[cfg(test)]
mod tests {
    use crate::f::Probe;
}
RS
cat >"$ws/fake/src/e.rs" <<'RS'
pub struct Item;
pub fn k() { crate::c::h(); }
RS
cat >"$ws/fake/src/d.rs" <<'RS'
pub mod x;
pub mod y;
pub fn z() { let _ = c::h(); let s = "crate::f::Probe"; let _ = 'a'; }
use crate::c;
RS
cat >"$ws/fake/src/d/x.rs" <<'RS'
use self::inner::Deep;
mod inner { pub struct Deep; pub fn up() -> super::super::y::Y { super::super::y::Y } }
pub struct X<'a>(&'a str);
RS
cat >"$ws/fake/src/d/y.rs" <<'RS'
pub struct Y;
pub fn x() { let _: Option<crate::d::x::X<'static>> = None; }
RS
cat >"$ws/fake/src/f.rs" <<'RS'
pub struct Probe;
/* a block comment: crate::c::h() */
#[cfg(test)]
fn only_in_tests() { crate::c::h(); }
pub fn m() { crate::c::h(); }
RS
cat >"$ws/fake/tests/it.rs" <<'RS'
use fake::c::h;
RS
cat >"$ws/other/src/lib.rs" <<'RS'
//! A crate without cycles.
pub mod p;
pub mod q;
RS
echo 'pub fn p() { crate::q::q(); }' >"$ws/other/src/p.rs"
echo 'pub fn q() {}' >"$ws/other/src/q.rs"

fail=0
expect() { # name, expected exit status, expected output pattern, allow-list file
  local name=$1 status=$2 pattern=$3 allow=$4 out rc=0
  out=$(python3 "$analyze" --root "$ws" --allow "$allow" 2>&1) || rc=$?
  if [ "$rc" != "$status" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "check-module-cycles: self-test '$name' failed (exit $rc, want $status; want /$pattern/):" >&2
    echo "$out" >&2
    fail=1
  fi
}

expected="$tmp/expected"
printf '%s\n' 'fake: a -> b -> a' 'fake: c -> e -> c' 'fake: d::x -> d::y -> d::x' >"$expected"
# The cycles found are exactly the known ones, and each edge has its file:line.
found=$(python3 "$analyze" --root "$ws" 2>&1 || true)
found=$(sed -n 's/^  \([a-z].*\)/\1/p' <<<"$found" | sort)
if [ "$found" != "$(sort "$expected")" ]; then
  echo "check-module-cycles: self-test: cycles found differ from the known ones:" >&2
  diff <(sort "$expected") <(echo "$found") >&2 || true
  fail=1
fi
expect "edge locations" 1 'a -> b  fake/src/a\.rs:1$' /dev/null
expect "super:: path in code" 1 'b -> a  fake/src/b\.rs:2$' /dev/null
expect "re-export through the root" 1 'c -> e  fake/src/c\.rs:1$' /dev/null
expect "nested super::super" 1 'd::x -> d::y  fake/src/d/x\.rs:2$' /dev/null
expect "no allow-list" 1 '3 new cycle' /dev/null
expect "all allowed" 0 '^module cycles: none new in 2 crates$' "$expected"
# An entry written from another module of its ring is the same cycle.
printf '%s\n' '# comment' 'fake: b -> a -> b  # to be removed' 'fake: e -> c -> e' \
  'fake: d::y -> d::x -> d::y' >"$tmp/rotated"
expect "rotated entries" 0 'none new in 2 crates' "$tmp/rotated"
head -n 2 "$expected" >"$tmp/missing"
expect "a cycle not allowed" 1 '1 new cycle.*' "$tmp/missing"
{ cat "$expected"; echo 'fake: c -> d -> c'; } >"$tmp/stale"
expect "an allowed cycle gone" 1 'no longer found.*' "$tmp/stale"
echo 'fake: a -> b' >"$tmp/bad"
expect "a malformed entry" 1 'not a cycle' "$tmp/bad"
# Without cycles: the plain message.
mkdir -p "$tmp/clean" && cp -r "$ws/other" "$tmp/clean/"
printf '[workspace]\nmembers = ["other"]\n' >"$tmp/clean/Cargo.toml"
out=$(python3 "$analyze" --root "$tmp/clean")
if [ "$out" != "module cycles: none in 1 crates" ]; then
  echo "check-module-cycles: self-test 'no cycles' failed: $out" >&2
  fail=1
fi
[ "$fail" = 0 ] || return 1
echo "module cycles: self-test passed"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
  exit
fi
# A check whose analysis went wrong would pass by missing cycles: test it first (it takes a
# fraction of a second), and show its findings only when it fails.
if ! out=$(self_test 2>&1); then
  echo "$out" >&2
  exit 1
fi
python3 "$analyze" --root "$root" --allow scripts/module-cycles.allow "$@"
