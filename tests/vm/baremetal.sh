#!/usr/bin/env bash
# uhca on bare metal: the program of baremetal/ (no operating system; PVH-booted by QEMU's
# -kernel) drives mock ConnectX functions served by uhca-vfio-user-server to QEMU 11.1's
# vfio-user-pci. Fetches QEMU 11.1 (fetch-qemu11.sh), builds the server and the program,
# then for each fabric (InfiniBand, Ethernet) starts the server with FUNCTIONS mock
# functions on one fabric, boots the program with one vfio-user-pci device per function
# and isa-debug-exit, and checks: QEMU's exit status is 1 (the program's pass; a failed
# check, a panic or a triple fault give anything else), the console's closing line says
# "N passed, 0 failed" with N the expected count, and the server's log has every function's client gone without
# protocol errors and no IOMMU fault. Then two hostile boots on one Ethernet function
# (baremetal/src/checks/hostile.rs): a server that never completes CREATE_CQ
# (--hang-opcode; the program must report the driver's typed command timeout) and a
# function removed while the program issues commands (--removal-file; the program must
# report a typed error), each with QEMU's status 1 and its exact count. Prints the
# console (from the program's first line) and one PASS/FAIL line per host-side check;
# exits 1 if any failed.
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
# four functions (communicators, two all-reduces, all-gather, broadcast, teardown), the FLR
# of function 0 (reopen, traffic, reset, typed error, old HCA closed, bring-up, traffic),
# pools empty; the IB CM between functions 0 and 1 (QP1s and CMs, a REJ for an unknown
# service, the connection by REQ/REP/RTU, SEND round trips on it, teardown).
CHECKS=${CHECKS:-$((2 + 2 * FUNCTIONS + 8 + 1 + 6 + 7 + 1 + 5))}
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

# boot_bm CONSOLE [QEMU ARG...]: boots the program with the console in CONSOLE and the
# further QEMU arguments (the vfio-user-pci devices, -append); sets status (QEMU's exit
# status) and secs (wall clock).
boot_bm() {
  local console=$1; shift
  rm -f "$console"
  local t0; t0=$(date +%s.%N)
  # Guest RAM in a shared memfd: the server reaches it through the memory file QEMU sends
  # with each DMA map (IOVA = guest-physical address, no vIOMMU).
  timeout "${BOOT_TIMEOUT:-120}" "$RIG_DIR/qemu11/qemu" -accel tcg -cpu max \
    -machine q35,memory-backend=bm_mem \
    -object "memory-backend-memfd,id=bm_mem,size=${MEM:-512}M,share=on" -m "${MEM:-512}M" \
    -nographic -no-reboot -display none -monitor none -serial "file:$console" \
    -kernel "$ELF" -device isa-debug-exit,iobase=0xf4,iosize=0x04 "$@"
  status=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
}

# show_console CONSOLE: the console from the program's first line.
show_console() {
  echo "--- console ($1):"
  tr -d '\r' < "$1" | sed -n '/uhca-baremetal:/,$p' | sed '1s/^.*uhca-baremetal:/uhca-baremetal:/'
}

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
  start_server "$log" --link "$link" --log --command-log "${sockets[@]}" || { ko "server ($link) started"; continue; }
  phase "boot ($link)"
  boot_bm "$console" "${devices[@]}"
  stop_server ': firmware pages held: ' "$FUNCTIONS"
  show_console "$console"
  echo "--- server log ($log):"
  grep -E ': client gone: |: firmware pages held: |: note: ' "$log"
  echo "--- QEMU exited with status $status after $secs s (wall clock, boot to exit)"
  check "baremetal ($link): QEMU's exit status is 1 (every check passed; $status here)" [ "$status" = 1 ]
  check "baremetal ($link): the console ends with '$CHECKS passed, 0 failed'" \
    grep -Eq "^$CHECKS passed, 0 failed" <(tr -d '\r' < "$console")
  check "baremetal ($link): all $FUNCTIONS functions came up" \
    [ "$(grep -c '^PASS bring-up fn' "$console")" = "$FUNCTIONS" ]
  check "baremetal ($link): the server saw each function's client go with no protocol error" \
    [ "$(grep -Ec ': client gone: .*errors: 0,' "$log")" = "$FUNCTIONS" ]
  check "baremetal ($link): the server's log has every function's firmware pages returned (held: 0)" \
    [ "$(grep -Ec ': firmware pages held: 0,' "$log")" = "$FUNCTIONS" ]
  check "baremetal ($link): no IOMMU fault in the server's log" \
    bash -c '! grep -q "IOMMU fault:" "$1"' _ "$log"
done

# The collective over two guests on one server (Ethernet; 2 functions each): the QPs
# between the guests are connected in band by the driver's IB CM (REQ/REP/RTU on QP1, the
# inboxes in the private data); bm-relay.py only collects both consoles (it would still
# copy "EP" lines, which the guests no longer print).
# Each guest: memory, PCI, 2 bring-ups, connect, 3 collectives, destroy, 2 teardowns,
# pools empty.
phase "the collective over two guests (Ethernet, 2 functions each)"
log=$RIG_DIR/logs/baremetal-server-duo.log
sockets=()
for i in 0 1 2 3; do sockets+=(--socket "$VFIO_USER_DIR/d$i.sock"); done
dev() { echo "{\"driver\":\"vfio-user-pci\",\"socket\":{\"path\":\"$VFIO_USER_DIR/d$1.sock\",\"type\":\"unix\"}}"; }
if start_server "$log" --link ethernet --log --command-log "${sockets[@]}"; then
  pids=() statuses=()
  for g in 0 1; do
    con=$VFIO_USER_DIR/con$g.sock
    timeout "${BOOT_TIMEOUT:-120}" "$RIG_DIR/qemu11/qemu" -accel tcg -cpu max \
      -machine q35,memory-backend=bm_mem \
      -object "memory-backend-memfd,id=bm_mem,size=${MEM:-512}M,share=on" -m "${MEM:-512}M" \
      -nographic -no-reboot -display none -monitor none \
      -chardev "socket,id=con,path=$con,server=on,wait=on" -serial chardev:con \
      -kernel "$ELF" -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
      -device "$(dev $((2 * g)))" -device "$(dev $((2 * g + 1)))" -append "duo=$g" &
    pids+=($!)
  done
  t0=$(date +%s.%N)
  python3 "$VM/bm-relay.py" "$VFIO_USER_DIR/con0.sock" "$RIG_DIR/logs/baremetal-duo0.log" \
    "$VFIO_USER_DIR/con1.sock" "$RIG_DIR/logs/baremetal-duo1.log" "${BOOT_TIMEOUT:-120}"
  for p in "${pids[@]}"; do wait "$p"; statuses+=($?); done
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  stop_server ': firmware pages held: ' 4
  for g in 0 1; do
    show_console "$RIG_DIR/logs/baremetal-duo$g.log" | grep -v '^EP '
    echo "--- guest $g: QEMU exited with status ${statuses[$g]}"
    check "baremetal (duo, guest $g): QEMU's exit status is 1 (${statuses[$g]} here)" [ "${statuses[$g]}" = 1 ]
    check "baremetal (duo, guest $g): the console ends with '12 passed, 0 failed'" \
      grep -Eq '^12 passed, 0 failed' <(tr -d '\r' < "$RIG_DIR/logs/baremetal-duo$g.log")
  done
  echo "--- both guests within $secs s"
  check "baremetal (duo): the server's log has every function's firmware pages returned (held: 0)" \
    [ "$(grep -Ec ': firmware pages held: 0,' "$log")" = 4 ]
else
  ko "server (duo) started"
fi

# Hostile devices (one function, Ethernet): checks memory, PCI, bring-up, then the case's.
hostile_dev=(-device "{\"driver\":\"vfio-user-pci\",\"socket\":{\"path\":\"$VFIO_USER_DIR/h0.sock\",\"type\":\"unix\"}}")

# A device that stops answering: every CREATE_CQ is taken and never completed.
phase "hostile: a device that never completes CREATE_CQ"
log=$RIG_DIR/logs/baremetal-server-hang.log
console=$RIG_DIR/logs/baremetal-hang.log
if start_server "$log" --link ethernet --log --hang-opcode 0x400 --socket "$VFIO_USER_DIR/h0.sock"; then
  boot_bm "$console" "${hostile_dev[@]}" -append hostile=hang
  stop_server ': client gone: ' 1
  show_console "$console"
  echo "--- QEMU exited with status $status after $secs s"
  check "baremetal (hang): QEMU's exit status is 1, no hang ($status here)" [ "$status" = 1 ]
  check "baremetal (hang): the console ends with '5 passed, 0 failed'" \
    grep -Eq '^5 passed, 0 failed' <(tr -d '\r' < "$console")
  check "baremetal (hang): the typed timeout error names CREATE_CQ" \
    grep -q 'error: .*CREATE_CQ' "$console"
else
  ko "server (hang) started"
fi

# Surprise removal: once the program is up and issuing commands, the device vanishes (every
# read all ones, writes dropped: the server's --removal-file). Killing the server instead
# makes QEMU 11.1 abort (an assertion in its vfio-user client), which no guest can survive.
phase "hostile: surprise removal under the running program"
log=$RIG_DIR/logs/baremetal-server-removal.log
console=$RIG_DIR/logs/baremetal-removal.log
removal=$VFIO_USER_DIR/removed
rm -f "$removal"
if start_server "$log" --link ethernet --log --removal-file "$removal" --socket "$VFIO_USER_DIR/h0.sock"; then
  rm -f "$console"
  (
    for _ in $(seq 1200); do
      grep -q 'hostile: ready for surprise removal' "$console" 2>/dev/null && break
      sleep 0.05
    done
    touch "$removal"
  ) &
  remover=$!
  boot_bm "$console" "${hostile_dev[@]}" -append hostile=removal
  wait "$remover"
  stop_server ': client gone: ' 1
  show_console "$console"
  echo "--- server log ($log):"
  tail -n 2 "$log"
  echo "--- QEMU exited with status $status after $secs s"
  check "baremetal (removal): QEMU's exit status is 1, no hang ($status here)" [ "$status" = 1 ]
  check "baremetal (removal): the console ends with '4 passed, 0 failed'" \
    grep -Eq '^4 passed, 0 failed' <(tr -d '\r' < "$console")
  check "baremetal (removal): the server removed the function while the program ran" \
    grep -q 'every function removed' "$log"
else
  ko "server (removal) started"
fi
rm -rf "$VFIO_USER_DIR"
echo
echo "baremetal: $pass passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" -gt 0 ]
