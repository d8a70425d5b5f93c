#!/bin/sh
# Linux's own mlx5 driver against the mock ConnectX: the function uhca-vfio-user-server
# serves (InfiniBand, or Ethernet with rig.link=ethernet) is bound by the Debian kernel's
# mlx5_core instead of vfio-pci; mlx5_ib registers an InfiniBand device on it (stage 2),
# ibv_devinfo lists it; then the modules are removed. One PASS/FAIL line per check; the kernel log is printed at the end.
# rig.mlx5_debug=N on the kernel command line loads mlx5_core with debug_mask=N (1 dumps
# every command's input and output).
. /tests/lib.sh
pass=0 fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
check() { name=$1; shift; if "$@"; then ok "$name"; else ko "$name"; fi; }
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^$1=//p" | tail -1; }
debug=$(arg rig.mlx5_debug)
# rig.link=ethernet|infiniband: the fabric the server runs (linux-mlx5.sh sets it).
link=$(arg rig.link)
link=${link:-infiniband}
echo "fabric: $link"
# mlx5_core's own lines of the kernel log since mark $1 (dmesg -r: "<level>[time] text").
klog_since() { dmesg -r | sed -n "/uhca-rig-mark-$1/,\$p" | grep 'mlx5'; }
# On Ethernet one warning is expected: the model has no Ethernet NIC (no Ethernet
# offloads), so mlx5_core makes no mlx5e netdev and says why, at each probe and removal.
expected='^$'
[ "$link" = ethernet ] && expected='mlx5_eth_supported:.*Missing eth_net_offloads capability'
# Whether file $1 has a line of level warning or worse (0-4) other than the expected one.
klog_bad() { grep '^<[0-4]>' "$1" | grep -v "$expected" | grep -q .; }
mark() { echo "uhca-rig-mark-$1" > /dev/kmsg; }

fns=$(pci_find 0x15b3 0x101d)
echo "mock functions:" $fns
check "one ConnectX function (15b3:101d) enumerated" [ "$(echo $fns | wc -w)" -eq 1 ]
f=$(echo $fns | cut -d' ' -f1)
[ -n "$f" ] || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }

mark probe
t=$(up)
modprobe mlx5_core ${debug:+debug_mask=$debug}
rc=$?
echo "modprobe mlx5_core took $(since "$t") s"
check "modprobe mlx5_core exits 0" [ $rc -eq 0 ]
check "$f bound to mlx5_core" [ "$(driver_of "$f")" = mlx5_core ]
klog_since probe > /tmp/probe.log
check "kernel log: firmware version 22.39.1002" grep -q "firmware version: 22\.39\.1002" /tmp/probe.log
# mlx5_core prints the PCIe bandwidth from the link registers of the mock's configuration
# space (through QEMU, behind its root port).
check "kernel log: PCIe link 16.0 GT/s x16" grep -q "16.0 GT/s PCIe x16 link" /tmp/probe.log
check "kernel log: no mlx5 warning or error during probe" eval '! klog_bad /tmp/probe.log'
if [ "$link" = ethernet ]; then
  check "Ethernet port: mlx5_core finds no Ethernet NIC (eth_net_offloads missing: no netdev)" \
    grep -q 'Missing eth_net_offloads capability' /tmp/probe.log
fi
# devlink: the firmware version mlx5_core reads from the MCQS and MCQI registers (the
# boot image's running version) and the PSID from QUERY_ADAPTER.
mark devlink
devlink dev info "pci/$f" > /tmp/devlink.out 2>&1
rc=$?
cat /tmp/devlink.out
check "devlink dev info pci/$f exits 0" [ $rc -eq 0 ]
check "devlink: running fw.version 22.39.1002" sh -c "sed -n '/running:/,/stored:/p' /tmp/devlink.out | grep -q 'fw.version 22.39.1002'"
check "devlink: fw.psid UHCA_MOCK_0001" grep -q "fw.psid UHCA_MOCK_0001" /tmp/devlink.out
klog_since devlink > /tmp/devlink.log
check "kernel log: no mlx5 warning or error from devlink dev info" eval '! klog_bad /tmp/devlink.log'
# mlx5_core splits the function into auxiliary devices by what the capabilities say: an
# InfiniBand port, or an Ethernet port with RoCE, gets the RDMA one (for mlx5_ib); without
# Ethernet offloads there is no Ethernet one (mlx5e).
ls -d /sys/bus/pci/devices/$f/mlx5_core.* 2>/dev/null
check "$link port: auxiliary device mlx5_core.rdma.0, no mlx5_core.eth.0" \
  sh -c "[ -d /sys/bus/pci/devices/$f/mlx5_core.rdma.0 ] && [ ! -e /sys/bus/pci/devices/$f/mlx5_core.eth.0 ]"
# The command EQ and the async EQ share the first vector ("mlx5_async..."): once the
# command interface switched to events, each command completion is an MSI-X interrupt
# the model raised through the server and QEMU.
grep mlx5 /proc/interrupts
async=$(grep 'mlx5_async' /proc/interrupts | awk '{ n = 0; for (i = 2; i <= 3; i++) n += $i; print n }')
check "MSI-X: the async/command EQ's vector interrupted (${async:-0} times)" [ "${async:-0}" -gt 0 ]
# mlx5_core's health poller reads the health buffer every 2 to 3 s (from the probe on) and
# reports a fatal syndrome at once, a health counter that stopped after 3 polls: 10 s more
# give it at least 3.
sleep 10
klog_since probe > /tmp/probe.log
check "kernel log: no mlx5 warning or error 10 s after probe (health poller)" eval '! klog_bad /tmp/probe.log'

# Stage 2: mlx5_ib on the RDMA auxiliary device registers an InfiniBand device: XRC domains
# and SRQs, the UMR QP, the write-combining test's UD QP, the MAD layer's QP0 and QP1, the
# port read through MAD_IFC (the model's subnet management agent). `ibv_devinfo` (libibverbs
# with Debian's libmlx5 provider, through ib_uverbs) must list it with an ACTIVE port and the
# LID the mock's subnet manager assigned (rig.ib_lid, rig.ib_sm_lid: linux-mlx5.sh passes
# what the fabric gives its first port).
mark ib
# rig.mlx5_trace=1: trace mlx5_ib's function calls while it loads (ftrace's function graph
# tracer, printed below), to see where a probe stopped.
trace=$(arg rig.mlx5_trace)
if [ "$trace" = 1 ]; then
  T=/sys/kernel/tracing
  mount -t tracefs nodev $T 2>/dev/null
  echo ':mod:mlx5_ib' > $T/set_ftrace_filter
  echo function_graph > $T/current_tracer
  echo 1 > $T/tracing_on
fi
t=$(up)
modprobe mlx5_ib
rc=$?
modprobe ib_uverbs
echo "modprobe mlx5_ib took $(since "$t") s (status $rc)"
if [ "$trace" = 1 ]; then
  echo 0 > $T/tracing_on
  echo "--- trace of mlx5_ib's probe:"
  grep -v '^ *$' $T/trace | grep -v steering_anchor_destroy_res | cut -c1-140 | head -400
fi
check "modprobe mlx5_ib exits 0" [ $rc -eq 0 ]
# The port's LID and state come from the model's subnet manager; ib_core learns them when
# the port goes ACTIVE (an event the model raised at attach time, long before): wait a
# little for the device and its uverbs node.
for _ in $(seq 50); do
  [ -e /dev/infiniband/uverbs0 ] && break
  sleep 0.1
done
klog_since ib > /tmp/ib.log
ibdev=$(ls /sys/class/infiniband/ 2>/dev/null | head -1)
if [ "$link" = ethernet ]; then
  # Not in CI. RoCE through Linux needs the Ethernet NIC the model does not have (mlx5e's
  # netdev gives RoCE its GIDs and port state); mlx5_ib stops earlier still, at the port
  # type and speed register PTYS (0x5004), which the model does not have. The check holds
  # the stop to the one mock/MODEL.md documents.
  echo "mlx5_ib's kernel log:"
  cat /tmp/ib.log
  check "Ethernet: mlx5_ib stops where mock/MODEL.md says (no PTYS register, probe error -12)" \
    sh -c "[ -z '$ibdev' ] && grep -q 'probe of mlx5_core.rdma.0 failed with error -12' /tmp/ib.log"
  ibdev=skip
fi
if [ "$ibdev" != skip ]; then
check "stage 2: mlx5_ib registered an InfiniBand device (${ibdev:-none})" [ -n "$ibdev" ]
if [ -z "$ibdev" ]; then
  echo "mlx5_ib's kernel log:"
  cat /tmp/ib.log
fi
check "kernel log: no mlx5 warning or error while mlx5_ib loads" eval '! klog_bad /tmp/ib.log'
ibv_devinfo -v > /tmp/devinfo.out 2>&1
rc=$?
cat /tmp/devinfo.out
check "ibv_devinfo -v exits 0 and lists ${ibdev:-the device}" \
  sh -c "[ $rc -eq 0 ] && grep -q 'hca_id:.*${ibdev:-none}' /tmp/devinfo.out"
field() { sed -n "s/^[[:space:]]*$1:[[:space:]]*//p" /tmp/devinfo.out | head -1; }
check "ibv_devinfo: fw_ver 22.39.1002, board_id UHCA_MOCK_0001" \
  sh -c "[ '$(field fw_ver)' = 22.39.1002 ] && [ '$(field board_id)' = UHCA_MOCK_0001 ]"
check "ibv_devinfo: link_layer InfiniBand, port state PORT_ACTIVE ($(field state))" \
  sh -c "[ '$(field link_layer)' = InfiniBand ] && [ '$(field state)' = 'PORT_ACTIVE (4)' ]"
lid=$(arg rig.ib_lid)
sm_lid=$(arg rig.ib_sm_lid)
check "ibv_devinfo: port_lid $(field port_lid) and sm_lid $(field sm_lid), as the mock's SM assigned (${lid:-?}, ${sm_lid:-?})" \
  sh -c "[ -n '$lid' ] && [ '$(field port_lid)' = '$lid' ] && [ '$(field sm_lid)' = '$sm_lid' ]"
# GID 0: the subnet prefix fe80::/64 and the port GUID (SubnGet GUIDInfo).
check "ibv_devinfo: GID 0 is fe80::/64 + the node GUID ($(field node_guid))" \
  sh -c "grep -q 'GID\[  0\]:[[:space:]]*fe80:0000:0000:0000:$(field node_guid)' /tmp/devinfo.out"
fi
rmmod mlx5_ib
check "rmmod mlx5_ib exits 0" [ $? -eq 0 ]

mark remove
t=$(up)
rmmod mlx5_core
rc=$?
echo "rmmod mlx5_core took $(since "$t") s"
check "rmmod mlx5_core exits 0" [ $rc -eq 0 ]
check "$f has no driver after rmmod" [ -z "$(driver_of "$f")" ]
klog_since remove > /tmp/remove.log
check "kernel log: no mlx5 warning or error during removal" eval '! klog_bad /tmp/remove.log'

echo "--- kernel log (mlx5):"
dmesg | grep -i 'mlx5\|vfio\|DMAR' | grep -v uhca-rig-mark
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
