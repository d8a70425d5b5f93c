#!/usr/bin/env bash
# rdma-core's own test suite over Linux's mlx5_ib on the mock (issue 31): fetches QEMU 11.1,
# builds the server, builds the rig with Debian's python3-pyverbs and its tests, starts
# uhca-vfio-user-server with one mock function on InfiniBand, boots the guest with it and
# runs guest/tests/pyverbs.sh (the suite, one module per process), then
# pyverbs-report.py: the counts, the skips grouped by reason, every failure and error; fails
# on a failure or error that tests/vm/pyverbs.expected does not list, or a module that did
# not finish.
#
#   bash tests/vm/pyverbs.sh     environment: as run-vm.sh (TIMEOUT default 900 s,
#                                TEST_TIMEOUT 600 s); PYVERBS_MODULE_TIMEOUT (120 s a module)
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
export VFIO_USER_DIR=${VFIO_USER_DIR:-$(mktemp -d /tmp/uhca-pyverbs.XXXXXX)}
export TIMEOUT=${TIMEOUT:-900} TEST_TIMEOUT=${TEST_TIMEOUT:-600}
cd "$REPO"

RIG_NAME=pyverbs
. "$VM/lib/report.sh"
. "$VM/lib/server.sh"
phase "fetch QEMU 11.1"
bash "$VM/fetch-qemu11.sh" || exit 1
phase "build the server"
cargo build --release -p uhca-vfio-user --bin uhca-vfio-user-server || exit 1
phase "build the rig"
bash "$VM/build-rig.sh" pyverbs || exit 1

phase "start the server (infiniband, one function)"
log=$RIG_DIR/logs/pyverbs-server.log
start_server "$log" --link infiniband --command-log --socket "$VFIO_USER_DIR/fn0.sock" || exit 1

phase "boot and run the suite"
boot_vfio_user pyverbs "$RIG_DIR/logs/pyverbs.log" \
  "rig.link=infiniband rig.pyverbs_timeout=${PYVERBS_MODULE_TIMEOUT:-120}"
rc=$?
stop_server "firmware pages held" 1

phase "the server's log"
grep -v ': cmd ' "$log" | sed 's/^/  server: /'
echo "  server: $(grep -c ': cmd ' "$log") commands, $(grep ': cmd ' "$log" |
  grep -vc 'status=Ok .* Completed$') not OK"

phase "the suite's results"
python3 "$VM/pyverbs-report.py" "$RIG_DIR/logs/pyverbs.log" "$VM/pyverbs.expected" || rc=1
rm -rf "$VFIO_USER_DIR"
exit $rc
