#!/usr/bin/env bash
# What other web pages can do to a replica on the developer's loopback, in a real browser:
# etcd, Redis and one `ax serve` on 127.0.0.1, first with an admin token, then opened with
# `http.insecure_open_api`; an attacker's page served from 127.0.0.2 and a page under a name
# rebound to 127.0.0.1, driven in headless Chromium by scripts/browser_origin_test.py, must
# neither change a task in etcd nor read an answer. Servers are stopped however it ends.
#   scripts/check-browser-origin.sh          (AX_BIN=path/to/ax to check another build)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# shellcheck source=scripts/cargo.sh
. scripts/cargo.sh

# shellcheck source=scripts/servers.sh
. scripts/servers.sh
ax_require check-browser-origin chromium chromedriver etcd etcdctl redis-server python3 curl
if [ -z "${AX_BIN:-}" ]; then
  ax_build_binary
fi
ax=${AX_BIN:-$root/target/debug/ax}

tmp=$(mktemp -d -t ax-browser-origin.XXXXXX)
pids=()
cleanup() {
  ax_stop_pids "${pids[@]}"
  ax_stop_servers
  if [ "${keep:-0}" = 1 ]; then echo "check-browser-origin: logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ax_start_servers "$tmp"
export AX_ETCD_ENDPOINTS="$AX_ETCD_ENDPOINT" AX_REDIS_URL="$AX_REDIS_URL"

# The attacker's origin: another loopback address, so another origin to the browser.
mkdir -p "$tmp/site"
cp scripts/browser_origin_attack.html "$tmp/site/"
attacker_port=$(ax_free_port)
python3 -m http.server --bind 127.0.0.2 --directory "$tmp/site" "$attacker_port" \
  >"$tmp/attacker.log" 2>&1 &
pids+=($!)
attacker_pid=$!

cat >"$tmp/victim.json" <<'JSON'
{ "id": "victim", "namespace": "default", "handler": "log", "schedule": { "every": "1h" },
  "payload": { "message": "secret-free" } }
JSON

token="ax_$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
hash=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
printf '[[http.tokens]]\nname = "browser-admin"\nrole = "admin"\nsha256 = "%s"\n' "$hash" >"$tmp/token.toml"
printf '[http]\ninsecure_open_api = true\n' >"$tmp/open.toml"

status=0
for mode in token open; do
  export AX_ETCD_PREFIX="/browser-$mode"
  "$ax" task put "$tmp/victim.json" >/dev/null
  port=$(ax_free_port)
  AX_INSTANCE_ID="browser-$mode" AX_HTTP_LISTEN="127.0.0.1:$port" \
    "$ax" serve --config "$tmp/$mode.toml" >"$tmp/ax-$mode.log" 2>&1 &
  pids=("$attacker_pid" "$!")
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null || { keep=1; echo "check-browser-origin: replica ($mode) did not get ready" >&2; exit 1; }
  control_token=$token
  [ "$mode" = open ] && control_token=""
  echo "check-browser-origin: $mode"
  timeout 45 python3 scripts/browser_origin_test.py --url "http://127.0.0.1:$port" \
    --attacker "http://127.0.0.2:$attacker_port" --etcd "$AX_ETCD_ENDPOINT" \
    --prefix "$AX_ETCD_PREFIX" --token "$control_token" --work "$tmp" || { status=1; break; }
  ax_stop_pids "${pids[1]}"
  pids=("$attacker_pid")
done
if [ "$status" -ne 0 ]; then keep=1; echo "check-browser-origin: failed (logs: $tmp)" >&2; fi
exit "$status"
