#!/bin/sh
# The mock ConnectX behind real Linux VFIO: the functions uhca-vfio-user-server serves to
# QEMU's vfio-user-pci appear as PCI devices, are bound to vfio-pci as a user binds a
# ConnectX, and uhca's examples run on them with --device. One PASS/FAIL line per check.
# rig.link=ethernet|infiniband on the kernel command line says which fabric the server
# runs (vfio-user.sh sets it).
. /tests/lib.sh
t0=$(up)
pass=0 fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
check() { name=$1; shift; if "$@"; then ok "$name"; else ko "$name"; fi; }
link=$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^rig.link=//p' | tail -1)
link=${link:-ethernet}
echo "fabric: $link"

modprobe vfio_iommu_type1 && modprobe vfio_pci || { echo "cannot load vfio_pci"; exit 2; }
echo 16 > /proc/sys/vm/nr_hugepages

fns=$(pci_find 0x15b3 0x101d)
echo "mock functions:" $fns
check "three ConnectX functions (15b3:101d) enumerated" [ "$(echo $fns | wc -w)" -eq 3 ]
for f in $fns; do check "$f bound to vfio-pci" bind_vfio "$f"; done
first=$(echo $fns | cut -d' ' -f1)
second=$(echo $fns | cut -d' ' -f2)
# The third function is rdma-core's (mlx5vfio, at the end); uhca never opens it.
third=$(echo $fns | cut -d' ' -f3)
[ -n "$third" ] || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }

t=$(up)
devinfo --device "$first" > /tmp/devinfo.out 2>&1
rc=$?
cat /tmp/devinfo.out
echo "devinfo took $(since "$t") s"
check "devinfo --device $first exits 0" [ $rc -eq 0 ]
check "devinfo: firmware 22.39.1002" grep -q "fw_ver:.*22\.39\.1002" /tmp/devinfo.out
check "devinfo: port 1 active" grep -q "PORT_ACTIVE" /tmp/devinfo.out
if [ "$link" = infiniband ]; then
  check "devinfo: InfiniBand link layer, LID from the subnet manager" \
    grep -q "port_lid:.*[1-9]" /tmp/devinfo.out
  grep -q "link_layer:.*InfiniBand" /tmp/devinfo.out || ko "devinfo: InfiniBand link layer"
else
  check "devinfo: Ethernet link layer" grep -q "link_layer:.*Ethernet" /tmp/devinfo.out
fi
# A second run in a new process: the first one ended with a fast teardown, which only a
# function level reset undoes; vfio-pci's reset on release must have reached the model.
devinfo --device "$first" > /tmp/devinfo2.out 2>&1
check "devinfo --device again (after the close's reset)" [ $? -eq 0 ]

# Server on the second function, client on the first, through the guest's loopback for
# the out-of-band exchange and the mock fabric for the traffic. On Ethernet each side gives
# its port an IP address (--ip: the RoCEv2 GID the example installs, as no kernel driver
# fills the GID table under VFIO): the server 10.0.0.2, the client 10.0.0.1.
sip= cip=
if [ "$link" = ethernet ]; then sip="--ip 10.0.0.2" cip="--ip 10.0.0.1"; fi
# run_pair PROG ARGS...: both sides, their outputs in /tmp/PROG.server and /tmp/PROG.client,
# a PASS/FAIL line for each side's exit status.
run_pair() {
  prog=$1; shift
  t=$(up)
  "$prog" --device "$second" $sip "$@" > "/tmp/$prog.server" 2>&1 &
  srv=$!
  sleep 1
  "$prog" --device "$first" $cip "$@" 127.0.0.1 > "/tmp/$prog.client" 2>&1
  crc=$?
  wait $srv
  src=$?
  echo "--- $prog server:"; cat "/tmp/$prog.server"
  echo "--- $prog client:"; cat "/tmp/$prog.client"
  echo "$prog took $(since "$t") s"
  check "$prog --device $*: server ($second)" [ $src -eq 0 ]
  check "$prog --device $*: client ($first)" [ $crc -eq 0 ]
}
pair() {
  prog=$1
  run_pair "$@"
  check "$prog: 100 iterations reported by both sides" \
    [ "$(grep -c "^100 iters" "/tmp/$prog.server" "/tmp/$prog.client" | grep -c ':1$')" -eq 2 ]
  if [ "$link" = ethernet ]; then
    # Each side sent the RoCEv2 GID of its --ip (::ffff:10.0.0.x) in the exchange.
    check "$prog: RoCEv2 GIDs ::ffff:10.0.0.2 and ::ffff:10.0.0.1 exchanged" \
      grep -q "remote address:.*GID 0000:0000:0000:0000:0000:ffff:0a00:0002" "/tmp/$prog.client"
    grep -q "remote address:.*GID 0000:0000:0000:0000:0000:ffff:0a00:0001" "/tmp/$prog.server" ||
      ko "$prog: the server saw the client's GID ::ffff:10.0.0.1"
  fi
}
pair rc_pingpong -n 100
# A UD message fits the path MTU: 2048 (the default) on InfiniBand, 1024 on Ethernet (the
# model's port MTU there, as ud_pingpong says when asked for more).
if [ "$link" = ethernet ]; then pair ud_pingpong -n 100 -s 1024; else pair ud_pingpong -n 100; fi
if [ "$link" = infiniband ]; then
  # -e: each side sleeps on its CQ's completion events instead of polling. Under --device
  # the example enables MSI-X vector 0 (its event queue's) with VFIO_DEVICE_SET_IRQS: the
  # model's interrupt goes to the server's eventfd, QEMU injects it into the guest, vfio-pci
  # signals the example's eventfd, and the example finds the event and the CQE.
  pair rc_pingpong -n 100 -e
  for side in server client; do
    check "rc_pingpong -e ($side): completion events woken by MSI-X interrupts" \
      grep -Eq "^[1-9][0-9]* completion events, [1-9][0-9]* interrupts" "/tmp/rc_pingpong.$side"
  done
fi

# RDMA WRITE and READ both ways (rdma_rw): 5 rounds of 64 KiB each way, each side checks
# what the peer wrote into its buffer and what it read from the peer's, and they compare
# verdicts.
run_pair rdma_rw -n 5
for side in server client; do
  check "rdma_rw ($side): 5 rounds of WRITE and READ each way, data verified on both sides" \
    grep -q "^rdma_rw: 5 rounds of RDMA WRITE 65536 B + RDMA READ 65536 B each way, data verified on both sides" \
    "/tmp/rdma_rw.$side"
done
if [ "$link" = ethernet ]; then
  # perftest's tables, briefly: bandwidth of RDMA WRITE, latency of SEND.
  run_pair rdma_bw -s 4096 -n 200
  check "rdma_bw: the table's row (4096 B, 200 iterations)" \
    grep -Eq "^ 4096 +200 +[0-9.]+ +[0-9.]+ +[0-9.]+" /tmp/rdma_bw.server /tmp/rdma_bw.client
  check "rdma_bw: the data arrived intact" \
    grep -q "arrived intact" /tmp/rdma_bw.server /tmp/rdma_bw.client
  run_pair rdma_lat -n 100
  check "rdma_lat: the table's row (2 B, 100 iterations)" \
    grep -Eq "^ 2 +100 +[0-9.]+ +[0-9.]+ +[0-9.]+" /tmp/rdma_lat.server /tmp/rdma_lat.client
  check "rdma_lat: the data arrived intact" \
    grep -q "arrived intact" /tmp/rdma_lat.server /tmp/rdma_lat.client
fi

# first_rc, the one-file example (prelude only): the server on the second function, the
# client on the first; the client RDMA WRITEs into the server's memory and SENDs, the
# server checks both. On Ethernet each side installs the RoCEv2 GID of its --ip.
run_pair first_rc
check "first_rc (server): the SEND arrived intact" \
  grep -q "^server: received a SEND of 28 B: \"hello from the client's SEND\"" /tmp/first_rc.server
check "first_rc (server): the RDMA WRITE arrived intact" \
  grep -q "^server: the RDMA WRITE left \"written by the client's RDMA WRITE\"" /tmp/first_rc.server
check "first_rc (client): both work requests completed" \
  grep -q "^client: RDMA WRITE of 34 B and SEND of 28 B completed" /tmp/first_rc.client
if [ "$link" = ethernet ]; then
  check "first_rc: each side installed the RoCEv2 GID of its --ip and got the other's" \
    grep -q "remote QPN .*GID 0000:0000:0000:0000:0000:ffff:0a00:0002" /tmp/first_rc.client
else
  check "first_rc: the InfiniBand paths went by LID (the peer's LID is non-zero)" \
    grep -Eq "remote QPN .*, LID [1-9]" /tmp/first_rc.client
fi

# Bring-up, teardown, a second bring-up, VFIO_DEVICE_RESET while the driver runs and a
# bring-up after it, in one process (tests/vm/vfio_mlx5); its PASS/FAIL lines count here.
t=$(up)
vfio_mlx5 "$first" > /tmp/vfio_mlx5.out 2>&1
rc=$?
cat /tmp/vfio_mlx5.out
echo "vfio_mlx5 took $(since "$t") s"
pass=$((pass + $(grep -c '^PASS' /tmp/vfio_mlx5.out)))
fail=$((fail + $(grep -c '^FAIL' /tmp/vfio_mlx5.out)))
[ $rc -eq 0 ] || ko "vfio_mlx5 $first exits 0"

# rdma-core's own user-space VFIO driver for ConnectX (libmlx5's mlx5_vfio provider,
# NVIDIA's code) on the third function: bring-up, a PD, a memory region, teardown. Its
# commands are in the server's dump beside uhca's (tests/vm/linux-vs-uhca.sh compares).
t=$(up)
mlx5vfio "$third" > /tmp/mlx5vfio.out 2>&1
rc=$?
cat /tmp/mlx5vfio.out
echo "mlx5vfio took $(since "$t") s"
pass=$((pass + $(grep -c '^PASS' /tmp/mlx5vfio.out)))
fail=$((fail + $(grep -c '^FAIL' /tmp/mlx5vfio.out)))
[ $rc -eq 0 ] || ko "mlx5vfio $third exits 0"

# ---- Unmodified verbs programs over uhca's libibverbs (ibverbs/) ----------------------
# rdma-core's ibv_devinfo and ibv_rc_pingpong and perftest's ib_write_bw, Debian's binaries,
# load uhca's libibverbs.so.1 (and perftest's companion libraries) from LD_LIBRARY_PATH;
# UHCA_DEVICES names the function as vfio:uhca0=BDF (with ,ip= on Ethernet: the RoCEv2 GID
# no kernel driver installs under VFIO). Server on the second function, client on the
# first, the out-of-band exchange over the guest's loopback.
uv=/tmp/uhca-verbs
mkdir -p $uv
for l in libibverbs.so.1 libmlx5.so.1 libefa.so.1 librdmacm.so.1; do ln -sf "/usr/bin/$l" "$uv/$l"; done
# On Ethernet the programs are given GID index 0 (-g, -x): perftest would otherwise search
# the port's 256 GID entries for the best one, a firmware command each.
vsip= vcip= vgid= vx=
if [ "$link" = ethernet ]; then vsip=,ip=10.0.0.2 vcip=,ip=10.0.0.1 vgid="-g 0" vx="-x 0"; fi
# verbs SIDE PROG ARGS...: PROG on uhca's libibverbs, on the second function (server) or the
# first (client).
verbs() {
  side=$1; shift
  if [ "$side" = server ]; then dev="$second$vsip"; else dev="$first$vcip"; fi
  LD_LIBRARY_PATH=$uv UHCA_DEVICES="vfio:uhca0=$dev" timeout 60 "$@"
}
# wait_listen PORT: until a TCP socket listens on PORT (30 s at most).
wait_listen() {
  hex=$(printf ':%04X' "$1") n=0
  while ! awk -v p="$hex" '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp; do
    n=$((n + 1)); [ $n -le 300 ] || return 1; sleep 0.1
  done
}
# verbs_pair NAME PORT PROG ARGS...: server and client of PROG (the client adds 127.0.0.1),
# outputs in /tmp/NAME.server and /tmp/NAME.client, a PASS/FAIL line for each exit status.
verbs_pair() {
  name=$1 port=$2; shift 2
  t=$(up)
  verbs server "$@" > "/tmp/$name.server" 2>&1 &
  srv=$!
  wait_listen "$port" || echo "$name: the server never listened on TCP $port"
  verbs client "$@" 127.0.0.1 > "/tmp/$name.client" 2>&1
  crc=$?
  wait $srv
  src=$?
  echo "--- $name server:"; cat "/tmp/$name.server"
  echo "--- $name client:"; cat "/tmp/$name.client"
  echo "$name took $(since "$t") s"
  check "uhca libibverbs: $* server on $second exits 0" [ $src -eq 0 ]
  check "uhca libibverbs: $* client on $first exits 0" [ $crc -eq 0 ]
}
t=$(up)
verbs client ibv_devinfo -v > /tmp/ibv_devinfo.out 2>&1
rc=$?
cat /tmp/ibv_devinfo.out
echo "ibv_devinfo took $(since "$t") s"
check "uhca libibverbs: ibv_devinfo -v on vfio:uhca0=$first$vcip exits 0" [ $rc -eq 0 ]
check "uhca libibverbs: ibv_devinfo lists uhca0, firmware 22.39.1002, vendor 0x15b3, port 1 active" \
  sh -c 'grep -q "hca_id:[[:space:]]*uhca0" /tmp/ibv_devinfo.out &&
    grep -q "fw_ver:[[:space:]]*22\.39\.1002" /tmp/ibv_devinfo.out &&
    grep -q "vendor_id:[[:space:]]*0x15b3" /tmp/ibv_devinfo.out &&
    grep -q "state:[[:space:]]*PORT_ACTIVE" /tmp/ibv_devinfo.out'
if [ "$link" = infiniband ]; then
  check "uhca libibverbs: ibv_devinfo: InfiniBand, the LID the subnet manager assigned" \
    sh -c 'grep -q "link_layer:[[:space:]]*InfiniBand" /tmp/ibv_devinfo.out &&
      grep -Eq "port_lid:[[:space:]]*[1-9]" /tmp/ibv_devinfo.out'
else
  check "uhca libibverbs: ibv_devinfo: Ethernet, GID 0 the RoCEv2 GID of ip=10.0.0.1" \
    sh -c 'grep -q "link_layer:[[:space:]]*Ethernet" /tmp/ibv_devinfo.out &&
      grep -q "GID\[  0\]:.*::ffff:10\.0\.0\.1, RoCE v2" /tmp/ibv_devinfo.out'
fi
# The port's addressing given wrong: refused at open, with what to write instead.
if [ "$link" = infiniband ]; then
  LD_LIBRARY_PATH=$uv UHCA_DEVICES="vfio:uhca0=$first,ip=10.0.0.1" timeout 60 ibv_devinfo > /tmp/ibv_devinfo.bad 2>&1
  rc=$?; cat /tmp/ibv_devinfo.bad
  check "uhca libibverbs: ip= on an InfiniBand port is refused, naming the LID instead" \
    sh -c "[ $rc -ne 0 ] && grep -q 'port 1 is InfiniBand: its address is the LID' /tmp/ibv_devinfo.bad"
else
  LD_LIBRARY_PATH=$uv UHCA_DEVICES="vfio:uhca0=$first" timeout 60 ibv_devinfo > /tmp/ibv_devinfo.bad 2>&1
  rc=$?; cat /tmp/ibv_devinfo.bad
  check "uhca libibverbs: an Ethernet function without ip= is refused, asking for ip=" \
    sh -c "[ $rc -ne 0 ] && grep -q 'GID table is empty.*vfio:NAME=$first,ip=10.0.0.1' /tmp/ibv_devinfo.bad"
fi
# ibv_rc_pingpong --chk: each side checks the bytes its peer sent.
# shellcheck disable=SC2086
verbs_pair ibv_rc_pingpong 18515 ibv_rc_pingpong -d uhca0 $vgid -p 18515 -n 100 --chk
check "uhca libibverbs: ibv_rc_pingpong: 100 iters reported by both sides" \
  [ "$(grep -c "^100 iters in" /tmp/ibv_rc_pingpong.server /tmp/ibv_rc_pingpong.client | grep -c ':1$')" -eq 2 ]
if [ "$link" = ethernet ]; then
  check "uhca libibverbs: ibv_rc_pingpong: the RoCEv2 GIDs of ip= exchanged (::ffff:10.0.0.2, ::ffff:10.0.0.1)" \
    sh -c 'grep -q "remote address:.*GID ::ffff:10\.0\.0\.2" /tmp/ibv_rc_pingpong.client &&
      grep -q "remote address:.*GID ::ffff:10\.0\.0\.1" /tmp/ibv_rc_pingpong.server'
fi
# -e: each side sleeps on its completion channel; the library's thread turns the function's
# MSI-X interrupts (VFIO's eventfd) into the channel's wake-ups.
# shellcheck disable=SC2086
verbs_pair ibv_rc_pingpong 18517 ibv_rc_pingpong -d uhca0 $vgid -p 18517 -n 100 --chk -e
check "uhca libibverbs: ibv_rc_pingpong -e: 100 iters reported by both sides" \
  [ "$(grep -c "^100 iters in" /tmp/ibv_rc_pingpong.server /tmp/ibv_rc_pingpong.client | grep -c ':1$')" -eq 2 ]
# perftest's ib_write_bw as it runs on a ConnectX: ibv_create_qp_ex and the ibv_wr_* calls.
# shellcheck disable=SC2086
verbs_pair ib_write_bw 18516 ib_write_bw -d uhca0 $vx -p 18516 -n 50
check "uhca libibverbs: ib_write_bw: the table's row (65536 B, 50 iterations) on both sides" \
  [ "$(grep -Ec "^ 65536[[:space:]]+50[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+" /tmp/ib_write_bw.server /tmp/ib_write_bw.client | grep -c ':1$')" -eq 2 ]

echo "vfiouser ($link): $(since "$t0") s"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
