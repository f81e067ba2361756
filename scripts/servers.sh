#!/usr/bin/env bash
# Sourced by test.sh and dev.sh: starts a throwaway etcd and Redis on free loopback ports with
# their data in a temp folder, and stops them with ax_stop_servers; a 3-member etcd cluster for
# the tests of member failures (ax_start_etcd_cluster, ax_stop_etcd_cluster); and a Redis
# Cluster (ax_start_redis_cluster, ax_stop_redis_cluster, described where they are defined).
#   ax_start_servers DIR [persistent]
#                              sets AX_ETCD_ENDPOINT, AX_REDIS_URL, AX_ETCD_PID, AX_REDIS_PID;
#                              with `persistent`, Redis keeps an append-only file as a
#                              production Redis does (tests run without, for speed)
#   ax_start_etcd_cluster DIR [netns]
#                              sets AX_ETCD_CLUSTER (the 3 client URLs, comma-separated) and
#                              AX_ETCD_CLUSTER_PIDS (the members' process ids, same order);
#                              with `netns` (root only), each member runs in a network
#                              namespace of its own, described where the function is defined
#   ax_require WHO TOOL...     fails, naming WHO and scripts/setup.sh, unless each TOOL is on PATH
#   ax_stop_pids PID...        stops and reaps the given background processes (SIGTERM, then
#                              SIGKILL for any still running after AX_STOP_WAIT, 90 s)
#   ax_reap PID...             waits for the given processes to end, as long as ax_stop_pids
#                              does (then SIGKILL)
#   ax_alive PID               whether the process runs (a zombie does not)

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
  ax_reap "$@"
}

# A stop never hangs a suite. Nothing here calls `wait PID`: in a trap that interrupted the
# builtin `wait` (dev.sh's Ctrl-C), bash can lose the exit of a child it already reaped and
# then wait for it, and for every other child, without end. Whatever still runs at the bound
# is killed, and named, since a process that ignores SIGTERM that long is a bug of its own.
ax_reap() { # pids...
  local pid alive i
  for ((i = 0; i < ${AX_STOP_WAIT:-90} * 5; i++)); do
    alive=no
    for pid in "$@"; do ax_alive "$pid" && alive=yes && break; done
    [ "$alive" = no ] && return 0
    sleep 0.2
  done
  for pid in "$@"; do
    ax_alive "$pid" || continue
    echo "servers: pid $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-80)) ignored SIGTERM for ${AX_STOP_WAIT:-90} s; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  done
}

# Whether a process runs: an exited child its shell has not reaped yet (a zombie) does not.
ax_alive() { # pid
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat:0:1}" != Z ]
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
  # shellcheck disable=SC2086 # the pids are words on purpose
  ax_stop_pids ${AX_ETCD_PID:-} ${AX_REDIS_PID:-}
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
  # shellcheck disable=SC2086 # the pids are words on purpose
  ax_stop_pids ${AX_REDIS_CLUSTER_PIDS:-}
}

# With `netns`, each member gets a network namespace of its own, joined to the host by a veth
# pair whose host side is a port of one bridge: members reach each other and the host's
# clients only through the bridge, on 10.231.N.11-13. A test partitions member i by taking its
# link off the bridge (`ip link set LINK nomaster`: frames vanish both ways, no reset, the
# member keeps running) and heals it with `ip link set LINK master BRIDGE`; the links are in
# AX_ETCD_CLUSTER_LINKS (same order as the members), the bridge in AX_ETCD_CLUSTER_BRIDGE.
# ax_stop_etcd_cluster removes both, and so does a later start whose owner died first.
ax_start_etcd_cluster() {
  local dir=$1 mode=${2:-} i initial="" cluster_token host net="" tag
  local -a names cports pports hosts
  AX_ETCD_CLUSTER="" AX_ETCD_CLUSTER_PIDS="" AX_ETCD_CLUSTER_LINKS="" AX_ETCD_CLUSTER_BRIDGE=""
  cluster_token="ax-$(basename "$dir")-$$"
  if [ "$mode" = netns ]; then
    ax_require "etcd cluster in namespaces" ip || return 1
    ax_clean_etcd_namespaces
    # The shell's pid names the namespaces, links and subnet, so two suites never share them.
    tag="axe$$"; net="10.231.$(($$ % 250))"
    AX_ETCD_CLUSTER_BRIDGE="${tag}b"
    ip link add "$AX_ETCD_CLUSTER_BRIDGE" type bridge
    ip addr add "$net.1/24" dev "$AX_ETCD_CLUSTER_BRIDGE"
    ip link set "$AX_ETCD_CLUSTER_BRIDGE" up
  fi
  for i in 1 2 3; do
    names[i]="m$i"
    if [ -n "$net" ]; then
      hosts[i]="$net.1$i"; cports[i]=2379; pports[i]=2380
      ip netns add "${tag}m$i"
      ip link add "${tag}m$i" type veth peer name eth0 netns "${tag}m$i"
      ip link set "${tag}m$i" master "$AX_ETCD_CLUSTER_BRIDGE" up
      ip -n "${tag}m$i" addr add "${hosts[i]}/24" dev eth0
      ip -n "${tag}m$i" link set eth0 up
      ip -n "${tag}m$i" link set lo up
      AX_ETCD_CLUSTER_LINKS+="${AX_ETCD_CLUSTER_LINKS:+,}${tag}m$i"
    else
      hosts[i]=127.0.0.1; cports[i]=$(ax_free_port); pports[i]=$(ax_free_port)
    fi
    initial+="${initial:+,}m$i=http://${hosts[i]}:${pports[i]}"
  done
  for i in 1 2 3; do
    mkdir -p "$dir/${names[i]}"
    host=${hosts[i]}
    # setsid, as in ax_start_servers. Each member has its own data folder and log.
    # `ip netns exec` execs etcd itself, so $! is the member's pid either way.
    setsid ${net:+ip netns exec "${tag}m$i"} etcd --name "${names[i]}" \
      --data-dir "$dir/${names[i]}/data" \
      --listen-client-urls "http://$host:${cports[i]}" \
      --advertise-client-urls "http://$host:${cports[i]}" \
      --listen-peer-urls "http://$host:${pports[i]}" \
      --initial-advertise-peer-urls "http://$host:${pports[i]}" \
      --initial-cluster "$initial" --initial-cluster-token "$cluster_token" \
      --initial-cluster-state new >"$dir/${names[i]}/etcd.log" 2>&1 &
    AX_ETCD_CLUSTER_PIDS+="${AX_ETCD_CLUSTER_PIDS:+,}$!"
    AX_ETCD_CLUSTER+="${AX_ETCD_CLUSTER:+,}http://$host:${cports[i]}"
  done
  export AX_ETCD_CLUSTER AX_ETCD_CLUSTER_PIDS AX_ETCD_CLUSTER_LINKS AX_ETCD_CLUSTER_BRIDGE
  ax_wait "etcd cluster" 150 env ETCDCTL_API=3 etcdctl --endpoints "$AX_ETCD_CLUSTER" \
    endpoint health --cluster \
    || { for i in 1 2 3; do tail -5 "$dir/${names[i]}/etcd.log" >&2; done; return 1; }
}

# Removes the namespaces and bridges of etcd clusters whose shell is gone (a suite killed
# before its cleanup), and with `all` this shell's own too.
ax_clean_etcd_namespaces() {
  local which=${1:-} ns owner link
  for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(axe[0-9]*m[0-9]\).*/\1/p'); do
    owner=${ns#axe}; owner=${owner%m*}
    if [ "$which" = all ] && [ "$owner" = "$$" ] || ! kill -0 "$owner" 2>/dev/null; then
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  for link in $(ip -o link show type bridge 2>/dev/null | sed -n 's/^[0-9]*: \(axe[0-9]*b\)[:@].*/\1/p'); do
    owner=${link#axe}; owner=${owner%b}
    if [ "$which" = all ] && [ "$owner" = "$$" ] || ! kill -0 "$owner" 2>/dev/null; then
      ip link del "$link" 2>/dev/null || true
    fi
  done
}

ax_stop_etcd_cluster() {
  local pid link
  # A member still cut off would wait for its peers on SIGTERM (a leader hands its role
  # over first): every link joins the bridge again before the stop.
  for link in ${AX_ETCD_CLUSTER_LINKS//,/ }; do
    ip link set "$link" master "$AX_ETCD_CLUSTER_BRIDGE" 2>/dev/null || true
  done
  for pid in ${AX_ETCD_CLUSTER_PIDS//,/ }; do
    kill -CONT "$pid" 2>/dev/null || true # a member a test left stopped
  done
  # shellcheck disable=SC2086 # the pids are words on purpose
  ax_stop_pids ${AX_ETCD_CLUSTER_PIDS//,/ }
  if [ -n "${AX_ETCD_CLUSTER_BRIDGE:-}" ]; then
    ax_clean_etcd_namespaces all
    AX_ETCD_CLUSTER_BRIDGE="" AX_ETCD_CLUSTER_LINKS=""
  fi
}
