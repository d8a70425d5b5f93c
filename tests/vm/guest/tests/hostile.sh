#!/bin/sh
# The hostile-network comparison on Linux Soft-RoCE: tests/hostile_net/hostile.py (scapy,
# the host's interpreter and only the files it loads) runs in the namespace "uh" and throws
# crafted RoCEv2 packets from veth1 (10.9.0.2) at a QP of rxe0 (veth0, 10.9.0.1), created by
# hostile_verbs (libibverbs) in the root namespace. Each case prints PASS/FAIL with rxe's
# answer (and the specification's where they differ); the last line is "N passed, M failed".
# The same cases run against the mock in the host's cargo test (tests/hostile_net.rs).
# Sets up rxe0 and the namespace itself unless the rxe test, run before it in the same boot,
# already did. Kernel command line: rig.hostile_only=a,b (run only those cases).
. /tests/lib.sh
ip() { /usr/sbin/ip "$@"; }     # iproute2 (netns), not busybox's applet
t0=$(up)
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^$1=//p" | tail -1; }
RXE_IP=10.9.0.1 UH_IP=10.9.0.2 NS=uh
P=/sys/class/infiniband/rxe0/ports/1

if [ ! -e /sys/class/infiniband/rxe0 ]; then
  echo 4 > /proc/sys/kernel/printk
  modprobe crc32-pclmul 2>/dev/null; modprobe crc32_generic
  for m in veth ib_uverbs rdma_rxe; do modprobe $m || { echo "cannot load $m"; exit 2; }; done
  ip link add veth0 type veth peer name veth1 || exit 3
  ip netns add $NS || exit 3
  ip link set veth1 netns $NS
  ip addr add $RXE_IP/24 dev veth0
  ip link set veth0 up
  ip netns exec $NS /usr/sbin/ip link set lo up
  ip netns exec $NS /usr/sbin/ip addr add $UH_IP/24 dev veth1
  ip netns exec $NS /usr/sbin/ip link set veth1 up
  rdma link add rxe0 type rxe netdev veth0 || { echo "rdma link add failed"; exit 3; }
fi
# rxe's RoCEv2 GID for 10.9.0.1 (::ffff:10.9.0.1).
want=0000:0000:0000:0000:0000:ffff:0a09:0001
G=""
for i in $(seq 0 15); do
  gid=$(cat $P/gids/$i 2>/dev/null) || continue
  typ=$(cat $P/gid_attrs/types/$i 2>/dev/null)
  [ -z "$G" ] && [ "$gid" = $want ] && [ "$typ" = "RoCE v2" ] && G=$i
done
[ -n "$G" ] || { echo "rxe0 has no RoCE v2 GID for $RXE_IP"; exit 4; }
echo "rxe0: RoCE v2 GID index $G, $(cat $P/active_mtu 2>/dev/null || true)"
only=$(arg rig.hostile_only)
# hostile.py runs in "uh" (its raw socket and UDP port are on veth1); it starts the target
# in the root namespace, where rxe0 is (busybox nsenter into PID 1's network namespace).
ip netns exec $NS python3 /hostile_net/hostile.py --as rxe --local $UH_IP --remote $RXE_IP \
  --quiet 0.6 ${only:+--only "$only"} \
  --target-cmd "nsenter -t 1 -n hostile_verbs -d rxe0 -g $G"
rc=$?
echo "rxe0 hw_counters (non-zero):"
for f in $P/hw_counters/*; do v=$(cat "$f"); [ "$v" = 0 ] || echo "  ${f##*/} $v"; done
echo "hostile: $(since "$t0") s, status $rc"
exit $rc
