#!/usr/bin/env bash
# Two drivers, one device, side by side. Two modes, one per pair of boots:
#
# linuxmlx5 (the default): the commands Linux's mlx5_core/mlx5_ib sent to a mock function
# (the dump linux-mlx5.sh's server writes) against the ones uhca sent through its --device
# path in the vfiouser test (the dump vfio-user.sh's server writes, functions fn0 and fn1),
# on the same fabric (LINK, default infiniband); then rdma-core's VFIO driver (fn2 of the
# same dump) against uhca's the same way.
#
# linuxuhca: the verbs objects rdma-core's libmlx5 asked of Linux's mlx5_ib on fn0 of the
# linuxuhca boot (ibv_rc_pingpong, ibv_ud_pingpong: the commands between each user
# context's ALLOC_TRANSPORT_DOMAIN and DEALLOC_TRANSPORT_DOMAIN, none of the kernel's own)
# against uhca's rc_pingpong and ud_pingpong on fn1 of the same run (the dump
# linux-uhca.sh's server writes): RC against RC, UD against UD, every transition.
#
# uhca-cmd-compare decodes each input with the uhca-fwif layouts, lines the commands up by
# kind and prints, per kind both sent, every field whose values differ and one PASS/FAIL
# line: FAIL for a difference that is not an object number, an address or a PSN and not
# listed, with its reason, in tests/vm/linux-vs-uhca.expected, rdma-core-vs-uhca.expected or
# libmlx5-vs-uhca.expected (mock/MODEL.md, "uhca's commands beside Linux's", says why each
# one is right or harmless). A missing dump is a FAIL, never a skip.
#
#   bash tests/vm/linux-vs-uhca.sh [linuxmlx5]  after tests/vm/vfio-user.sh and
#                                               tests/vm/linux-mlx5.sh (ci.sh runs it after both)
#   bash tests/vm/linux-vs-uhca.sh linuxuhca    after tests/vm/linux-uhca.sh (ci.sh runs it after it)
#                                               environment: RIG_DIR, LINK
set -uo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
LINK=${LINK:-infiniband}
MODE=${1:-linuxmlx5}
cd "$REPO"
cargo build --release -p uhca-vfio-user --bin uhca-cmd-compare || exit 1
dump_ok() {
  if [ -s "$1" ]; then
    echo "PASS linux-vs-uhca: dump $1 ($(wc -l < "$1") commands)"
  else
    echo "FAIL linux-vs-uhca: no command dump $1 (run $2 first)"
    return 1
  fi
}
if [ "$MODE" = linuxuhca ]; then
  dump=$RIG_DIR/logs/linux-uhca.cmds
  dump_ok "$dump" linux-uhca.sh || exit 1
  # fn0: Linux's mlx5_core + mlx5_ib, rdma-core's tools through ib_uverbs; fn1: uhca's
  # examples through vfio-pci. Only fn0's user contexts are the reference: the kernel's
  # own commands are compared in the linuxmlx5 mode.
  "$TARGET_DIR/release/uhca-cmd-compare" --reference libmlx5 "$dump@fn0.sock" \
    --reference-window ALLOC_TRANSPORT_DOMAIN..DEALLOC_TRANSPORT_DOMAIN \
    --uhca "$dump@fn1.sock" \
    --expected "$VM/libmlx5-vs-uhca.expected" \
    --require ALLOC_PD,DEALLOC_PD,ALLOC_UAR,CREATE_CQ,DESTROY_CQ,CREATE_MKEY/op_mod=0x0/access_mode=0x1,DESTROY_MKEY,CREATE_QP/op_mod=0x0/st=RC,RST2INIT_QP/op_mod=0x0/st=RC,INIT2RTR_QP/op_mod=0x0/st=RC,RTR2RTS_QP/op_mod=0x0/st=RC,DESTROY_QP/op_mod=0x0/st=RC,CREATE_QP/op_mod=0x0/st=UD,RST2INIT_QP/op_mod=0x0/st=UD,INIT2RTR_QP/op_mod=0x0/st=UD,RTR2RTS_QP/op_mod=0x0/st=UD,DESTROY_QP/op_mod=0x0/st=UD
  exit $?
fi
[ "$MODE" = linuxmlx5 ] || { echo "linux-vs-uhca: unknown mode '$MODE' (linuxmlx5 or linuxuhca)"; exit 2; }
linux=$RIG_DIR/logs/linux-mlx5-$LINK.cmds
uhca=$RIG_DIR/logs/vfio-user-$LINK.cmds
rc=0
dump_ok "$linux" linux-mlx5.sh || rc=1
dump_ok "$uhca" vfio-user.sh || rc=1
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
