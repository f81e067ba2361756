#!/usr/bin/env bash
# The web console in a real browser: a local cluster (etcd, Redis, 2 `ax serve` replicas with
# read, operate and admin tokens) and headless Chromium driven over WebDriver by
# scripts/console_test.py; then the same replicas sharing 4 shards, for the overview's shard map. Everything listens on loopback; servers are stopped however it ends.
#   scripts/check-console.sh                   check
#   scripts/check-console.sh --screenshots     check, and write docs/images/console-*.png
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=scripts/cargo.sh
. scripts/cargo.sh

# shellcheck source=scripts/servers.sh
. scripts/servers.sh
ax_require check-console chromium chromedriver etcd etcdctl redis-server python3
ax_build_binary
ax="$root/target/debug/ax"

tmp=$(mktemp -d -t ax-console.XXXXXX)
pids=()
cleanup() {
  ax_stop_pids "${pids[@]}"
  ax_stop_servers
  if [ "${keep:-0}" = 1 ]; then echo "check-console: logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ax_start_servers "$tmp"
export AX_ETCD_ENDPOINTS="$AX_ETCD_ENDPOINT" AX_REDIS_URL="$AX_REDIS_URL"
export AX_LEASE_TTL=5s
# The failing task aims at a closed loopback port, which the http handler refuses by default.
export AX_WORKER_HTTP_ALLOW_CIDRS=127.0.0.0/8

tokens="$tmp/tokens.env"
python3 - "$tmp/ax.toml" "$tokens" <<'PY'
import hashlib, secrets, sys
toml, env = sys.argv[1], sys.argv[2]
lines, exports = [], []
for name, role in (("console-admin", "admin"), ("console-operate", "operate"), ("console-read", "read")):
    token = "ax_" + secrets.token_hex(32)
    lines += ["[[http.tokens]]", f'name = "{name}"', f'role = "{role}"',
              f'sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"', ""]
    exports.append(f"export AX_CONSOLE_{role.upper()}_TOKEN={token}")
open(toml, "w").write("\n".join(lines))
open(env, "w").write("\n".join(exports) + "\n")
PY
# shellcheck disable=SC1090
. "$tokens"

# Starts the two replicas (logs ax-$1-N.log) and waits until they are ready.
start_replicas() {
  ports=()
  pids=()
  for i in 1 2; do
    port=$(ax_free_port)
    ports+=("$port")
    AX_INSTANCE_ID="console-$i" AX_HTTP_LISTEN="127.0.0.1:$port" \
      "$ax" serve --config "$tmp/ax.toml" >"$tmp/ax-$1-$i.log" 2>&1 &
    pids+=($!)
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 150); do
      curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
      sleep 0.2
    done
    curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || { keep=1; echo "check-console: replica on $port did not start" >&2; exit 1; }
  done
}

shots="$tmp/shots"
[ "${1:-}" = "--screenshots" ] && shots="$root/docs/images"
status=0
start_replicas leader
timeout 170 python3 scripts/console_test.py --url "http://127.0.0.1:${ports[0]}" --ax "$ax" \
  --etcd "$AX_ETCD_ENDPOINT" --screenshots "$shots" --work "$tmp" || status=$?
if [ "$status" -eq 0 ]; then
  # The same replicas sharing 4 shards: the overview shows the shard map, not a missing leader.
  ax_stop_pids "${pids[@]}"
  export AX_SHARDS=4
  start_replicas sharded
  timeout 90 python3 scripts/console_test.py --sharded --url "http://127.0.0.1:${ports[0]}" \
    --ax "$ax" --etcd "$AX_ETCD_ENDPOINT" --screenshots "$shots" --work "$tmp" || status=$?
fi
if [ "$status" -ne 0 ]; then keep=1; echo "check-console: failed (replica logs: $tmp/ax-*.log)" >&2; fi
exit "$status"
