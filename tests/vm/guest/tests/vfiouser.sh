#!/bin/sh
# The mock ConnectX behind real Linux VFIO: the functions uhca-vfio-user-server serves to
# QEMU's vfio-user-pci appear as PCI devices, are bound to vfio-pci as a user binds a
# ConnectX, and uhca's examples run on them with --device. One PASS/FAIL line per check.
. /tests/lib.sh
t0=$(up)
pass=0 fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
check() { name=$1; shift; if "$@"; then ok "$name"; else ko "$name"; fi; }

modprobe vfio_iommu_type1 && modprobe vfio_pci || { echo "cannot load vfio_pci"; exit 2; }
echo 16 > /proc/sys/vm/nr_hugepages

fns=$(pci_find 0x15b3 0x101d)
echo "mock functions:" $fns
check "two ConnectX functions (15b3:101d) enumerated" [ "$(echo $fns | wc -w)" -eq 2 ]
for f in $fns; do check "$f bound to vfio-pci" bind_vfio "$f"; done
first=$(echo $fns | cut -d' ' -f1)

if [ -n "$first" ]; then
  t=$(up)
  devinfo --device "$first" > /tmp/devinfo.out 2>&1
  rc=$?
  cat /tmp/devinfo.out
  echo "devinfo took $(since "$t") s"
  check "devinfo --device $first exits 0" [ $rc -eq 0 ]
  check "devinfo: firmware 22.39.1002" grep -q "fw_ver:.*22\.39\.1002" /tmp/devinfo.out
  check "devinfo: port 1 active" grep -q "PORT_ACTIVE" /tmp/devinfo.out
  check "devinfo: RoCE link layer" grep -q "link_layer:.*Ethernet" /tmp/devinfo.out
  # A second run in a new process: the function came back through vfio-pci's reset.
  devinfo --device "$first" > /tmp/devinfo2.out 2>&1
  check "devinfo --device again (after the close's reset)" [ $? -eq 0 ]
fi

echo "vfiouser: $(since "$t0") s"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
