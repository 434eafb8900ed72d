#!/usr/bin/env bash
# Two hosts on one machine: runs `shadowsync train` with its ranks in two network
# namespaces joined by a veth pair, so that every byte between the ranks crosses
# a network interface through Open MPI's TCP transport (shared memory is turned
# off), as between two machines.
#
#   scripts/two_hosts.sh [RANKS_PER_HOST] [-- TRAIN FLAGS]
#
# Needs root (ip netns) and a shadowsync built with `--features mpi`
# (`./dev two-hosts` builds it). Prints the run's summary and the bytes the veth
# interface carried; removes the namespaces when done, however it ends.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

per_host=1
if [[ ${1:-} =~ ^[0-9]+$ ]]; then per_host=$1; shift; fi
[[ ${1:-} == -- ]] && shift
exe=$PWD/target/release/shadowsync
[[ -x $exe ]] || { echo "two-hosts: build first: cargo build --release --features mpi" >&2; exit 1; }

net=10.77.0
hosts=(ss-host-a ss-host-b)
work=$(mktemp -d)
cleanup() {
  for ns in "${hosts[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
for ns in "${hosts[@]}"; do ip netns del "$ns" 2>/dev/null || true; done

# Two "hosts", one cable.
for i in 0 1; do ip netns add "${hosts[$i]}"; done
ip link add veth-a netns "${hosts[0]}" type veth peer name veth-b netns "${hosts[1]}"
for i in 0 1; do
  ns=${hosts[$i]} dev=veth-$([[ $i == 0 ]] && echo a || echo b)
  ip -n "$ns" addr add "$net.$((i + 1))/24" dev "$dev"
  ip -n "$ns" link set "$dev" up
  ip -n "$ns" link set lo up
done

# mpirun starts the remote daemon through this "ssh": into host b's namespace.
cat >"$work/netns-rsh" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in
  $net.1) ns=${hosts[0]} ;;
  $net.2) ns=${hosts[1]} ;;
  *) echo "netns-rsh: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
chmod +x "$work/netns-rsh"
printf '%s slots=%d\n%s slots=%d\n' "$net.1" "$per_host" "$net.2" "$per_host" >"$work/hosts"

bytes() { ip -n "${hosts[0]}" -s -j link show veth-a | python3 -c \
  'import json,sys; s=json.load(sys.stdin)[0]["stats64"]; print(s["rx"]["bytes"] + s["tx"]["bytes"])'; }
forward=(-x PATH -x HOME)
for var in LD_LIBRARY_PATH RUST_LOG; do [[ -n ${!var:-} ]] && forward+=(-x "$var"); done
before=$(bytes)
ip netns exec "${hosts[0]}" mpirun --allow-run-as-root --oversubscribe --bind-to none \
  --hostfile "$work/hosts" -np $((2 * per_host)) \
  --mca plm_rsh_agent "$work/netns-rsh" \
  --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
  "${forward[@]}" \
  "$exe" train "$@"
after=$(bytes)
echo "two-hosts: $((2 * per_host)) ranks on 2 network namespaces; veth-a carried $((after - before)) bytes"
