#!/bin/sh
# uhca against Linux Soft-RoCE and rdma-core's tools. rxe0 sits on veth0 (10.9.0.1) in the
# root namespace; uhca's examples run in the namespace "uh" on veth1 (10.9.0.2) with
# --udp 10.9.0.2: one mock HCA driven by uhca whose RoCEv2 port is a UDP socket on
# 10.9.0.2:4791, GID 0 = ::ffff:10.9.0.2. Each pair of programs does rdma-core's
# out-of-band exchange over TCP (port 18515). rxe verifies the ICRC of every packet, that
# the source address matches the GID the peer advertised, and the PSNs.
#
# Runs: rc_pingpong server / ibv_rc_pingpong client, and the reverse; ud_pingpong /
# ibv_ud_pingpong both ways; examples/rdma_rw.rs against src/rdma_rw_verbs.c (libibverbs)
# both ways: RDMA WRITE and RDMA READ in both directions, the data checked on both sides.
# Fails on any program failing, on rxe's error counters going up (sequence errors, retries
# exceeded, send errors) and on "bad ICRC" in the kernel log. Retransmissions
# (completer_retry_err: rxe's timeouts; duplicate_request: uhca's retransmitted requests)
# are reported, not failed on: both sides use 67 ms ACK timeouts (timeout 14), which the
# emulated machine exceeds now and then (the mock HCA took 112 ms to acknowledge a
# 64-packet WRITE in one capture); the duplicates are answered as the protocol says.
# Kernel command line: rig.rxe_iters=N, ping-pong iterations per run (default 200);
# rig.rxe_pcap=1 (see below).
. /tests/lib.sh
ip() { /usr/sbin/ip "$@"; }     # iproute2 (netns), not busybox's applet
t0=$(up)
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^$1=//p" | tail -1; }
N=$(arg rig.rxe_iters); N=${N:-200}
RXE_IP=10.9.0.1 UH_IP=10.9.0.2 NS=uh

echo 4 > /proc/sys/kernel/printk    # keep link messages off the console
# rdma_rxe needs the crc32 crypto modules first.
modprobe crc32-pclmul 2>/dev/null; modprobe crc32_generic
for m in veth ib_uverbs rdma_rxe rdma_ucm; do modprobe $m || { echo "cannot load $m"; exit 2; }; done

# Room for bursts in the UDP socket of uhca's uplink (a 64 KiB RDMA WRITE is 64 datagrams
# that arrive while the emulated CPU may be busy elsewhere): a datagram dropped there is a
# PSN gap that uhca, correctly, answers with a sequence-error NAK. The drops are counted
# below (RcvbufErrors).
echo 4194304 > /proc/sys/net/core/rmem_max
echo 4194304 > /proc/sys/net/core/rmem_default
ip link add veth0 type veth peer name veth1 || exit 3
ip netns add $NS || exit 3
ip link set veth1 netns $NS
ip addr add $RXE_IP/24 dev veth0
ip link set veth0 up
ip netns exec $NS /usr/sbin/ip link set lo up
ip netns exec $NS /usr/sbin/ip addr add $UH_IP/24 dev veth1
ip netns exec $NS /usr/sbin/ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0 || { echo "rdma link add failed"; exit 3; }
rdma link show
ibv_devinfo -d rxe0 | grep -E 'hca_id|state|active_mtu|link_layer' || exit 4

# rxe's RoCEv2 GID for 10.9.0.1 (::ffff:10.9.0.1).
P=/sys/class/infiniband/rxe0/ports/1
want=0000:0000:0000:0000:0000:ffff:0a09:0001
G=""
for i in $(seq 0 15); do
  gid=$(cat $P/gids/$i 2>/dev/null) || continue
  typ=$(cat $P/gid_attrs/types/$i 2>/dev/null)
  [ "$gid" = 0000:0000:0000:0000:0000:0000:0000:0000 ] || echo "rxe0 gid[$i] $gid $typ"
  [ -z "$G" ] && [ "$gid" = $want ] && [ "$typ" = "RoCE v2" ] && G=$i
done
[ -n "$G" ] || { echo "rxe0 has no RoCE v2 GID for $RXE_IP"; exit 4; }
echo "rxe0: RoCE v2 GID index $G"
t1=$(up)

# rig.rxe_pcap=1: capture veth0 (headers only) and print it, base64, between
# PCAP-BEGIN and PCAP-END (decode: sed -n '/PCAP-BEGIN/,/PCAP-END/p' | grep -v PCAP | base64 -d).
if [ "$(arg rig.rxe_pcap)" = 1 ]; then
  tcpdump -Z root -U -i veth0 -n -s 128 -w /run/rxe.pcap 2>/dev/null &
  PCAP_PID=$!
  sleep 1
fi
counters() { for f in $P/hw_counters/*; do echo "${f##*/} $(cat "$f")"; done; }
counters > /run/cnt.before
bad_icrc_before=$(dmesg | grep -c 'bad ICRC')

# Waits until something listens on TCP 18515 (in namespace $1, or the root one).
wait_listen() {
  for _ in $(seq 1 200); do
    if [ -n "$1" ]; then ip netns exec "$1" cat /proc/net/tcp; else cat /proc/net/tcp; fi |
      grep -q ':4853 00000000:0000 0A' && return 0
    sleep 0.1
  done
  echo "nothing listens on port 18515"; return 1
}
fail=0
# run NAME SERVER-IN-NS(1|0) "server command" "client command"
run() {
  name=$1 srv_ns=$2 srv=$3 cli=$4
  s=$(up)
  counters > /run/cnt.run
  echo "--- $name"
  if [ "$srv_ns" = 1 ]; then
    echo "+ [ns $NS] $srv"; echo "+ $cli"
    ip netns exec $NS timeout 90 $srv > /run/srv.log 2>&1 &
    wait_listen $NS
    timeout 90 $cli > /run/cli.log 2>&1; crc=$?
  else
    echo "+ $srv"; echo "+ [ns $NS] $cli"
    timeout 90 $srv > /run/srv.log 2>&1 &
    wait_listen ""
    ip netns exec $NS timeout 90 $cli > /run/cli.log 2>&1; crc=$?
  fi
  wait $!; src=$?
  sed 's/^/  server: /' /run/srv.log; sed 's/^/  client: /' /run/cli.log
  r=PASS
  if [ $src -ne 0 ] || [ $crc -ne 0 ]; then r=FAIL; fail=$((fail + 1)); fi
  echo "$r $name (server rc=$src, client rc=$crc) $(since "$s") s"
  # rxe's counters that moved during this run
  counters | while read -r k v; do
    o=$(sed -n "s/^$k //p" /run/cnt.run)
    [ "$o" = "$v" ] || printf ' %s+%s' "$k" $((v - o))
  done; echo
}

RC_SIZE=4096 UD_SIZE=1024
run "RC: uhca rc_pingpong server, ibv_rc_pingpong client ($N x $RC_SIZE B)" 1 \
  "rc_pingpong --udp $UH_IP -g 0 -n $N -s $RC_SIZE" \
  "ibv_rc_pingpong -d rxe0 -g $G -n $N -s $RC_SIZE $UH_IP"
run "RC: ibv_rc_pingpong server, uhca rc_pingpong client ($N x $RC_SIZE B)" 0 \
  "ibv_rc_pingpong -d rxe0 -g $G -n $N -s $RC_SIZE" \
  "rc_pingpong --udp $UH_IP -g 0 -n $N -s $RC_SIZE $RXE_IP"
run "UD: uhca ud_pingpong server, ibv_ud_pingpong client ($N x $UD_SIZE B)" 1 \
  "ud_pingpong --udp $UH_IP -g 0 -n $N -s $UD_SIZE" \
  "ibv_ud_pingpong -d rxe0 -g $G -n $N -s $UD_SIZE $UH_IP"
run "UD: ibv_ud_pingpong server, uhca ud_pingpong client ($N x $UD_SIZE B)" 0 \
  "ibv_ud_pingpong -d rxe0 -g $G -n $N -s $UD_SIZE" \
  "ud_pingpong --udp $UH_IP -g 0 -n $N -s $UD_SIZE $RXE_IP"
RW_SIZE=65536 RW_N=5
run "RDMA WRITE+READ: uhca rdma_rw server, rdma_rw_verbs client ($RW_N x $RW_SIZE B each way)" 1 \
  "rdma_rw --udp $UH_IP -g 0 -n $RW_N -s $RW_SIZE" \
  "rdma_rw_verbs -d rxe0 -g $G -n $RW_N -s $RW_SIZE $UH_IP"
run "RDMA WRITE+READ: rdma_rw_verbs server, uhca rdma_rw client ($RW_N x $RW_SIZE B each way)" 0 \
  "rdma_rw_verbs -d rxe0 -g $G -n $RW_N -s $RW_SIZE" \
  "rdma_rw --udp $UH_IP -g 0 -n $RW_N -s $RW_SIZE $RXE_IP"

# rxe's view: no sequence errors, no retries exceeded, no ICRC failures.
counters > /run/cnt.after
echo "rxe0 hw_counters (before -> after):"
errs=0
while read -r k v; do
  a=$(sed -n "s/^$k //p" /run/cnt.after)
  echo "  $k $v -> $a"
  case $k in
    out_of_seq_request | rcvd_seq_err | retry_exceeded_err | retry_rnr_exceeded_err | send_err)
      [ "$a" = "$v" ] || { echo "  ^ rxe error counter $k went up"; errs=$((errs + 1)); } ;;
  esac
done < /run/cnt.before
rdma statistic show link rxe0/1
echo "UDP in namespace $NS (uhca's uplink):"; ip netns exec $NS cat /proc/net/snmp | grep '^Udp:' 
bad_icrc=$(($(dmesg | grep -c 'bad ICRC') - bad_icrc_before))
echo "rxe0: 'bad ICRC' kernel messages during the runs: $bad_icrc"
dmesg | grep -i 'rxe\|rdma' | tail -5
[ $bad_icrc -eq 0 ] || errs=$((errs + 1))
if [ -n "${PCAP_PID:-}" ]; then
  kill "$PCAP_PID"; sleep 1
  echo PCAP-BEGIN; base64 /run/rxe.pcap; echo PCAP-END
fi
[ $errs -eq 0 ] || fail=$((fail + 1))
echo "rxe: setup $(echo "$t1 $t0" | awk '{ printf "%.2f", $1 - $2 }') s, total $(since "$t0") s, failures $fail"
exit $fail
