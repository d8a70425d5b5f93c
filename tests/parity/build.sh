#!/usr/bin/env bash
# Builds the libmlx5 parity harnesses and prints the folder that holds them.
#
#   bash tests/parity/build.sh [SCRATCH]     (default: target/parity)
#
# 1. fetch-rdma-core.sh unpacks Debian trixie's rdma-core source into SCRATCH (checksum checked).
# 2. An include tree is laid out in SCRATCH/include the way rdma-core's CMake build lays out
#    build/include: the published headers (infiniband/, util/, rdma/, ccan/), the kernel-ABI
#    wrappers that rdma-core's own buildlib/make_abi_structs.py generates, the valgrind stub from
#    buildlib/fixup-include, and a minimal config.h of ours (the few macros qp.c, cq.c and the
#    headers they include test). No generated header differs from what CMake would produce:
#    the same script makes the kernel-ABI wrappers, the rest are the tree's own files.
# 3. libmlx5's providers/mlx5/qp.c, cq.c, srq.c and verbs.c are compiled UNMODIFIED with
#    rdma-core's release flags (-std=gnu11 -O2 -DNDEBUG; srq.c because mlx5_post_srq_recv
#    lives there and cq.c calls into it; verbs.c for mlx5_create_ah's address vector),
#    together with tests/parity/stubs.c (the symbols the harnesses need to behave, or that
#    are data) and generated aborting stand-ins for everything else the linker wants; each
#    tests/parity/harness_*.c is linked into SCRATCH/bin/harness_*.
#
# Needs gcc and python3 (both on Debian's build-essential images); nothing else.
# Nothing of rdma-core enters the repository: everything is built under SCRATCH.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=$PWD/tests/parity
SCRATCH=$(realpath -m "${1:-target/parity}")
RC=$(bash "$HERE/fetch-rdma-core.sh" "$SCRATCH")
INC="$SCRATCH/include"
OBJ="$SCRATCH/obj"
BIN="$SCRATCH/bin"
mkdir -p "$OBJ" "$BIN"

# --- the include tree (what rdma-core's publish_headers / publish_internal_headers produce) ---
rm -rf "$INC"
mkdir -p "$INC"/{infiniband,util,rdma/hfi,ccan,linux,kernel-abi,valgrind}
publish() { # publish DIR FILE...: symlink each FILE (relative to the rdma-core tree) into DIR
  local dir=$1; shift
  for f in "$@"; do ln -sf "$RC/$f" "$INC/$dir/"; done
}
publish infiniband libibverbs/{arch,opcode,sa-kern-abi,sa,verbs,verbs_api,tm_types}.h \
  libibverbs/{cmd_ioctl,cmd_write,driver,kern-abi,marshall}.h \
  kernel-headers/rdma/ib_user_ioctl_verbs.h \
  kernel-headers/rdma/mlx5_user_ioctl_verbs.h providers/mlx5/{mlx5_api,mlx5dv}.h
publish util util/{bitmap,cl_qmap,compiler,interval_set,node_name_map,rdma_nl,symver,util}.h \
  util/{mmio,s390_mmio_insn,udma_barrier}.h
publish ccan $(cd "$RC" && echo ccan/*.h)
publish rdma $(cd "$RC" && echo kernel-headers/rdma/*.h)
publish rdma/hfi $(cd "$RC" && echo kernel-headers/rdma/hfi/*.h)
publish linux kernel-headers/linux/{stddef,vfio}.h
ln -sf "$RC/buildlib/fixup-include/valgrind-memcheck.h" "$INC/valgrind/memcheck.h"
for h in ib_user_verbs mlx5-abi; do
  (cd "$RC/kernel-headers" && python3 "$RC/buildlib/make_abi_structs.py" \
    "rdma/$h.h" "$INC/kernel-abi/$h.h")
done
cat > "$INC/config.h" <<'CFG'
/* Minimal config.h for compiling libmlx5's qp.c and cq.c outside rdma-core's CMake build
 * (written for the uhca parity test; the macros are those of rdma-core's
 * buildlib/config.h.in that these files and their headers use, with the values a
 * gcc/glibc x86_64 build gets). */
#ifndef CONFIG_H_IN
#define CONFIG_H_IN
#define HAVE_STATEMENT_EXPR 1
#define HAVE_BUILTIN_TYPES_COMPATIBLE_P 1
#define HAVE_TYPEOF 1
#define HAVE_ISBLANK 1
#define HAVE_BUILTIN_CLZ 1
#define HAVE_BUILTIN_CLZL 1
#define PACKAGE_VERSION "parity"
#define STREAM_CLOEXEC "e"
#define RDMA_CDEV_DIR "/dev/infiniband"
#define IBV_CONFIG_DIR "/nonexistent"
#define VERBS_PROVIDER_DIR "/nonexistent"
#define VERBS_PROVIDER_SUFFIX "-rdmav34.so"
#define IBVERBS_PABI_VERSION 34
#define HAVE_FUNC_ATTRIBUTE_ALWAYS_INLINE 1
#define HAVE_FUNC_ATTRIBUTE_IFUNC 1
#define HAVE_FUNC_ATTRIBUTE_SYMVER 1
#define HAVE_WORKING_IF_H 1
#define HAVE_FULL_SYMBOL_VERSIONS 1
#define SIZEOF_LONG 8
#define VERBS_IOCTL_ONLY 0
#define VERBS_WRITE_ONLY 0
#endif
CFG

# --- compile ---
CFLAGS=(-std=gnu11 -O2 -DNDEBUG -g -fPIC -Wall -Wno-unused-function
  -I"$INC" -I"$RC/providers/mlx5")
PROVIDER=()
for src in qp cq srq verbs; do
  PROVIDER+=("$OBJ/$src.o")
  gcc "${CFLAGS[@]}" -c "$RC/providers/mlx5/$src.c" -o "$OBJ/$src.o"
done
gcc "${CFLAGS[@]}" -c "$HERE/stubs.c" -o "$OBJ/stubs.o"

# verbs.c (compiled for mlx5_create_ah, which builds a UD address vector) references about a
# hundred more symbols of libibverbs and of the provider's other files, on paths the
# harnesses never take. Rather than hand-write each, every symbol still undefined after the
# provider's objects, stubs.o and the C library is given a weak stand-in that names itself
# and aborts (generated here, in SCRATCH; a harness's own definition wins over it).
defined() { nm --defined-only "$@" | awk 'NF == 3 {print $3}'; }
nm -u "${PROVIDER[@]}" | awk 'NF == 2 {print $2}' | sort -u > "$OBJ/undefined.txt"
{ defined "${PROVIDER[@]}" "$OBJ/stubs.o"
  nm -D --defined-only "$(gcc -print-file-name=libc.so.6)" | awk '{sub(/@.*/, "", $3); print $3}'
} | sort -u > "$OBJ/resolved.txt"
{
  echo '/* Generated by tests/parity/build.sh: symbols libmlx5 references and the harnesses never'
  echo ' * reach. Each aborts, naming itself. */'
  echo '#include <stdio.h>'
  echo '#include <stdlib.h>'
  comm -23 "$OBJ/undefined.txt" "$OBJ/resolved.txt" | grep -v '^_' | while read -r sym; do
    printf '__attribute__((weak)) void %s(void) { fputs("parity: libmlx5 reached %s\\n", stderr); abort(); }\n' "$sym" "$sym"
  done
} > "$OBJ/unreached.c"
gcc -O2 -fPIC -w -c "$OBJ/unreached.c" -o "$OBJ/unreached.o"

for h in "$HERE"/harness_*.c; do
  [[ -e "$h" ]] || continue
  name=$(basename "$h" .c)
  gcc "${CFLAGS[@]}" -c "$h" -o "$OBJ/$name.o"
  gcc -o "$BIN/$name" "$OBJ/$name.o" "${PROVIDER[@]}" "$OBJ/stubs.o" "$OBJ/unreached.o" -lpthread
done
echo "$BIN"
