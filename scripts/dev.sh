#!/usr/bin/env bash
# A local ax cluster in one command: etcd, Redis and three `ax serve` replicas on loopback,
# with the example tasks registered. Ctrl-C stops everything it started.
#   scripts/dev.sh [REPLICAS]     (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
replicas=${1:-3}

scripts/setup.sh
echo "dev: building ax"
cargo build --quiet -p ax --bin ax
ax="$(pwd)/target/debug/ax"

dir=$(mktemp -d -t ax-dev.XXXXXX)
# shellcheck source=scripts/servers.sh
. scripts/servers.sh
pids=()
cleanup() {
  echo
  echo "dev: stopping"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  ax_stop_servers
  echo "dev: logs kept in $dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ax_start_servers "$dir"
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

for f in examples/tasks/*.json; do
  "$ax" task put "$f" || echo "dev: could not register $f" >&2
done

# What a second terminal needs for the CLI: the binary on PATH, the servers, the token.
env_line="PATH=\"$(dirname "$ax"):\$PATH\" AX_ETCD_ENDPOINTS=$AX_ETCD_ENDPOINT AX_REDIS_URL=$AX_REDIS_URL AX_API_TOKEN=$AX_API_TOKEN"

cat <<INFO

ax is running: $replicas replicas, etcd at $AX_ETCD_ENDPOINT, Redis at $AX_REDIS_URL.

  console:  $first/ui/   (enter the admin token below in its token field)
  token:    $AX_API_TOKEN

In another terminal, paste this line; then \`ax status\`, \`ax task list\` and the README's
"Run it" commands work as written:

  export $env_line

  api:      curl -H "Authorization: Bearer \$AX_API_TOKEN" $first/api/v1/tasks
  metrics:  $(for p in "${ports[@]}"; do printf 'http://127.0.0.1:%s/metrics ' "$p"; done)
  logs:     $dir/ax-*.log

Kill the leader (see \`ax status\`) to watch a failover. Ctrl-C stops everything.
INFO
wait
