#!/usr/bin/env bash
# The mock ConnectX behind real Linux VFIO: fetches QEMU 11.1 (fetch-qemu11.sh), builds the
# server and the examples the guest runs, builds the rig, then for each fabric (Ethernet,
# InfiniBand) starts uhca-vfio-user-server with three mock functions on it, boots the guest
# with three vfio-user-pci devices and runs guest/tests/vfiouser.sh in it (uhca's programs
# on the first two, rdma-core's VFIO driver on the third). Prints the guest's
# PASS/FAIL lines and its tally per boot. The server dumps every command's bytes
# (target/vm/logs/vfio-user-LINK.cmds: uhca's side, fn0 and fn1, and rdma-core's, fn2, for
# linux-vs-uhca.sh).
#
#   bash tests/vm/vfio-user.sh    environment: as run-vm.sh, and LINKS (ethernet infiniband)
# The guest boots with no_timer_check, as in linux-mlx5.sh: under TCG on a loaded machine
# the kernel's check of the timer interrupt through the remapped IO-APIC can time out and
# panic the boot (seen here once while other builds ran).
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
export VFIO_USER_DIR=${VFIO_USER_DIR:-$(mktemp -d /tmp/uhca-vfio-user.XXXXXX)}
cd "$REPO"

RIG_NAME=vfio-user
. "$VM/lib/report.sh"
. "$VM/lib/server.sh"
phase "fetch QEMU 11.1"
bash "$VM/fetch-qemu11.sh" || exit 1
phase "build the server and the guest's programs"
cargo build --release -p uhca-vfio-user --bin uhca-vfio-user-server || exit 1
. "$VM/conf/vfiouser.conf"
# shellcheck disable=SC2086
cargo build $CARGO_BUILD || exit 1
cargo build --release -p uhca-vm-vfio-mlx5 || exit 1
# uhca's libibverbs for the unmodified verbs programs (conf/vfiouser.conf): the cdylib as
# libibverbs.so.1 and perftest's companion libraries, built as ibverbs/tests/perftest.rs
# builds them, in target/release/uhca-verbs/.
cargo build --release -p uhca-ibverbs || exit 1
uv=$TARGET_DIR/release/uhca-verbs
mkdir -p "$uv"
cp "$TARGET_DIR/release/libuhca_ibverbs.so" "$uv/libibverbs.so.1" || exit 1
for n in mlx5 efa rdmacm; do
  gcc -shared -fPIC -O2 -Wall -Werror -Wno-unused-parameter "-Wl,-soname,lib$n.so.1" \
    "-Wl,--version-script=$REPO/ibverbs/tests/c/companions/$n.map" \
    -o "$uv/lib$n.so.1" "$REPO/ibverbs/tests/c/companions/$n.c" || exit 1
done
phase "build the rig"
bash "$VM/build-rig.sh" vfiouser || exit 1

# One boot per fabric: Ethernet (RoCE) and InfiniBand (LIDs from the subnet manager).
rc=0
# host_check NAME CMD...: a check on the host side (the server's log), one PASS/FAIL line.
host_check() {
  name=$1; shift
  if "$@"; then echo "PASS host ($link): $name"; else echo "FAIL host ($link): $name"; rc=1; fi
}
for link in ${LINKS:-ethernet infiniband}; do
  phase "start the server ($link)"
  log=$RIG_DIR/logs/vfio-user-server-$link.log
  start_server "$log" --link "$link" --log \
    --command-dump "$RIG_DIR/logs/vfio-user-$link.cmds" \
    --pcap "$RIG_DIR/logs/vfio-user-$link.pcap" \
    --socket "$VFIO_USER_DIR/fn0.sock" --socket "$VFIO_USER_DIR/fn1.sock" \
    --socket "$VFIO_USER_DIR/fn2.sock" || { rc=1; break; }
  phase "boot and run ($link)"
  boot_vfio_user vfiouser "$RIG_DIR/logs/vfiouser-$link.log" "rig.link=$link" || rc=1
  # QEMU is gone: the server appends each function's commands to the dump (for
  # linux-vs-uhca.sh) when its client goes.
  stop_server ': command dump: ' 3
  echo "--- server log ($log):"
  grep -v "IOMMU fault:" "$log" | tail -5
  # The device's side of vfio_mlx5's DMA to an IOVA the guest never mapped: the server
  # prints one line per IOMMU fault; both of the program's faults must be there, at the
  # IOVA it printed, and no other fault.
  echo "--- IOMMU faults the server reported ($link):"
  grep "IOMMU fault:" "$log"
  iova=$(sed -n 's/.*vfio_mlx5: unmapped IOVA \(0x[0-9a-f]*\).*/\1/p' "$RIG_DIR/logs/vfiouser-$link.log" | tail -1)
  faults=$(grep -c "IOMMU fault:" "$log")
  host_check "vfio_mlx5 printed the unmapped IOVA it used ($iova)" [ -n "$iova" ]
  host_check "the server reported the IOMMU fault of the SEND's gather (device read at $iova, unmapped)" \
    grep -Eq "IOMMU fault: .*: device read of [0-9]+ B at IOVA $iova \(data \(gather\)\): unmapped" "$log"
  host_check "the server reported the IOMMU fault of the RECV's scatter (device write at $iova, unmapped)" \
    grep -Eq "IOMMU fault: .*: device write of [0-9]+ B at IOVA $iova \(data \(scatter\)\): unmapped" "$log"
  host_check "no other IOMMU fault in this boot ($faults in all)" [ "$faults" -eq 2 ]
done
rm -rf "$VFIO_USER_DIR"
exit $rc
