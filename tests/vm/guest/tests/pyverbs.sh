#!/bin/sh
# rdma-core's own test suite (issue 31): Debian's python3-pyverbs and its tests
# (/usr/share/doc/rdma-core/tests, unpacked into /tmp/rdma/tests) over Linux's mlx5_core,
# mlx5_ib and rdma-core's libmlx5 on one mock function on InfiniBand. One process per test
# module (run_module.py --all; a crash loses only its module), each under a time limit
# (rig.pyverbs_timeout=<s>, default 120). Prints one "PYV <outcome> <test id> | <reason>"
# line per outcome and "PYV-END <module> ran=<n>" per module; a module that ends without its
# PYV-END line gets a "PYV error tests.<module>" line. tests/vm/pyverbs-report.py on the
# host counts them and holds the errors against tests/vm/pyverbs.expected. Exits non-zero
# only when the device does not come up (the host judges the tests).
. /tests/lib.sh
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^$1=//p" | tail -1; }
limit=$(arg rig.pyverbs_timeout)
limit=${limit:-120}
# The kernel's messages stay in its log (printed at the end) instead of cutting PYV lines.
dmesg -n 1

if [ -n "${PYV_DEV:-}" ]; then
  # pyverbsrxe.sh set a device up (Soft-RoCE) and names it.
  ibdev=$PYV_DEV
else
  fn=$(pci_find 0x15b3 0x101d | head -1)
  echo "mock function: ${fn:-none}"
  [ -n "$fn" ] || exit 1
  modprobe mlx5_core && modprobe mlx5_ib && modprobe ib_uverbs || { echo "cannot load mlx5_ib"; exit 1; }
  for _ in $(seq 50); do
    [ -e /dev/infiniband/uverbs0 ] && break
    sleep 0.1
  done
  ibdev=""
  for d in /sys/bus/pci/devices/"$fn"/infiniband/*; do [ -e "$d" ] && ibdev=${d##*/}; done
  echo "mlx5_ib registered ${ibdev:-no device} on $fn"
  [ -n "$ibdev" ] || exit 1
  for _ in $(seq 100); do
    ibv_devinfo -d "$ibdev" 2>/dev/null | grep -q 'state:.*PORT_ACTIVE' && break
    sleep 0.1
  done
  ibv_devinfo -d "$ibdev" | grep -E 'hca_id|fw_ver|state|port_lid|link_layer'
  ibv_devinfo -d "$ibdev" | grep -q 'state:.*PORT_ACTIVE' || { echo "port 1 not ACTIVE"; exit 1; }
fi

# 2 MiB pages for the suite's huge-page tests (test_parent_domain's, the mlx5 ones).
echo 8 > /proc/sys/vm/nr_hugepages

t=$(up)
python3 /pyverbs/run_module.py --unpack /tmp/rdma/tests || { echo "cannot unpack the suite"; exit 1; }
echo "suite unpacked in $(since "$t") s: $(ls /tmp/rdma/tests/test_*.py | wc -l) modules"
# One process per module, forked from one that loaded pyverbs and the suite's helpers.
python3 /pyverbs/run_module.py --all /tmp/rdma/tests "$limit" --dev "$ibdev" ||
  echo "PYV error run_module.py | the runner itself failed"
echo "--- kernel log: mlx5 and warnings"
dmesg | grep -iE 'mlx5|warning|bug:|call trace' | tail -n 60
echo "PYV-DONE"
exit 0
