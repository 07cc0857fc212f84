#!/usr/bin/env bash
# An emulated cluster inside this machine: N "nodes" as Linux network
# namespaces joined by veth pairs to a bridge, each node's link shaped with tc,
# and mpirun across them with Open MPI over TCP (no shared memory between
# nodes; ranks of one node share memory as on a real one). Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN).
#
#   scripts/cluster.sh up [--nodes 2] [--rate 1gbit|250mbit|none] [--name kdpc]
#   scripts/cluster.sh run [--ranks-per-node 1] [--name kdpc] -- PROGRAM ARGS...
#   scripts/cluster.sh link NODE up|down [--name kdpc]   # a node loses (or regains) its link
#   scripts/cluster.sh down [--name kdpc]
#   scripts/cluster.sh check                              # can this machine make namespaces?
#
# Node i is the namespace <name><i> with hostname <name><i> (for MPI's and
# kdp's messages) and address 192.168.<subnet>.<i+1> on its eth0; the bridge
# <name>br has no address, so traffic stays between the nodes. --rate shapes
# each node's egress with a token bucket (tbf); links cannot be given latency
# here: the kernel has no netem (sch_netem). Veth TCP on a 2-core machine
# carries about 1-1.5 Gbit/s, so rates at or below 1 Gbit/s are what a node
# would see. `run` starts mpirun in node 0 (ranks there are local), the
# others through an rsh agent that runs `ip netns exec`. Everything `up`
# created is removed by `down`, and by `up` itself when it fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

cmd=${1:-}
[[ -n $cmd ]] && shift
name=kdpc nodes=2 rate=none ranks_per_node=1 node= state=
subnet=223
while (($# > 0)); do
  case $1 in
  --name) name=$2; shift 2 ;;
  --nodes) nodes=$2; shift 2 ;;
  --rate) rate=$2; shift 2 ;;
  --ranks-per-node) ranks_per_node=$2; shift 2 ;;
  --) shift; break ;;
  *)
    if [[ $cmd == link && -z $node ]]; then node=$1; shift
    elif [[ $cmd == link && -z $state ]]; then state=$1; shift
    else break; fi ;;
  esac
done
[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "cluster.sh: --name must be 1-8 lowercase letters/digits" >&2; exit 2; }
[[ $nodes =~ ^[0-9]+$ ]] && ((nodes >= 1 && nodes <= 16)) || { echo "cluster.sh: --nodes must be 1 to 16" >&2; exit 2; }
dir=/run/kdp-cluster-$name
bridge=${name}br

node_ns() { echo "$name$1"; }
node_ip() { echo "192.168.$subnet.$(($1 + 1))"; }

check() {
  local probe=kp$$  # short: a veth name holds at most 15 characters
  command -v ip >/dev/null && command -v tc >/dev/null || { echo "iproute2 (ip, tc) is not installed"; return 1; }
  if ! ip netns add "$probe" 2>/dev/null; then echo "this machine cannot create network namespaces (ip netns add failed: not root, or no CAP_SYS_ADMIN)"; return 1; fi
  if ! ip link add "${probe}v" type veth peer name eth0 netns "$probe" 2>/dev/null; then
    ip netns del "$probe"; echo "this machine cannot create veth pairs"; return 1
  fi
  if ! ip netns exec "$probe" tc qdisc add dev eth0 root tbf rate 1gbit burst 256kb latency 20ms 2>/dev/null; then
    ip netns del "$probe"; echo "this machine cannot shape links (tc qdisc tbf)"; return 1
  fi
  ip netns del "$probe"
  command -v mpirun >/dev/null || { echo "mpirun is not installed"; return 1; }
  return 0
}

down() {
  local removed=0
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name}[0-9]+$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" && removed=$((removed + 1))
  done
  ip link show "$bridge" >/dev/null 2>&1 && ip link del "$bridge"
  for v in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${name}v[0-9]+$" || true); do
    ip link del "$v" 2>/dev/null || true
  done
  rm -rf "$dir"
  echo "cluster $name: down ($removed node(s) removed)"
}

up() {
  check >/dev/null || { echo "cluster.sh: $(check)" >&2; exit 77; }
  [[ -d $dir ]] && { echo "cluster.sh: cluster $name is up already (scripts/cluster.sh down --name $name)" >&2; exit 1; }
  trap 'echo "cluster.sh: up failed; removing what it made" >&2; down >/dev/null' ERR
  mkdir -p "$dir"
  ip link add "$bridge" type bridge
  ip link set "$bridge" up
  : >"$dir/hosts"
  for ((i = 0; i < nodes; i++)); do
    local ns ip
    ns=$(node_ns "$i") ip=$(node_ip "$i")
    ip netns add "$ns"
    ip link add "${name}v$i" type veth peer name eth0 netns "$ns"
    ip link set "${name}v$i" master "$bridge"
    ip link set "${name}v$i" up
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # A node that is gone is noticed in seconds, as a cluster's fabric would:
    # TCP gives up after 4 retransmissions (about 6 s) instead of 15 (15 min).
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=4 ||
      echo "cluster.sh: note: cannot set tcp_retries2 in $ns; a lost node is noticed late" >&2
    if [[ $rate != none ]]; then
      # A token bucket on the node's egress: its link's rate.
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 20ms
    fi
    echo "$ip $ns" >>"$dir/hosts"
  done
  echo "$rate" >"$dir/rate"
  # The rsh agent Open MPI starts remote daemons with: the node's namespace,
  # under the node's hostname.
  cat >"$dir/agent" <<EOF
#!/bin/sh
host=\$1; shift
ns=\$(awk -v h="\$host" '\$1 == h {print \$2}' "$dir/hosts")
[ -n "\$ns" ] || { echo "cluster agent: unknown node \$host" >&2; exit 1; }
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
EOF
  chmod +x "$dir/agent"
  trap - ERR
  echo "cluster $name: $nodes node(s) $(awk '{print $2 "=" $1}' "$dir/hosts" | xargs), link rate $rate"
}

run() {
  [[ -f $dir/hosts ]] || { echo "cluster.sh: cluster $name is not up (scripts/cluster.sh up --name $name)" >&2; exit 1; }
  (($# > 0)) || { echo "cluster.sh run: give the program after --" >&2; exit 2; }
  local hosts n head_ns subnet_cidr flags
  hosts=$(awk -v r="$ranks_per_node" '{printf "%s%s:%d", (NR > 1 ? "," : ""), $1, r}' "$dir/hosts")
  n=$(($(wc -l <"$dir/hosts") * ranks_per_node))
  head_ns=$(awk 'NR == 1 {print $2}' "$dir/hosts")
  subnet_cidr="192.168.$subnet.0/24"
  # Unbound: each node's daemon sees every core of the machine and would bind
  # its first rank to core 0, putting the ranks of all nodes on one core.
  flags=(--oversubscribe --bind-to none)
  [[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
  # TCP between nodes, shared memory (vader) only between the ranks of one
  # node: Open MPI tells nodes apart by their daemons, one per namespace.
  # Two TCP connections per pair of ranks: on one, a ring step's two
  # directions share the connection and its acknowledgements wait behind the
  # data (a 4 MB allreduce of 2 ranks at 1 Gbit/s: 65 ms on one, 37 ms on two).
  flags+=(--host "$hosts" -np "$n" --mca plm_rsh_agent "$dir/agent" --mca plm_rsh_no_tree_spawn 1
          --mca btl tcp,vader,self --mca btl_tcp_links 2 --mca btl_tcp_if_include "$subnet_cidr"
          --mca oob_tcp_if_include "$subnet_cidr"
          --mca oob_tcp_keepalive_time 3 --mca oob_tcp_keepalive_intvl 1
          --mca oob_tcp_keepalive_probes 3)
  # The caller's KDP_* settings reach every rank.
  local env_flags=()
  while IFS='=' read -r key _; do env_flags+=(-x "$key"); done < <(env | grep -E '^KDP_[A-Z_]+=' || true)
  local cmdline
  printf -v cmdline '%q ' mpirun "${flags[@]}" "${env_flags[@]}" "$@"
  exec ip netns exec "$head_ns" unshare --uts sh -c "hostname $head_ns; cd $(printf %q "$PWD"); exec $cmdline"
}

link() {
  [[ -f $dir/hosts ]] || { echo "cluster.sh: cluster $name is not up" >&2; exit 1; }
  [[ $state == up || $state == down ]] || { echo "cluster.sh link NODE up|down" >&2; exit 2; }
  local count
  count=$(wc -l <"$dir/hosts")
  [[ $node =~ ^[0-9]+$ ]] && ((node < count)) ||
    { echo "cluster.sh link: node '$node' is not one of 0 to $((count - 1)) of cluster $name" >&2; exit 2; }
  ip -n "$(node_ns "$node")" link set eth0 "$state"
  echo "cluster $name: node $node's link $state"
}

case $cmd in
up) up ;;
down) down ;;
run) run "$@" ;;
link) link ;;
check) if msg=$(check); then echo "ok: network namespaces, veth pairs, tc tbf and mpirun are available"; else echo "$msg"; exit 77; fi ;;
*) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
