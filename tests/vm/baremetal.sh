#!/usr/bin/env bash
# uhca on bare metal: the program of baremetal/ (no operating system; PVH-booted by QEMU's
# -kernel) drives mock ConnectX functions served by uhca-vfio-user-server to QEMU 11.1's
# vfio-user-pci. Fetches QEMU 11.1 (fetch-qemu11.sh), builds the server and the program,
# then for each fabric (InfiniBand, Ethernet) starts the server with FUNCTIONS mock
# functions on one fabric, boots the program with one vfio-user-pci device per function
# and isa-debug-exit, and checks: QEMU's exit status is 1 (the program's pass; a failed
# check, a panic or a triple fault give anything else), the console's closing line says
# "N passed, 0 failed", and the server's log has every function's client gone without
# protocol errors and no IOMMU fault. Prints the console (from the program's first line)
# and one PASS/FAIL line per host-side check; exits 1 if any failed.
#
#   bash tests/vm/baremetal.sh     environment: LINKS (infiniband ethernet), FUNCTIONS (4),
#                                  BOOT_TIMEOUT (seconds per boot, 120), RIG_DIR, MEM (MiB, 512)
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
BM_TARGET=${CARGO_TARGET_DIR:-$REPO/baremetal/target}
ELF=$BM_TARGET/x86_64-unknown-none/release/uhca-baremetal
FUNCTIONS=${FUNCTIONS:-4}
# The program's checks per fabric: memory, PCI, a bring-up and a teardown per function,
# RC (objects, QPs, SEND, WRITE, READ, two atomics, teardown), MSI-X, the collective over
# four functions (communicators, two all-reduces, all-gather, broadcast, teardown), pools
# empty.
CHECKS=${CHECKS:-$((2 + 2 * FUNCTIONS + 8 + 1 + 6 + 1))}
export VFIO_USER_DIR=${VFIO_USER_DIR:-$(mktemp -d /tmp/uhca-baremetal.XXXXXX)}
cd "$REPO"

RIG_NAME=baremetal
. "$VM/lib/report.sh"
. "$VM/lib/server.sh"
phase "fetch QEMU 11.1"
bash "$VM/fetch-qemu11.sh" || exit 1
phase "build the server"
cargo build --release -p uhca-vfio-user --bin uhca-vfio-user-server || exit 1
phase "build the bare-metal program (x86_64-unknown-none)"
rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-none ||
  rustup target add x86_64-unknown-none || exit 1
(cd baremetal && cargo build --release --locked) || exit 1
echo "baremetal: $ELF, $(stat -c %s "$ELF") bytes"
mkdir -p "$RIG_DIR/logs"

for link in ${LINKS:-infiniband ethernet}; do
  phase "start the server ($link, $FUNCTIONS functions)"
  log=$RIG_DIR/logs/baremetal-server-$link.log
  console=$RIG_DIR/logs/baremetal-$link.log
  sockets=() devices=()
  for i in $(seq 0 $((FUNCTIONS - 1))); do
    s=$VFIO_USER_DIR/fn$i.sock
    sockets+=(--socket "$s")
    devices+=(-device "{\"driver\":\"vfio-user-pci\",\"socket\":{\"path\":\"$s\",\"type\":\"unix\"}}")
  done
  start_server "$log" --link "$link" --log "${sockets[@]}" || { ko "server ($link) started"; continue; }
  phase "boot ($link)"
  rm -f "$console"
  t0=$(date +%s.%N)
  # Guest RAM in a shared memfd: the server reaches it through the memory file QEMU sends
  # with each DMA map (IOVA = guest-physical address, no vIOMMU).
  timeout "${BOOT_TIMEOUT:-120}" "$RIG_DIR/qemu11/qemu" -accel tcg -cpu max \
    -machine q35,memory-backend=bm_mem \
    -object "memory-backend-memfd,id=bm_mem,size=${MEM:-512}M,share=on" -m "${MEM:-512}M" \
    -nographic -no-reboot -display none -monitor none -serial "file:$console" \
    -kernel "$ELF" -device isa-debug-exit,iobase=0xf4,iosize=0x04 "${devices[@]}"
  status=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  stop_server ': client gone: ' "$FUNCTIONS"
  echo "--- console ($console):"
  tr -d '\r' < "$console" | sed -n '/uhca-baremetal:/,$p' | sed '1s/^.*uhca-baremetal:/uhca-baremetal:/'
  echo "--- server log ($log):"
  tail -n "$FUNCTIONS" "$log"
  echo "--- QEMU exited with status $status after $secs s (wall clock, boot to exit)"
  check "baremetal ($link): QEMU's exit status is 1 (every check passed; $status here)" [ "$status" = 1 ]
  check "baremetal ($link): the console ends with '$CHECKS passed, 0 failed'" \
    grep -Eq "^$CHECKS passed, 0 failed" <(tr -d '\r' < "$console")
  check "baremetal ($link): all $FUNCTIONS functions came up" \
    [ "$(grep -c '^PASS bring-up fn' "$console")" = "$FUNCTIONS" ]
  check "baremetal ($link): the server saw each function's client go with no protocol error" \
    [ "$(grep -Ec ': client gone: .*errors: 0,' "$log")" = "$FUNCTIONS" ]
  check "baremetal ($link): no IOMMU fault in the server's log" \
    bash -c '! grep -q "IOMMU fault:" "$1"' _ "$log"
done
rm -rf "$VFIO_USER_DIR"
echo
echo "baremetal: $pass passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" -gt 0 ]
