#!/usr/bin/env bash
# The mock ConnectX behind real Linux VFIO: fetches QEMU 11.1 (fetch-qemu11.sh), builds the
# server and the examples the guest runs, builds the rig, starts uhca-vfio-user-server with
# two mock functions on one fabric, boots the guest with two vfio-user-pci devices and runs
# guest/tests/vfiouser.sh in it. Prints the guest's PASS/FAIL lines and its tally.
#
#   bash tests/vm/vfio-user.sh            environment: as run-vm.sh, and LINK (ethernet)
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
export VFIO_USER_DIR=${VFIO_USER_DIR:-$(mktemp -d /tmp/uhca-vfio-user.XXXXXX)}
cd "$REPO"

phase() { echo; echo "=== vfio-user: $* ($(date -u +%H:%M:%S))"; }
phase "fetch QEMU 11.1"
bash "$VM/fetch-qemu11.sh" || exit 1
phase "build the server and the guest's programs"
cargo build --release -p uhca-vfio-user --bin uhca-vfio-user-server || exit 1
. "$VM/conf/vfiouser.conf"
# shellcheck disable=SC2086
cargo build $CARGO_BUILD || exit 1
phase "build the rig"
bash "$VM/build-rig.sh" vfiouser || exit 1

phase "start the server"
log=$RIG_DIR/logs/vfio-user-server.log
mkdir -p "$RIG_DIR/logs"
"$TARGET_DIR/release/uhca-vfio-user-server" --link "${LINK:-ethernet}" --log \
  --pcap "$RIG_DIR/logs/vfio-user.pcap" \
  --socket "$VFIO_USER_DIR/fn0.sock" --socket "$VFIO_USER_DIR/fn1.sock" > "$log" 2>&1 &
server=$!
stop() { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$VFIO_USER_DIR"; }
trap stop EXIT
for _ in $(seq 100); do
  [ -S "$VFIO_USER_DIR/fn0.sock" ] && [ -S "$VFIO_USER_DIR/fn1.sock" ] && break
  sleep 0.1
done
[ -S "$VFIO_USER_DIR/fn1.sock" ] || { echo "vfio-user: the server did not start"; cat "$log"; exit 1; }

phase "boot and run"
QEMU=$RIG_DIR/qemu11/qemu IOMMU_OPTS=intremap=on,caching-mode=on MEM_SHARED=1 \
  bash "$VM/run-vm.sh" vfiouser
rc=$?
echo "--- server log ($log):"
tail -20 "$log"
exit $rc
