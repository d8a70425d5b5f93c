#!/usr/bin/env bash
# Linux and uhca talk (issue 12, stage 3): fetches QEMU 11.1, builds the server and uhca's
# pingpong examples, builds the rig, starts uhca-vfio-user-server with three mock functions on
# one InfiniBand fabric and its command log, boots the guest with them and runs
# guest/tests/linuxuhca.sh: Linux's mlx5_ib + rdma-core's libmlx5 on the first function,
# uhca through vfio-pci on the second, ibv_rc_pingpong / ibv_ud_pingpong against uhca's
# rc_pingpong / ud_pingpong, both ways; then ibv_xsrq_pingpong and ibv_srq_pingpong between
# Linux's first and third functions. Then checks the server's command log: every command
# of both drivers completed OK. Prints PASS/FAIL lines.
#
#   bash tests/vm/linux-uhca.sh     environment: as run-vm.sh
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
export VFIO_USER_DIR=${VFIO_USER_DIR:-$(mktemp -d /tmp/uhca-linux-uhca.XXXXXX)}
cd "$REPO"

phase() { echo; echo "=== linux-uhca: $* ($(date -u +%H:%M:%S))"; }
phase "fetch QEMU 11.1"
bash "$VM/fetch-qemu11.sh" || exit 1
phase "build the server and uhca's examples"
cargo build --release -p uhca-vfio-user --bin uhca-vfio-user-server || exit 1
. "$VM/conf/linuxuhca.conf"
# shellcheck disable=SC2086
cargo build $CARGO_BUILD || exit 1
phase "build the rig"
bash "$VM/build-rig.sh" linuxuhca || exit 1

phase "start the server (infiniband, three functions)"
mkdir -p "$RIG_DIR/logs"
log=$RIG_DIR/logs/linux-uhca-server.log
rm -f "$VFIO_USER_DIR"/fn*.sock
"$TARGET_DIR/release/uhca-vfio-user-server" --link infiniband --command-log \
  --command-dump "$RIG_DIR/logs/linux-uhca.cmds" --pcap "$RIG_DIR/logs/linux-uhca.pcap" \
  --socket "$VFIO_USER_DIR/fn0.sock" --socket "$VFIO_USER_DIR/fn1.sock" \
  --socket "$VFIO_USER_DIR/fn2.sock" > "$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$VFIO_USER_DIR"' EXIT
for _ in $(seq 100); do
  [ -S "$VFIO_USER_DIR/fn0.sock" ] && [ -S "$VFIO_USER_DIR/fn1.sock" ] &&
    [ -S "$VFIO_USER_DIR/fn2.sock" ] && break
  sleep 0.1
done
if [ ! -S "$VFIO_USER_DIR/fn2.sock" ]; then
  echo "linux-uhca: the server did not start"; cat "$log"; exit 1
fi

phase "boot and run"
QEMU=$RIG_DIR/qemu11/qemu IOMMU_OPTS=intremap=on,caching-mode=on MEM_SHARED=1 \
  LOG=$RIG_DIR/logs/linuxuhca.log EXTRA_APPEND="no_timer_check rig.link=infiniband ${EXTRA_APPEND:-}" \
  bash "$VM/run-vm.sh" linuxuhca
rc=$?
for _ in $(seq 50); do
  [ "$(grep -c "firmware pages held" "$log")" -ge 3 ] && break
  sleep 0.1
done
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

phase "the server's log"
grep -v ': cmd ' "$log" | sed 's/^/  server: /'
pass=0 fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
check() { name=$1; shift; if "$@"; then ok "$name"; else ko "$name"; fi; }
bad=$(grep ': cmd ' "$log" | grep -v 'status=Ok .* Completed$')
[ -z "$bad" ] || echo "$bad"
check "command log: every command of the three functions completed with status OK" [ -z "$bad" ]
check "no model note (the model saw nothing it had to remark on)" \
  sh -c "! grep -q 'note:' '$log'"
# XRC on the wire: the capture against what ibv_xsrq_pingpong printed in the guest.
xrc=$(python3 "$VM/xrc-wire.py" "$RIG_DIR/logs/linux-uhca.pcap" "$RIG_DIR/logs/linuxuhca.log" 2>&1)
echo "$xrc"
pass=$((pass + $(echo "$xrc" | grep -c '^PASS'))) fail=$((fail + $(echo "$xrc" | grep -vc '^PASS')))
echo "server checks: $pass passed, $fail failed"
[ $fail -eq 0 ] || rc=1
rm -rf "$VFIO_USER_DIR"
exit $rc
