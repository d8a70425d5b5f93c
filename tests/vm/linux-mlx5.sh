#!/usr/bin/env bash
# Linux's own mlx5 driver against the mock: fetches QEMU 11.1 (fetch-qemu11.sh), builds the
# server, builds the rig, starts uhca-vfio-user-server with one mock function on InfiniBand
# (LINK=ethernet: Ethernet) and its command log, boots the guest with one vfio-user-pci
# device and runs guest/tests/linuxmlx5.sh (modprobe mlx5_core, checks, modprobe mlx5_ib,
# ibv_devinfo, rmmod).
# Then checks the server's command log of the function: what Linux sent, every command
# completed with status OK, DISABLE_HCA at the end with every firmware page returned. The
# server also dumps every command's bytes (target/vm/logs/linux-mlx5-LINK.cmds, Linux's
# side for linux-vs-uhca.sh).
# Prints PASS/FAIL lines.
#
#   bash tests/vm/linux-mlx5.sh     environment: as run-vm.sh, and LINK (infiniband, what
#                                   CI runs; ethernet: the same on an Ethernet function);
#                                   EXTRA_APPEND=rig.mlx5_debug=1 loads mlx5_core with
#                                   debug_mask=1, rig.mlx5_trace=1 traces mlx5_ib's probe
# The guest boots with no_timer_check: under TCG on a loaded machine the kernel's check that
# the timer interrupt works through the remapped IO-APIC can time out and panic the boot
# ("timer doesn't work through Interrupt-remapped IO-APIC", seen once while cargo built).
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
export VFIO_USER_DIR=${VFIO_USER_DIR:-$(mktemp -d /tmp/uhca-linux-mlx5.XXXXXX)}
LINK=${LINK:-infiniband}
cd "$REPO"

RIG_NAME=linux-mlx5
. "$VM/lib/report.sh"
. "$VM/lib/server.sh"
phase "fetch QEMU 11.1"
bash "$VM/fetch-qemu11.sh" || exit 1
phase "build the server"
cargo build --release -p uhca-vfio-user --bin uhca-vfio-user-server || exit 1
phase "build the rig"
bash "$VM/build-rig.sh" linuxmlx5 || exit 1

phase "start the server ($LINK)"
log=$RIG_DIR/logs/linux-mlx5-server.log
start_server "$log" --link "$LINK" --command-log \
  --command-dump "$RIG_DIR/logs/linux-mlx5-$LINK.cmds" --socket "$VFIO_USER_DIR/fn0.sock" || exit 1

phase "boot and run"
# rig.ib_lid, rig.ib_sm_lid: what the guest's ibv_devinfo must show. The server's fabric
# attaches its one function first, and the mock's subnet manager gives ports LIDs in attach
# order from 1 and puts the SM behind the first one (mock/src/fabric/sm.rs).
boot_vfio_user linuxmlx5 "$RIG_DIR/logs/linuxmlx5.log" "rig.link=$LINK rig.ib_lid=1 rig.ib_sm_lid=1"
rc=$?
# QEMU is gone: the server prints the function's command log when its client goes.
stop_server "firmware pages held" 1

phase "the mock's command log of Linux's mlx5_core"
cmds=$(sed -n 's/.*: cmd \([A-Za-z0-9]*\) .*/\1/p' "$log")
echo "commands Linux sent, in order (repeats folded):"
echo "$cmds" | uniq -c | sed 's/^/  /'
echo "distinct: $(echo "$cmds" | sort -u | grep -c .)"
grep -v ': cmd ' "$log" | sed 's/^/  server: /'
check "command log: ENABLE_HCA first" [ "$(echo "$cmds" | head -1)" = EnableHca ]
check "command log: CREATE_EQ" grep -q ': cmd CreateEq ' "$log"
check "command log: DISABLE_HCA last" [ "$(echo "$cmds" | tail -1)" = DisableHca ]
# On Ethernet (not in CI) one refusal is documented: mlx5_ib reads the PTYS register, which
# the model does not have (mock/MODEL.md).
allowed='^$'
[ "$LINK" = ethernet ] && allowed='AccessReg op_mod=0x1 register=0x5004 status=BadParamErr'
check "command log: every command completed with status OK" \
  sh -c "! grep ': cmd ' '$log' | grep -v 'status=Ok .* Completed\$' | grep -v '$allowed'"
# mlx5_ib's device resources: two XRC domains and an XRC SRQ, made and freed.
check "command log: mlx5_ib's XRC domains and XRC SRQ created and destroyed" \
  sh -c "grep -q ': cmd CreateXrcSrq op_mod=0x0 status=Ok' '$log' &&
    grep -q ': cmd DestroyXrcSrq op_mod=0x0 status=Ok' '$log' &&
    [ \$(grep -c ': cmd AllocXrcd op_mod=0x0 status=Ok' '$log') -eq 2 ] &&
    [ \$(grep -c ': cmd DeallocXrcd op_mod=0x0 status=Ok' '$log') -eq 2 ]"
# devlink's version came from the registers: MCQS (0x9060) and MCQI (0x9061) were read.
check "command log: ACCESS_REGISTER MCQS and MCQI read (devlink dev info)" \
  sh -c "grep -q ': cmd AccessReg op_mod=0x1 register=0x9060 status=Ok' '$log' &&
    grep -q ': cmd AccessReg op_mod=0x1 register=0x9061 status=Ok' '$log'"
# mlx5_ib's device resources and special QPs (stage 2): an XRC SRQ, a basic SRQ (an RMP at
# ISSI 1), four QPs (the write-combining test's UD QP, QP0, QP1, the UMR QP), each taken to
# RTS and destroyed again at rmmod.
if [ "$LINK" = infiniband ]; then
check "command log: mlx5_ib's CREATE_XRC_SRQ and CREATE_RMP" \
  sh -c "grep -q ': cmd CreateXrcSrq ' '$log' && grep -q ': cmd CreateRmp ' '$log'"
nqp=$(grep -c ': cmd CreateQp ' "$log")
check "command log: $nqp CREATE_QP (4: WC test, QP0, QP1, UMR), as many RTR2RTS and DESTROY_QP" \
  [ "$nqp" = 4 ] && [ "$(grep -c ': cmd Rtr2rtsQp ' "$log")" = 4 ] &&
  [ "$(grep -c ': cmd DestroyQp ' "$log")" = 4 ]
fi
check "no firmware page left at DISABLE_HCA (no model note)" \
  sh -c "! grep -q 'note: DISABLE_HCA with' '$log'"
check "server: firmware pages held 0, state Disabled" \
  grep -q 'firmware pages held: 0, state: Disabled' "$log"
echo "server checks: $pass passed, $fail failed"
[ $fail -eq 0 ] || rc=1
rm -rf "$VFIO_USER_DIR"
exit $rc
