#!/usr/bin/env bash
# A local ax cluster in one command: etcd, Redis and three `ax serve` replicas on loopback,
# with the example tasks registered. Ctrl-C stops everything it started.
#   scripts/dev.sh [--with-failures] [REPLICAS]     (default 3)
# The example http tasks call a stand-in on loopback (scripts/dev_receiver.py), never their
# real addresses, so every demo execution succeeds; --with-failures also registers
# examples/tasks/failing/, which fail on purpose (retries, dead letters, alerts).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo.sh
. scripts/cargo.sh
failing=no
if [ "${1:-}" = --with-failures ]; then failing=yes; shift; fi
replicas=${1:-3}

scripts/setup.sh
echo "dev: building ax"
ax_build_binary
ax="$(pwd)/target/debug/ax"

dir=$(mktemp -d -t ax-dev.XXXXXX)
# shellcheck source=scripts/servers.sh
. scripts/servers.sh
pids=()
cleanup() {
  echo
  echo "dev: stopping"
  ax_stop_pids "${pids[@]}" ${receiver:+"$receiver"}
  ax_stop_servers
  echo "dev: logs kept in $dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

receiver=""
# Persistent as a user's Redis is, so ax has no persistence warning to give.
ax_start_servers "$dir" persistent
export AX_ETCD_ENDPOINTS="$AX_ETCD_ENDPOINT" AX_REDIS_URL="$AX_REDIS_URL"
# A short lease so a killed leader is replaced within seconds while you experiment.
export AX_LEASE_TTL=${AX_LEASE_TTL:-5s}
# The example http tasks aim at loopback, which the http handler refuses by default.
export AX_WORKER_HTTP_ALLOW_CIDRS=${AX_WORKER_HTTP_ALLOW_CIDRS:-127.0.0.0/8,::1/128}

# An admin token for this cluster only: the API answers no caller without one, loopback or
# not (any local process, and any web page the browser shows, can reach a loopback port).
AX_API_TOKEN=${AX_API_TOKEN:-ax_$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}
export AX_API_TOKEN

ports=()
for i in $(seq 1 "$replicas"); do
  port=$(ax_free_port)
  ports+=("$port")
  AX_INSTANCE_ID="ax-$i" AX_HTTP_LISTEN="127.0.0.1:$port" \
    "$ax" serve >"$dir/ax-$i.log" 2>&1 &
  pids+=($!)
done

first="http://127.0.0.1:${ports[0]}"
for _ in $(seq 100); do
  curl -fsS "$first/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done

receiver_port=$(ax_free_port)
python3 scripts/dev_receiver.py "$receiver_port" >"$dir/receiver.log" 2>&1 &
receiver=$!

# An example's http.url, moved onto the loopback stand-in (same path), into $dir.
local_copy() { # file
  python3 - "$1" "$receiver_port" "$dir/$(basename "$1")" <<'PY'
import json, shutil, sys, urllib.parse
src, port, dst = sys.argv[1], sys.argv[2], sys.argv[3]
spec = json.load(open(src, encoding="utf-8"))
http = spec.get("http")
if http and "url" in http and not http["url"].startswith("http://127.0.0.1:"):
    path = urllib.parse.urlsplit(http["url"]).path or "/"
    http["url"] = f"http://127.0.0.1:{port}{path}"
    json.dump(spec, open(dst, "w", encoding="utf-8"), indent=2)
else:
    shutil.copyfile(src, dst)
PY
  echo "$dir/$(basename "$1")"
}
examples=(examples/tasks/*.json)
[ "$failing" = yes ] && examples+=(examples/tasks/failing/*.json)
for f in "${examples[@]}"; do
  "$ax" task put "$(local_copy "$f")" || echo "dev: could not register $f" >&2
done

# What a second terminal needs for the CLI: the binary on PATH, the servers, the token.
env_line="PATH=\"$(dirname "$ax"):\$PATH\" AX_ETCD_ENDPOINTS=$AX_ETCD_ENDPOINT AX_REDIS_URL=$AX_REDIS_URL AX_API_TOKEN=$AX_API_TOKEN"

cat <<INFO

ax is running: $replicas replicas, etcd at $AX_ETCD_ENDPOINT, Redis at $AX_REDIS_URL.

  console:  $first/ui/   (enter the admin token below in its token field)
  token:    $AX_API_TOKEN
  replicas: (every one serves the console and the API; kill one, use another)
$(for i in $(seq 1 "$replicas"); do printf '    ax-%s  pid %s  http://127.0.0.1:%s/ui/\n' "$i" "${pids[$((i-1))]}" "${ports[$((i-1))]}"; done)

In another terminal, paste this line; then \`ax status\`, \`ax task list\` and the README's
"Run it" commands work as written:

  export $env_line

  api:      curl -H "Authorization: Bearer \$AX_API_TOKEN" $first/api/v1/tasks
  metrics:  $(for p in "${ports[@]}"; do printf 'http://127.0.0.1:%s/metrics ' "$p"; done)
  logs:     $dir/ax-*.log

To watch a failover: \`ax status\` names the leader and its pid; \`kill -9 PID\`, then
\`ax status\` again (the old leader shows stale, then gone) on another replica's console.
Example http tasks call a stand-in on loopback (log: $dir/receiver.log).
Ctrl-C stops everything.
INFO
wait
