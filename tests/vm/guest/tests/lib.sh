# Helpers for guest tests (sourced).
up() { cut -d' ' -f1 /proc/uptime; }
# Seconds since an earlier $(up).
since() { echo "$(up) $1" | awk '{ printf "%.2f", $1 - $2 }'; }
driver_of() { [ -e "/sys/bus/pci/devices/$1/driver" ] && basename "$(readlink "/sys/bus/pci/devices/$1/driver")"; }
# PCI functions with this vendor and device ID, one per line.
pci_find() {
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = "$1" ] && [ "$(cat "$d/device")" = "$2" ] && echo "${d##*/}"
  done
  return 0
}
# Binds a PCI function to vfio-pci (the way a user does it), and checks it is.
bind_vfio() {
  d=/sys/bus/pci/devices/$1
  echo vfio-pci > "$d/driver_override"
  [ -e "$d/driver" ] && echo "$1" > "$d/driver/unbind"
  echo "$1" > /sys/bus/pci/drivers_probe
  [ "$(driver_of "$1")" = vfio-pci ] || { echo "cannot bind $1 to vfio-pci"; return 1; }
  g=$(basename "$(readlink "$d/iommu_group")")
  [ -e "/dev/vfio/$g" ] || { echo "no /dev/vfio/$g for $1"; return 1; }
  echo "$1 bound to vfio-pci (IOMMU group $g)"
}
