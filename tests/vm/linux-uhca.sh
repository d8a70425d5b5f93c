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

RIG_NAME=linux-uhca
. "$VM/lib/report.sh"
. "$VM/lib/server.sh"
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
log=$RIG_DIR/logs/linux-uhca-server.log
start_server "$log" --link infiniband --command-log \
  --command-dump "$RIG_DIR/logs/linux-uhca.cmds" --pcap "$RIG_DIR/logs/linux-uhca.pcap" \
  --socket "$VFIO_USER_DIR/fn0.sock" --socket "$VFIO_USER_DIR/fn1.sock" \
  --socket "$VFIO_USER_DIR/fn2.sock" || exit 1

phase "boot and run"
boot_vfio_user linuxuhca "$RIG_DIR/logs/linuxuhca.log" rig.link=infiniband
rc=$?
stop_server "firmware pages held" 3

phase "the server's log"
grep -v ': cmd ' "$log" | sed 's/^/  server: /'
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
