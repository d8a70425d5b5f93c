#!/bin/sh
# uhca's VFIO platform against real Linux VFIO and QEMU's emulated Intel IOMMU: binds the
# devices of conf/vfio.conf to vfio-pci and runs vfio_edu (tests/vm/vfio_edu/) on them.
. /tests/lib.sh
t0=$(up)
modprobe vfio_iommu_type1 && modprobe vfio_pci || { echo "cannot load vfio_pci"; exit 2; }
# A few 2 MiB hugepages, so the DMA pool uses them (and the test checks it does).
echo 8 > /proc/sys/vm/nr_hugepages

edu="" pair="" nic=""
for b in $(pci_find 0x1234 0x11e8); do
  case $b in
    0000:00:*) [ -n "$edu" ] || edu=$b ;;  # on the root bus: alone in its IOMMU group
    *) pair="$pair${pair:+,}$b" ;;          # behind the PCIe-to-PCI bridge: one group
  esac
done
# PCIe devices with MSI-X and a reset: QEMU's e1000e and NVMe controller.
resettable="$(pci_find 0x8086 0x10d3 | head -1) $(pci_find 0x1b36 0x0010 | head -1)"
[ -n "$edu" ] || { echo "no edu device on bus 0"; exit 3; }
echo "edu $edu; edu pair ${pair:-none}; to reset:" $resettable

fail=0
for b in $edu $(echo "$pair" | tr ',' ' ') $resettable; do bind_vfio "$b" || fail=1; done
[ $fail -eq 0 ] || exit 4

# Devices the program must refuse because they are not bound to vfio-pci: one bound to
# another driver (a PCIe port), one bound to none (the host bridge, for instance).
other="" unbound=""
for d in /sys/bus/pci/devices/*; do
  b=${d##*/} drv=$(driver_of "${d##*/}")
  case $drv in
    vfio-pci) ;;
    "") [ -n "$unbound" ] || unbound=$b ;;
    *) [ -n "$other" ] || other=$b ;;
  esac
done
[ -n "$other" ] && [ -n "$unbound" ] || { echo "no device bound elsewhere or unbound"; exit 5; }

args="$edu --not-bound $other --not-bound $unbound"
for b in $resettable; do args="$args --reset-device $b"; done
[ -n "$pair" ] && args="$args --pair $pair"
t1=$(up)
echo "+ vfio_edu $args"
# shellcheck disable=SC2086
vfio_edu $args
rc=$?
echo "vfio: setup $(echo "$t1 $t0" | awk '{ printf "%.2f", $1 - $2 }') s, vfio_edu $(since "$t1") s, rc=$rc"
exit $rc
