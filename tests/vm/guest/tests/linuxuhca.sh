#!/bin/sh
# Linux and uhca talk (issue 12, stage 3): two mock functions on one InfiniBand fabric of
# one uhca-vfio-user-server. The second is bound to vfio-pci for uhca's examples
# (--device); the first gets Linux's mlx5_core and mlx5_ib, and rdma-core's tools run on it
# through libibverbs and Debian's libmlx5, which write the WQEs and poll the CQEs the model
# handles. rdma-core's ibv_rc_pingpong and ibv_ud_pingpong against uhca's rc_pingpong and
# ud_pingpong, each way round. A third function gets Linux's driver too (mlx5_1): rdma-core's
# ibv_xsrq_pingpong (XRC SRQs, XRC initiator and target QPs) and ibv_srq_pingpong (RC QPs
# sharing one SRQ, an RMP at ISSI 1) between mlx5_0 and mlx5_1, libmlx5 on both sides. One
# PASS/FAIL line per check.
. /tests/lib.sh
pass=0 fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
check() { name=$1; shift; if "$@"; then ok "$name"; else ko "$name"; fi; }
finish() { echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit $?; }

modprobe vfio_iommu_type1 && modprobe vfio_pci || { echo "cannot load vfio_pci"; exit 2; }
echo 16 > /proc/sys/vm/nr_hugepages
fns=$(pci_find 0x15b3 0x101d)
echo "mock functions:" $fns
check "three ConnectX functions (15b3:101d) enumerated" [ "$(echo $fns | wc -w)" -eq 3 ]
linux=$(echo $fns | cut -d' ' -f1)
uhca=$(echo $fns | cut -d' ' -f2)
linux2=$(echo $fns | cut -d' ' -f3)
[ -n "$uhca" ] || finish
# vfio-pci first (driver_override keeps mlx5_core off it), then Linux's driver.
check "$uhca bound to vfio-pci (uhca's)" bind_vfio "$uhca"
modprobe mlx5_core
modprobe mlx5_ib
modprobe ib_uverbs
for _ in $(seq 50); do
  [ -e /dev/infiniband/uverbs0 ] && [ -e /dev/infiniband/uverbs1 ] && break
  sleep 0.1
done
check "$linux bound to mlx5_core (Linux's)" [ "$(driver_of "$linux")" = mlx5_core ]
check "$linux2 bound to mlx5_core (Linux's)" [ "$(driver_of "$linux2")" = mlx5_core ]
# The InfiniBand device mlx5_ib registered on a PCI function (its parent in sysfs).
ibdev_of() {
  for d in /sys/bus/pci/devices/"$1"/infiniband/*; do
    [ -e "$d" ] && echo "${d##*/}" && return 0
  done
  ls -l /sys/class/infiniband/ >&2
}
ibdev=$(ibdev_of "$linux")
ibdev2=$(ibdev_of "$linux2")
check "mlx5_ib registered ${ibdev:-no device} on $linux" [ -n "$ibdev" ]
check "mlx5_ib registered ${ibdev2:-no device} on $linux2" [ -n "$ibdev2" ]
[ -n "$ibdev" ] || finish
# port_active DEV: its port 1 ACTIVE with a LID (prints the LID).
port_active() {
  ibv_devinfo -d "$1" > /tmp/devinfo.out 2>&1
  grep -E 'hca_id|state|port_lid|sm_lid' /tmp/devinfo.out >&2
  grep -q 'state:.*PORT_ACTIVE' /tmp/devinfo.out || return 1
  lid=$(sed -n 's/.*port_lid:[[:space:]]*//p' /tmp/devinfo.out)
  [ -n "$lid" ] && [ "$lid" -gt 0 ] && echo "$lid"
}
lid1=$(port_active "$ibdev")
check "ibv_devinfo: $ibdev's port ACTIVE with a LID (${lid1:-none})" [ -n "$lid1" ]

# pair NAME SERVER_CMD CLIENT_CMD: the server in the background, the client against
# 127.0.0.1 (the out-of-band exchange over the guest's loopback, the traffic over the mock
# fabric); a PASS/FAIL line for each side's exit status and its "100 iters" line.
pair() {
  pname=$1 srv=$2 cli=$3 iters=${4:-100}
  t=$(up)
  timeout 60 $srv > /tmp/srv.out 2>&1 &
  spid=$!
  sleep 1
  timeout 60 $cli 127.0.0.1 > /tmp/cli.out 2>&1
  crc=$?
  wait $spid
  src=$?
  echo "--- $pname, server: $srv"; cat /tmp/srv.out
  echo "--- $pname, client: $cli 127.0.0.1"; cat /tmp/cli.out
  echo "$pname took $(since "$t") s"
  check "$pname: server exits 0 ($srv)" [ $src -eq 0 ]
  check "$pname: client exits 0 ($cli)" [ $crc -eq 0 ]
  check "$pname: $iters iterations reported by both sides" \
    sh -c "grep -q '^$iters iters' /tmp/srv.out && grep -q '^$iters iters' /tmp/cli.out"
}
# Data checked (-c/--chk on both sides): uhca's client sends 0xc5 bytes with 0 at each page's
# first byte and checks that every pong is exactly that, a round trip through Linux's
# receive and send; uhca's server starts its buffer as 0x5a and checks that every ping is
# what rdma-core's client sends (0x7b, with ibv_rc_pingpong --chk's 0 at each page's first
# byte); ibv_rc_pingpong --chk checks those bytes of what it receives. ibv_ud_pingpong has
# no --chk: its side of the check is uhca's.
ibv="-d $ibdev -i 1 -n 100"
dev="--device $uhca -n 100 --chk"
chk() {
  check "$1: uhca checked 100 messages ($2)" grep -q '^--chk: 100 messages received as sent' "$3"
}
pair "RC: Linux serves, uhca connects" "ibv_rc_pingpong $ibv --chk" "rc_pingpong $dev"
chk "RC: Linux serves, uhca connects" "round trips of its own data" /tmp/cli.out
pair "RC: uhca serves, Linux connects" "rc_pingpong $dev" "ibv_rc_pingpong $ibv --chk"
chk "RC: uhca serves, Linux connects" "rdma-core's data" /tmp/srv.out
# UD: the same datagram size on both sides, given (rdma-core's ud_pingpong posted 1064-byte
# receives, 1024 + the GRH, where uhca's default datagram is 2048 bytes).
pair "UD: Linux serves, uhca connects" "ibv_ud_pingpong $ibv -s 1024" "ud_pingpong $dev -s 1024"
chk "UD: Linux serves, uhca connects" "round trips of its own data" /tmp/cli.out
pair "UD: uhca serves, Linux connects" "ud_pingpong $dev -s 1024" "ibv_ud_pingpong $ibv -s 1024"
chk "UD: uhca serves, Linux connects" "rdma-core's data" /tmp/srv.out

# XRC and SRQ between Linux's two devices, after uhca's runs: libmlx5 writes the WQEs (the XRC
# segment with the remote SRQ number) and reads the CQEs on both sides.
lid2=
[ -n "$ibdev2" ] && lid2=$(port_active "$ibdev2")
check "ibv_devinfo: ${ibdev2:-the second device}'s port ACTIVE with a LID (${lid2:-none})" \
  sh -c "[ -n '$lid2' ] && [ '$lid2' != '$lid1' ]"
if [ -n "$lid2" ]; then
  # ibv_xsrq_pingpong: each side an XRC domain, an XRC SRQ with its CQ, an XRC target (recv)
  # and an XRC initiator (send) QP; each message goes from the initiator to the peer's
  # target naming the peer's SRQ, whose completion triggers the next; "success" at the end.
  # The tool has no data check.
  x="-i 1 -n 50"
  xpair() {
    pname=$1 sdev=$2 cdev=$3
    t=$(up)
    timeout 30 ibv_xsrq_pingpong -d "$sdev" $x > /tmp/srv.out 2>&1 &
    spid=$!
    sleep 1
    timeout 30 ibv_xsrq_pingpong -d "$cdev" $x 127.0.0.1 > /tmp/cli.out 2>&1
    crc=$?
    wait $spid
    src=$?
    echo "--- $pname, server: ibv_xsrq_pingpong -d $sdev $x"; cat /tmp/srv.out
    echo "--- $pname, client: ibv_xsrq_pingpong -d $cdev $x 127.0.0.1"; cat /tmp/cli.out
    echo "$pname took $(since "$t") s"
    check "$pname: server exits 0 and reports success" \
      sh -c "[ $src -eq 0 ] && grep -q '^success' /tmp/srv.out"
    check "$pname: client exits 0 and reports success" \
      sh -c "[ $crc -eq 0 ] && grep -q '^success' /tmp/cli.out"
  }
  xpair "XRC: $ibdev serves, $ibdev2 connects" "$ibdev" "$ibdev2"
  xpair "XRC: $ibdev2 serves, $ibdev connects" "$ibdev2" "$ibdev"
  # Two clients on the second device share one XRC domain (ib_uverbs finds it by the file
  # /tmp/xrc_domain both open), each with its own XRC SRQ and target QP. The server (-c 2)
  # sends each client's messages through its two initiators in turn, so half of them reach
  # a client through the other client's target QP, naming its own SRQ: one target feeding
  # an SRQ of another process in its domain.
  pname="XRC: $ibdev serves two clients on $ibdev2 sharing a domain"
  t=$(up)
  timeout 30 ibv_xsrq_pingpong -d "$ibdev" $x -c 2 > /tmp/srv.out 2>&1 &
  spid=$!
  sleep 1
  timeout 30 ibv_xsrq_pingpong -d "$ibdev2" $x 127.0.0.1 > /tmp/cli2.out 2>&1 &
  c2pid=$!
  timeout 30 ibv_xsrq_pingpong -d "$ibdev2" $x 127.0.0.1 > /tmp/cli.out 2>&1
  crc=$?
  wait $c2pid
  c2rc=$?
  wait $spid
  src=$?
  echo "--- $pname, server: ibv_xsrq_pingpong -d $ibdev $x -c 2"; cat /tmp/srv.out
  echo "--- $pname, clients: ibv_xsrq_pingpong -d $ibdev2 $x 127.0.0.1 (two)"
  cat /tmp/cli.out /tmp/cli2.out
  echo "$pname took $(since "$t") s"
  check "$pname: server exits 0 and reports success" \
    sh -c "[ $src -eq 0 ] && grep -q '^success' /tmp/srv.out"
  check "$pname: both clients exit 0 and report success" \
    sh -c "[ $crc -eq 0 ] && [ $c2rc -eq 0 ] && grep -q '^success' /tmp/cli.out &&
      grep -q '^success' /tmp/cli2.out"
  # ibv_srq_pingpong: 4 RC QPs on each side sharing one SRQ (Linux creates it as an RMP) and
  # one CQ; 200 exchanges in all. --chk: the server checks the first byte of each page of
  # what it received (rdma-core's check; the buffer starts zeroed, so it is weak).
  s="-i 1 -q 4 -r 16 -n 200 --chk"
  pair "SRQ: $ibdev serves, $ibdev2 connects" "ibv_srq_pingpong -d $ibdev $s" \
    "ibv_srq_pingpong -d $ibdev2 $s" 200
  check "SRQ: no invalid data reported" sh -c "! grep -q 'invalid data' /tmp/srv.out /tmp/cli.out"
fi

echo "--- kernel log (mlx5):"
dmesg | grep -i 'mlx5' | grep -v 'uhca-rig-mark'
check "kernel log: no mlx5 warning or error" \
  sh -c "! dmesg -r | grep mlx5 | grep -q '^<[0-4]>'"
rmmod mlx5_ib
rmmod mlx5_core
check "rmmod mlx5_ib and mlx5_core" [ -z "$(driver_of "$linux")" ]
finish
