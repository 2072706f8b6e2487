#!/bin/sh
# The WAN router: forwards between the two domain networks through netem
# on both interfaces (each direction gets the profile once).
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq iproute2 kmod
modprobe sch_netem
sysctl -qw net.ipv4.ip_forward=1
for dev in $(ip -o -4 addr show | awk '$4 ~ /^10\.[12]\.0\./ {print $2}'); do
  # limit: enough packets for the bandwidth-delay product at WAN_RATE.
  tc qdisc replace dev "$dev" root netem delay "$WAN_DELAY" "$WAN_JITTER" \
    loss "$WAN_LOSS" rate "$WAN_RATE" limit 100000
done
tc qdisc show
