#!/usr/bin/env bash
# What CI runs for the VM rig: builds the project's programs the guest tests use, builds the
# rig (Debian packages, kernel, initramfs), boots it and runs the tests. Prints how long each
# phase took; exits non-zero when any phase fails (a failed check, a QEMU timeout, ...).
#
#   bash tests/vm/ci.sh [TESTS]      TESTS: comma-separated (default:
#                                    vfio,rxe,hostile,vfiouser,baremetal,linuxmlx5,linuxuhca,
#                                    pyverbs;
#                                    vfiouser runs tests/vm/vfio-user.sh, baremetal
#                                    tests/vm/baremetal.sh (uhca with no operating
#                                    system, booted by QEMU 11.1's -kernel), linuxmlx5
#                                    tests/vm/linux-mlx5.sh and linuxuhca
#                                    tests/vm/linux-uhca.sh, each its own boot; with
#                                    vfiouser and linuxmlx5, tests/vm/linux-vs-uhca.sh
#                                    compares Linux's and rdma-core's commands with uhca's;
#                                    after linuxuhca, linux-vs-uhca.sh linuxuhca compares
#                                    libmlx5's verbs objects with uhca's; pyverbs
#                                    tests/vm/pyverbs.sh, rdma-core's own test suite
#                                    over Linux's mlx5_ib on the mock, its own boot)
#
# Runs as root on a fresh clone (apt-get installs QEMU and friends on the first run);
# target/vm caches the kernel and the base initramfs for the next run.
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
TESTS=${1:-vfio,rxe,hostile,vfiouser,baremetal,linuxmlx5,linuxuhca,pyverbs}
# vfiouser, baremetal, linuxmlx5, linuxuhca and pyverbs need QEMU 11.1 and their own boots
# (vfio-user.sh, baremetal.sh, linux-mlx5.sh, linux-uhca.sh, pyverbs.sh); the others share
# one boot.
VFIO_USER=0 BAREMETAL=0 LINUX_MLX5=0 LINUX_UHCA=0 PYVERBS=0
[[ ",$TESTS," == *,vfiouser,* ]] && VFIO_USER=1
[[ ",$TESTS," == *,baremetal,* ]] && BAREMETAL=1
[[ ",$TESTS," == *,linuxmlx5,* ]] && LINUX_MLX5=1
[[ ",$TESTS," == *,linuxuhca,* ]] && LINUX_UHCA=1
[[ ",$TESTS," == *,pyverbs,* ]] && PYVERBS=1
TESTS=$(echo ",$TESTS," | sed 's/,vfiouser,/,/g; s/,baremetal,/,/g; s/,linuxmlx5,/,/g; s/,linuxuhca,/,/g; s/,pyverbs,/,/g; s/^,//; s/,$//')
cd "$REPO"

names=() secs=() results=()
failed=""
phase() {
  local name=$1; shift
  echo
  echo "=== vm-rig: $name ($(date -u +%H:%M:%S))"
  local t0; t0=$(date +%s.%N)
  "$@"
  local rc=$?
  names+=("$name")
  secs+=("$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')")
  if [ $rc -eq 0 ]; then results+=(ok); else results+=("FAILED ($rc)"); failed=$name; fi
  return $rc
}

build_programs() {
  local t
  for t in ${TESTS//,/ }; do
    [ -f "$VM/conf/$t.conf" ] || { echo "no test '$t' (no tests/vm/conf/$t.conf)"; return 1; }
    CARGO_BUILD=""
    # shellcheck source=/dev/null
    . "$VM/conf/$t.conf"
    if [ -n "$CARGO_BUILD" ]; then
      echo "+ cargo build $CARGO_BUILD"
      # shellcheck disable=SC2086
      cargo build $CARGO_BUILD || return 1
    fi
  done
}

start=$(date +%s.%N)
if [ -n "$TESTS" ]; then
  phase "build the test programs" build_programs &&
    phase "build the rig" bash "$VM/build-rig.sh" "$TESTS" &&
    phase "boot and run: $TESTS" bash "$VM/run-vm.sh" "$TESTS"
fi
# The mock behind real Linux VFIO, through QEMU 11.1's vfio-user client (its own QEMU, rig
# and boot).
if [ -z "$failed" ] && [ $VFIO_USER = 1 ]; then
  phase "vfio-user: the mock ConnectX behind real VFIO" bash "$VM/vfio-user.sh"
fi
# uhca with no operating system: the bare-metal program of baremetal/ booted by QEMU 11.1
# (-kernel, PVH) on mock functions of one fabric, InfiniBand and Ethernet (its own boots).
if [ -z "$failed" ] && [ $BAREMETAL = 1 ]; then
  phase "baremetal: uhca with no operating system" bash "$VM/baremetal.sh"
fi
# Linux's own mlx5_core probing a mock function (QEMU 11.1, vfio-user, one boot).
if [ -z "$failed" ] && [ $LINUX_MLX5 = 1 ]; then
  phase "linuxmlx5: Linux's mlx5_core on the mock" bash "$VM/linux-mlx5.sh"
fi
# Linux's and rdma-core's commands beside uhca's, field by field (the two boots' command dumps).
if [ -z "$failed" ] && [ $VFIO_USER = 1 ] && [ $LINUX_MLX5 = 1 ]; then
  phase "linux-vs-uhca: other drivers' commands beside uhca's" bash "$VM/linux-vs-uhca.sh"
fi
# Linux's mlx5_ib + libmlx5 and uhca on two mock functions of one fabric, talking (QEMU
# 11.1, vfio-user, one boot).
if [ -z "$failed" ] && [ $LINUX_UHCA = 1 ]; then
  phase "linuxuhca: Linux's mlx5 and uhca talk" bash "$VM/linux-uhca.sh"
fi
# The same boot's verbs objects, field by field: libmlx5's (through Linux's mlx5_ib) on fn0
# against uhca's on fn1 (the linuxuhca boot's command dump; no boot of its own).
if [ -z "$failed" ] && [ $LINUX_UHCA = 1 ]; then
  phase "libmlx5-vs-uhca: verbs objects beside uhca's" bash "$VM/linux-vs-uhca.sh" linuxuhca
fi
# rdma-core's own pyverbs test suite over Linux's mlx5_ib + libmlx5 on a mock function
# (QEMU 11.1, vfio-user, one boot), against the reviewed tests/vm/pyverbs.expected.
if [ -z "$failed" ] && [ $PYVERBS = 1 ]; then
  phase "pyverbs: rdma-core's test suite on the mock" bash "$VM/pyverbs.sh"
fi

echo
echo "=== vm-rig: timings"
for i in "${!names[@]}"; do
  printf '  %-32s %7s s  %s\n' "${names[$i]}" "${secs[$i]}" "${results[$i]}"
done
printf '  %-32s %7s s\n' total "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
if [ -n "$failed" ]; then
  echo "vm-rig: FAILED in: $failed"
  exit 1
fi
echo "vm-rig: passed"
