#!/usr/bin/env bash
# Sourced by test.sh and dev.sh: starts a throwaway etcd and Redis on free loopback ports with
# their data in a temp folder, and stops them with ax_stop_servers; a 3-member etcd cluster for
# the tests of member failures (ax_start_etcd_cluster, ax_stop_etcd_cluster); and a Redis
# Cluster (ax_start_redis_cluster, ax_stop_redis_cluster, described where they are defined).
#   ax_start_servers DIR [persistent]
#                              sets AX_ETCD_ENDPOINT, AX_REDIS_URL, AX_ETCD_PID, AX_REDIS_PID;
#                              with `persistent`, Redis keeps an append-only file as a
#                              production Redis does (tests run without, for speed)
#   ax_start_etcd_cluster DIR  sets AX_ETCD_CLUSTER (the 3 client URLs, comma-separated) and
#                              AX_ETCD_CLUSTER_PIDS (the members' process ids, same order)
#   ax_require WHO TOOL...     fails, naming WHO and scripts/setup.sh, unless each TOOL is on PATH
#   ax_stop_pids PID...        stops and reaps the given background processes

ax_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

ax_require() { # who, tools...
  local who=$1 tool; shift
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "$who: $tool is missing; run scripts/setup.sh" >&2; return 1; }
  done
}

ax_stop_pids() { # pids...
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

ax_wait() { # what, tries, command...
  local what=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "servers: $what did not start; its log:" >&2
  return 1
}

ax_start_servers() {
  local dir=$1 persistence=(--save '' --appendonly no)
  [ "${2:-}" = persistent ] && persistence=(--save '' --appendonly yes --appendfsync everysec)
  mkdir -p "$dir/etcd" "$dir/redis"
  local cport pport rport
  cport=$(ax_free_port); pport=$(ax_free_port); rport=$(ax_free_port)
  # setsid: a Ctrl-C in the terminal must not stop the servers before the ax processes that
  # use them have shut down; ax_stop_servers stops them last.
  setsid etcd --name ax --data-dir "$dir/etcd/data" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "ax=http://127.0.0.1:$pport" >"$dir/etcd/etcd.log" 2>&1 &
  AX_ETCD_PID=$!
  setsid redis-server --port "$rport" --bind 127.0.0.1 "${persistence[@]}" --dir "$dir/redis" \
    >"$dir/redis/redis.log" 2>&1 &
  AX_REDIS_PID=$!
  AX_ETCD_ENDPOINT="http://127.0.0.1:$cport"
  AX_REDIS_URL="redis://127.0.0.1:$rport"
  ax_wait etcd 100 env ETCDCTL_API=3 etcdctl --endpoints "$AX_ETCD_ENDPOINT" endpoint health \
    || { tail -20 "$dir/etcd/etcd.log" >&2; return 1; }
  ax_wait redis 100 redis-cli -p "$rport" ping \
    || { tail -20 "$dir/redis/redis.log" >&2; return 1; }
  export AX_ETCD_ENDPOINT AX_REDIS_URL AX_ETCD_PID AX_REDIS_PID
}

ax_stop_servers() {
  for pid in ${AX_ETCD_PID:-} ${AX_REDIS_PID:-}; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in ${AX_ETCD_PID:-} ${AX_REDIS_PID:-}; do
    wait "$pid" 2>/dev/null || true
  done
}

# A local Redis Cluster: 6 nodes (3 primaries, 1 replica each) on free loopback ports, each
# with its own folder under DIR. A small node timeout (1 s) so a killed primary's replica is
# promoted within a few seconds (the failover tests rely on it).
#   ax_start_redis_cluster DIR   sets AX_REDIS_CLUSTER (comma-separated redis:// URLs of the
#                                nodes) and AX_REDIS_CLUSTER_PIDS (space-separated)
ax_start_redis_cluster() {
  local dir=$1 nodes=() pids=() port bus
  for i in 1 2 3 4 5 6; do
    port=$(ax_free_port); bus=$(ax_free_port)
    mkdir -p "$dir/cluster/$i"
    # A config file per node, so a test that kills one restarts it as it was (`redis-server
    # FILE`, the file named by INFO's config_file). AOF on: it comes back with its data.
    cat >"$dir/cluster/$i/redis.conf" <<CONF
port $port
cluster-port $bus
bind 127.0.0.1
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 1000
appendonly yes
save ""
dir $dir/cluster/$i
logfile $dir/cluster/$i/redis.log
CONF
    setsid redis-server "$dir/cluster/$i/redis.conf" >/dev/null 2>&1 &
    pids+=($!)
    nodes+=("127.0.0.1:$port")
  done
  for n in "${nodes[@]}"; do
    ax_wait "redis cluster node $n" 100 redis-cli -p "${n#*:}" ping \
      || { tail -20 "$dir"/cluster/*/redis.log >&2; return 1; }
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
    >"$dir/cluster/create.log" 2>&1 || { cat "$dir/cluster/create.log" >&2; return 1; }
  local first=${nodes[0]#*:}
  ax_wait "redis cluster" 150 sh -c "redis-cli -p $first cluster info | grep -q 'cluster_state:ok'" \
    || { redis-cli -p "$first" cluster info >&2; return 1; }
  # Every node must see the whole cluster (ok on one node is not enough for a client that
  # starts from another).
  for n in "${nodes[@]}"; do
    ax_wait "redis cluster at $n" 150 sh -c "redis-cli -p ${n#*:} cluster info | grep -q 'cluster_state:ok'" \
      || return 1
  done
  AX_REDIS_CLUSTER=$(printf 'redis://%s,' "${nodes[@]}"); AX_REDIS_CLUSTER=${AX_REDIS_CLUSTER%,}
  AX_REDIS_CLUSTER_PIDS="${pids[*]}"
  export AX_REDIS_CLUSTER AX_REDIS_CLUSTER_PIDS
}

ax_stop_redis_cluster() {
  # By port first: a node a test killed and started again has a process id of its own.
  local url
  for url in ${AX_REDIS_CLUSTER//,/ }; do
    redis-cli -p "${url##*:}" shutdown nosave >/dev/null 2>&1 || true
  done
  for pid in ${AX_REDIS_CLUSTER_PIDS:-}; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in ${AX_REDIS_CLUSTER_PIDS:-}; do
    wait "$pid" 2>/dev/null || true
  done
}

ax_start_etcd_cluster() {
  local dir=$1 i initial="" cluster_token
  local -a names cports pports
  AX_ETCD_CLUSTER="" AX_ETCD_CLUSTER_PIDS=""
  cluster_token="ax-$(basename "$dir")-$$"
  for i in 1 2 3; do
    names[i]="m$i"; cports[i]=$(ax_free_port); pports[i]=$(ax_free_port)
    initial+="${initial:+,}m$i=http://127.0.0.1:${pports[i]}"
  done
  for i in 1 2 3; do
    mkdir -p "$dir/${names[i]}"
    # setsid, as in ax_start_servers. Each member has its own data folder and log.
    setsid etcd --name "${names[i]}" --data-dir "$dir/${names[i]}/data" \
      --listen-client-urls "http://127.0.0.1:${cports[i]}" \
      --advertise-client-urls "http://127.0.0.1:${cports[i]}" \
      --listen-peer-urls "http://127.0.0.1:${pports[i]}" \
      --initial-advertise-peer-urls "http://127.0.0.1:${pports[i]}" \
      --initial-cluster "$initial" --initial-cluster-token "$cluster_token" \
      --initial-cluster-state new >"$dir/${names[i]}/etcd.log" 2>&1 &
    AX_ETCD_CLUSTER_PIDS+="${AX_ETCD_CLUSTER_PIDS:+,}$!"
    AX_ETCD_CLUSTER+="${AX_ETCD_CLUSTER:+,}http://127.0.0.1:${cports[i]}"
  done
  export AX_ETCD_CLUSTER AX_ETCD_CLUSTER_PIDS
  ax_wait "etcd cluster" 150 env ETCDCTL_API=3 etcdctl --endpoints "$AX_ETCD_CLUSTER" \
    endpoint health --cluster \
    || { for i in 1 2 3; do tail -5 "$dir/${names[i]}/etcd.log" >&2; done; return 1; }
}

ax_stop_etcd_cluster() {
  local pid
  for pid in ${AX_ETCD_CLUSTER_PIDS//,/ }; do
    kill -CONT "$pid" 2>/dev/null || true # a member a test left stopped
    kill "$pid" 2>/dev/null || true
  done
  for pid in ${AX_ETCD_CLUSTER_PIDS//,/ }; do
    wait "$pid" 2>/dev/null || true
  done
}
