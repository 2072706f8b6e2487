#!/usr/bin/env bash
# Runs one benchmark worker per host of a running `causeway-netsim up` testbed,
# torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CAUSEWAY_DOMAIN),
# and prints rank 0's JSON lines. Works for both implementations:
#
#   bench/run_testbed.sh TAG PORT target/release/causeway-allreduce-bench --sizes 1M,16M
#   bench/run_testbed.sh TAG PORT python3 bench/gloo_allreduce.py --sizes 1M,16M
#
# Each rank's stderr goes to ${LOGDIR:-/tmp}/bench-TAG-rankN.log.
# Hosts are taken in order cw-TAG-d0h0, d0h1, d1h0, ...; rank 0 (the master) is d0h0.
set -euo pipefail
tag=$1 port=$2
shift 2
mapfile -t hosts < <(ip netns list | awk '{print $1}' | grep -E "^cw-${tag}-d[0-9]+h[0-9]+$" | sort -V)
[ ${#hosts[@]} -gt 0 ] || { echo "no hosts for testbed ${tag} (causeway-netsim up --tag ${tag})" >&2; exit 1; }
world=${#hosts[@]}
master=$(ip netns exec "${hosts[0]}" ip -4 -o addr show | awk '$2 != "lo" {split($4, a, "/"); print a[1]; exit}')
pids=()
for rank in "${!hosts[@]}"; do
  ns=${hosts[$rank]}
  domain=$(sed -E 's/^cw-.*-(d[0-9]+)h[0-9]+$/\1/' <<<"$ns")
  # Gloo picks its interface from the hostname, which inside a namespace resolves
  # to nothing reachable: name the namespace's interface (Causeway ignores this).
  ifname=$(ip netns exec "$ns" ip -4 -o addr show | awk '$2 != "lo" {print $2; exit}')
  out=/dev/null
  [ "$rank" -eq 0 ] && out=/dev/stdout
  ip netns exec "$ns" env RANK="$rank" WORLD_SIZE="$world" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    MASTER_ADDR="$master" MASTER_PORT="$port" CAUSEWAY_DOMAIN="$domain" GLOO_SOCKET_IFNAME="$ifname" "$@" >"$out" 2>"${LOGDIR:-/tmp}/bench-${tag}-rank${rank}.log" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
exit $status
