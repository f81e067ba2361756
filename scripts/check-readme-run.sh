#!/usr/bin/env bash
# The README's "Run it" block, run as a new user runs it: `scripts/dev.sh` in one terminal,
# its printed `export` line in another, then every command of the block as written, each of
# which must succeed. dev.sh is stopped however this ends.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/servers.sh
ax_require check-readme-run curl python3

out=$(mktemp -t ax-readme-run.XXXXXX)
setsid scripts/dev.sh >"$out" 2>&1 &
dev=$!
stop() {
  kill -TERM -- "-$dev" 2>/dev/null || true
  wait "$dev" 2>/dev/null || true
  rm -f "$out"
}
trap stop EXIT

for _ in $(seq 600); do
  grep -q '^  export ' "$out" && break
  kill -0 "$dev" 2>/dev/null || { cat "$out" >&2; echo "check-readme-run: dev.sh exited" >&2; exit 1; }
  sleep 0.5
done
line=$(grep -m1 '^  export ' "$out") || { cat "$out" >&2; echo "check-readme-run: dev.sh printed no export line" >&2; exit 1; }
eval "$line"
if grep -q 'could not register' "$out"; then
  cat "$out" >&2
  echo "check-readme-run: dev.sh could not register an example" >&2
  exit 1
fi

# The block: the indented lines after "Then, in that terminal", up to the next prose line.
mapfile -t commands < <(python3 - <<'EOF'
import re
lines = open("README.md", encoding="utf-8").read().split("\n")
start = next(i for i, l in enumerate(lines) if l.startswith("Then, in that terminal"))
for l in lines[start + 1:]:
    if l and not l.startswith("    "):
        break
    if l.strip():
        print(re.sub(r"\s+#.*$", "", l.strip()))
EOF
)
[ "${#commands[@]}" -ge 5 ] || { echo "check-readme-run: found ${#commands[@]} commands in README's Run it block" >&2; exit 1; }

for cmd in "${commands[@]}"; do
  echo "check-readme-run: \$ $cmd"
  if ! result=$(bash -c "$cmd" 2>&1); then
    echo "$result" >&2
    echo "check-readme-run: '$cmd' failed as the README gives it" >&2
    exit 1
  fi
  echo "$result" | head -3
done
echo "check-readme-run: ok (${#commands[@]} commands)"
