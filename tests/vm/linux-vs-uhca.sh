#!/usr/bin/env bash
# Two drivers, one device, side by side: the commands Linux's mlx5_core/mlx5_ib sent to a
# mock function (the dump linux-mlx5.sh's server writes) against the ones uhca sent through
# its --device path in the vfiouser test (the dump vfio-user.sh's server writes, functions
# fn0 and fn1), on the same fabric (LINK, default infiniband); then rdma-core's VFIO driver
# (fn2 of the same dump) against uhca's the same way. uhca-cmd-compare decodes each
# input with the uhca-fwif layouts, lines the commands up by kind and prints, per kind both
# sent, every field whose values differ and one PASS/FAIL line: FAIL for a difference that
# is not an object number, an address or a PSN and not listed, with its reason, in
# tests/vm/linux-vs-uhca.expected or rdma-core-vs-uhca.expected (mock/MODEL.md, "uhca's
# commands beside Linux's", says why each one is right or harmless). A missing dump is a
# FAIL, never a skip.
#
#   bash tests/vm/linux-vs-uhca.sh     after tests/vm/vfio-user.sh and tests/vm/linux-mlx5.sh
#                                      (ci.sh runs it after both); environment: RIG_DIR, LINK
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
LINK=${LINK:-infiniband}
cd "$REPO"
cargo build --release -p uhca-vfio-user --bin uhca-cmd-compare || exit 1
linux=$RIG_DIR/logs/linux-mlx5-$LINK.cmds
uhca=$RIG_DIR/logs/vfio-user-$LINK.cmds
rc=0
for f in "$linux" "$uhca"; do
  if [ -s "$f" ]; then
    echo "PASS linux-vs-uhca: dump $f ($(wc -l < "$f") commands)"
  else
    echo "FAIL linux-vs-uhca: no command dump $f (run linux-mlx5.sh and vfio-user.sh first)"
    rc=1
  fi
done
[ $rc -eq 0 ] || exit 1
# The commands of a bring-up and teardown both drivers send today; the kinds that appear
# in both logs beyond these (the verbs objects, as Linux's mlx5_ib goes further) are
# compared as well, automatically.
"$TARGET_DIR/release/uhca-cmd-compare" --reference Linux "$linux" \
  --uhca "$uhca@fn0.sock,fn1.sock" \
  --expected "$VM/linux-vs-uhca.expected" \
  --require ENABLE_HCA,QUERY_ISSI,SET_ISSI,QUERY_PAGES,MANAGE_PAGES,QUERY_HCA_CAP,SET_HCA_CAP,INIT_HCA,ALLOC_UAR,CREATE_EQ,TEARDOWN_HCA,DISABLE_HCA || rc=1
# rdma-core's own VFIO driver (libmlx5's mlx5_vfio provider, NVIDIA's user-space code, the
# closest relative of uhca's --device path) on the vfiouser boot's third function: its
# bring-up, a PD, an MTT memory key and teardown beside uhca's.
echo
"$TARGET_DIR/release/uhca-cmd-compare" --reference rdma-core "$uhca@fn2.sock" \
  --uhca "$uhca@fn0.sock,fn1.sock" \
  --expected "$VM/rdma-core-vs-uhca.expected" \
  --require ENABLE_HCA,SET_ISSI,QUERY_PAGES,MANAGE_PAGES,QUERY_HCA_CAP,SET_HCA_CAP,INIT_HCA,CREATE_EQ,ALLOC_PD,CREATE_MKEY,TEARDOWN_HCA || rc=1
exit $rc
