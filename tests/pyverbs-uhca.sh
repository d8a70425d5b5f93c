#!/usr/bin/env bash
# rdma-core's own test suite (issue 31) over uhca's libibverbs.so.1 on the host: Debian's
# python3-pyverbs, unmodified, loads ibverbs/'s cdylib (LD_LIBRARY_PATH) and its companions
# (libmlx5, libefa, librdmacm stand-ins built from ibverbs/tests/c/companions/), and runs the
# suite Debian ships with it (/usr/share/doc/rdma-core/tests, the same version), one module
# a process (tests/vm/pyverbs/run_module.py, as the VM rig runs it over mlx5_ib), on one mock
# device with a RoCEv2 port on UDP 127.0.0.121 (the suite's traffic tests use loopback QPs on
# one device). tests/vm/pyverbs-report.py prints the counts, the skips by reason, every
# failure and error, and fails on one that tests/pyverbs-uhca.expected does not list.
#
#   bash tests/pyverbs-uhca.sh     environment: UHCA_REQUIRE_PYVERBS=1 fails (instead of
#                                  skipping) when python3-pyverbs, its suite or cc is missing;
#                                  PYVERBS_MODULE_TIMEOUT (60 s a module); PYVERBS_LOG (where
#                                  the suite's output goes, default a temporary file)
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
SUITE=/usr/share/doc/rdma-core/tests
PY=/usr/bin/python3 # Debian's interpreter: python3-pyverbs is built for it
IP=127.0.0.121
cd "$REPO"

missing() {
  if [[ "${UHCA_REQUIRE_PYVERBS:-}" == 1 ]]; then
    echo "FAIL: $1 (UHCA_REQUIRE_PYVERBS=1)"
    exit 1
  fi
  echo "skip: $1 (apt-get install python3-pyverbs gcc)"
  exit 0
}
[[ -x $PY ]] && $PY -c 'import pyverbs.device' 2>/dev/null || missing "no python3-pyverbs for $PY"
[[ -f $SUITE/run_tests.py ]] || missing "no rdma-core test suite in $SUITE"
command -v cc >/dev/null || missing "no C compiler (cc) for the companion libraries"

cargo build -q -p uhca-ibverbs || exit 1
so=$TARGET_DIR/debug/libuhca_ibverbs.so
work=$(mktemp -d /tmp/uhca-pyverbs.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lib"
ln -s "$so" "$work/lib/libibverbs.so.1"
src=ibverbs/tests/c/companions
for n in mlx5 efa rdmacm; do
  cc -shared -fPIC -O2 -Wall -Werror -Wno-unused-parameter -Wl,-soname,lib$n.so.1 \
    -Wl,--version-script=$src/$n.map -o "$work/lib/lib$n.so.1" $src/$n.c || exit 1
done
# Every symbol (with its version) that pyverbs' extension modules import resolves here.
undefined=$(for f in $($PY -c 'import os, pyverbs; print(os.path.dirname(pyverbs.__file__))' |
  xargs -I{} find {} -name '*.so'); do
  LD_LIBRARY_PATH=$work/lib ldd -r "$f" 2>&1 | grep -E 'undefined symbol|not found'
done | sort -u)
if [[ -n $undefined ]]; then
  echo "FAIL: pyverbs imports what uhca's libraries lack:"
  echo "$undefined"
  exit 1
fi

$PY tests/vm/pyverbs/run_module.py --unpack "$work/tests" || exit 1
log=${PYVERBS_LOG:-$work/pyverbs.log}
echo "rdma-core's suite: $(ls "$work"/tests/test_*.py | wc -l) modules, device uhca0 on udp:$IP"
LD_LIBRARY_PATH=$work/lib UHCA_DEVICES="mock:uhca0=udp:$IP" \
  $PY tests/vm/pyverbs/run_module.py --all "$work/tests" "${PYVERBS_MODULE_TIMEOUT:-60}" \
  --dev uhca0 >"$log" 2>"$work/runner.err"
rc=$?
[[ $rc == 0 ]] && echo "PYV-DONE" >>"$log" || {
  echo "the runner failed ($rc):"
  tail -20 "$work/runner.err"
}
# The tracebacks of failures and errors (the report lists them by test id).
grep -E '^  test_[a-z0-9_]+: ' "$log" | head -400
$PY tests/vm/pyverbs-report.py "$log" tests/pyverbs-uhca.expected
