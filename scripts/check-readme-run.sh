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
  # dev.sh stops its replicas and servers, each bounded (scripts/servers.sh); past twice that
  # bound the whole group is killed, so a stop never holds up the suite.
  AX_STOP_WAIT=200 ax_reap "$dev"
  kill -KILL -- "-$dev" 2>/dev/null || true
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

# The block: the lines of the ```sh block after "Then, in that terminal".
mapfile -t commands < <(python3 - <<'EOF'
import re
lines = open("README.md", encoding="utf-8").read().split("\n")
start = next(i for i, l in enumerate(lines) if l.startswith("Then, in that terminal"))
fence = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "```sh")
for l in lines[fence + 1:]:
    if l.strip() == "```":
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

# dev.sh makes no noise of its own: its Redis is persistent as a user's is, and its examples
# succeed (those that fail on purpose are opt-in).
if ax status | grep -q 'neither AOF nor RDB'; then
  ax status >&2
  echo "check-readme-run: dev.sh's Redis warns of its own settings" >&2
  exit 1
fi
if [ "$(ax dlq list | wc -l)" -ne 1 ]; then
  ax dlq list >&2
  echo "check-readme-run: dev.sh's examples filled the dead letters" >&2
  exit 1
fi

# The failover dev.sh suggests, as it words it: the leader's pid from `ax status`, kill -9,
# then a new leader, the old one shown stale or gone, and another replica's console up.
leader=$(ax status -o json | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["leader"])')
pid=$(ax status -o json | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(next(r["pid"] for r in s["replicas"] if r["id"] == s["leader"]))')
grep -q "^    $leader  pid $pid  http://" "$out" \
  || { cat "$out" >&2; echo "check-readme-run: dev.sh did not print $leader with pid $pid" >&2; exit 1; }
echo "check-readme-run: killing the leader $leader (pid $pid)"
kill -9 "$pid"
new=""
for _ in $(seq 60); do
  new=$(ax status -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin).get("leader") or "")' || true)
  [ -n "$new" ] && [ "$new" != "$leader" ] && break
  sleep 0.5
done
[ -n "$new" ] && [ "$new" != "$leader" ] || { echo "check-readme-run: no new leader after killing $leader" >&2; exit 1; }
shown=""
for _ in $(seq 60); do
  shown=$(ax status | grep "^$leader " || true)
  echo "$shown" | grep -qE 'stale|gone' && break
  sleep 0.5
done
echo "$shown" | grep -qE 'stale|gone' || { ax status >&2; echo "check-readme-run: ax status does not show $leader as stale or gone" >&2; exit 1; }
url=$(grep -m1 -E "^    $new  pid [0-9]+  http://" "$out" | awk '{print $4}')
curl -fsS "$url" >/dev/null || { echo "check-readme-run: $new's console at $url does not answer" >&2; exit 1; }
echo "check-readme-run: failover ok ($leader killed, $new leads, its console at $url)"
echo "check-readme-run: ok (${#commands[@]} commands and the failover)"
