#!/usr/bin/env bash
# Boots the rig (build-rig.sh first) under QEMU with software emulation and runs guest tests.
#
#   tests/vm/run-vm.sh TESTS        TESTS: comma-separated names of conf/*.conf, e.g. vfio
#
# Exit status: 0 when every test passed; 1 when one failed, QEMU timed out or the guest
# died. The guest console goes to stdout and to RIG_DIR/logs/<tests>.log.
# Environment: RIG_DIR (<repo>/target/vm), TIMEOUT (QEMU wall-clock limit in s, 300),
#   TEST_TIMEOUT (per test, in the guest, 120), SMP (2), MEM (1024), ACCEL (tcg),
#   LOG (log file), EXTRA_QEMU, EXTRA_APPEND (kernel command line; rig.shell for a shell),
#   QEMU (the QEMU program, qemu-system-x86_64), IOMMU_OPTS (options of the emulated Intel
#   IOMMU, intremap=on), MEM_SHARED=1 (guest RAM in a shared memfd, as vfio-user needs).
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TESTS=${1:?usage: run-vm.sh TESTS (comma-separated, e.g. vfio)}
TIMEOUT=${TIMEOUT:-300}

devices=()
for t in ${TESTS//,/ }; do
  [ -f "$VM/conf/$t.conf" ] || { echo "run-vm: no test '$t' (no conf/$t.conf)" >&2; exit 1; }
  QEMU_DEVICES=""
  # shellcheck source=/dev/null
  . "$VM/conf/$t.conf"
  # shellcheck disable=SC2206
  devices+=($QEMU_DEVICES)
done
for f in kernel.img initramfs.cpio; do
  [ -e "$RIG_DIR/$f" ] || { echo "run-vm: no $RIG_DIR/$f: run build-rig.sh first" >&2; exit 1; }
done
mkdir -p "$RIG_DIR/logs"
LOG=${LOG:-$RIG_DIR/logs/${TESTS//,/_}.log}

# KVM is not used even where it exists: on the CI machines it starts, then hangs.
# q35 with an emulated Intel IOMMU (interrupt remapping needs the split irqchip): the
# Debian kernel offers neither VFIO no-IOMMU mode nor iommufd, so VFIO needs it.
# isa-debug-exit lets the guest set QEMU's exit status.
machine=q35,kernel-irqchip=split
mem=()
if [ "${MEM_SHARED:-0}" = 1 ]; then
  mem=(-object "memory-backend-memfd,id=rig_mem,size=${MEM:-1024}M,share=on")
  machine=$machine,memory-backend=rig_mem
fi
cmd=(${QEMU:-qemu-system-x86_64}
  -accel "${ACCEL:-tcg}" -machine "$machine" -cpu max
  -smp "${SMP:-2}" -m "${MEM:-1024}" "${mem[@]}"
  -device "intel-iommu,${IOMMU_OPTS:-intremap=on}"
  -nic none
  "${devices[@]}"
  -device isa-debug-exit,iobase=0xf4,iosize=0x04
  -kernel "$RIG_DIR/kernel.img" -initrd "$RIG_DIR/initramfs.cpio"
  -append "console=ttyS0 panic=-1 quiet intel_iommu=on iommu=pt rig.tests=$TESTS rig.timeout=${TEST_TIMEOUT:-120} ${EXTRA_APPEND:-}"
  -nographic -no-reboot)
# shellcheck disable=SC2206
cmd+=(${EXTRA_QEMU:-})

echo "+ ${cmd[*]}" | tee "$LOG"
t0=$(date +%s.%N)
timeout -k 10 "$TIMEOUT" "${cmd[@]}" < /dev/null 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

# QEMU's status: 1 = the guest wrote 0 to isa-debug-exit (all passed), 3 = it wrote 1.
ok=1
report() { echo "run-vm: $*" | tee -a "$LOG"; }
report "QEMU exit status $rc after $wall s; log: $LOG"
for t in ${TESTS//,/ }; do
  r=$(tr -d '\r' < "$LOG" | sed -n "s/^RIG-RESULT $t rc=\([0-9]*\).*/\1/p" | tail -1)
  case $r in
    0) report "$t passed" ;;
    "") report "$t did not finish"; ok=0 ;;
    *) report "$t FAILED (status $r)"; ok=0 ;;
  esac
done
case $rc in
  1) ;;
  3) ok=0 ;;
  124|137) report "QEMU timed out after $TIMEOUT s"; ok=0 ;;
  *) report "the guest stopped without a result (kernel panic? QEMU error?)"; ok=0 ;;
esac
if [ $ok = 1 ]; then report PASS; exit 0; fi
report FAIL
exit 1
