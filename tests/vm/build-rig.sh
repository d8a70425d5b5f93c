#!/usr/bin/env bash
# Builds the VM rig from Debian packages: a stock Debian kernel (never installed on the host,
# only unpacked) and an initramfs with busybox, the kernel modules, the host programs and
# the project's programs the guest tests need, plus guest/init and guest/tests/.
#
#   tests/vm/build-rig.sh [TESTS]      TESTS: comma-separated (default: every conf/*.conf)
#
# Runs as root when packages are missing (apt-get); otherwise any user will do.
# The project's programs (PROJECT_BINS of each test) must be built first; ci.sh does that.
#
# Output and cache, under RIG_DIR (default <repo>/target/vm):
#   debs/        the kernel package          kernel/<version>/  it, unpacked, with depmod
#   vmlinux-<version>  uncompressed kernel (boots ~4 s faster under TCG than the bzImage)
#   base-<key>.cpio    busybox + modules (cached by kernel version and module list)
#   initramfs.cpio     base + init, tests and programs (rebuilt every time, ~1 s)
#   kernel             the kernel to boot (a copy of vmlinux-<version>, or the bzImage)
# Environment: KPKG pins the kernel package (e.g. linux-image-6.1.0-57-amd64); SKIP_APT=1.
set -euo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR=$REPO/$TARGET_DIR ;; esac
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
mkdir -p "$RIG_DIR"
RIG_DIR=$(cd "$RIG_DIR" && pwd)

# The rig's own host packages. Each test adds its own in conf/<test>.conf (an rxe test:
# ibverbs-utils rdmacm-utils ibverbs-providers perftest iproute2).
RIG_PACKAGES="qemu-system-x86 busybox-static kmod cpio xz-utils libc-bin coreutils grep"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "build-rig: $*"; }
die() { echo "build-rig: error: $*" >&2; exit 1; }

# ---- which tests, and what they need ------------------------------------------------------
if [ $# -ge 1 ] && [ -n "$1" ]; then
  TESTS=$(echo "$1" | tr ',' ' ')
else
  TESTS=$(cd "$VM/conf" && ls ./*.conf | sed 's#^\./##; s#\.conf$##' | tr '\n' ' ')
fi
ALL_PACKAGES=$RIG_PACKAGES ALL_MODULES="" ALL_PROGRAMS="" ALL_BINS="" ALL_FILES="" ALL_C=""
ALL_PY="" ALL_PYTHON=""
for t in $TESTS; do
  [ -f "$VM/conf/$t.conf" ] || die "no test '$t' (no $VM/conf/$t.conf)"
  [ -f "$VM/guest/tests/$t.sh" ] || die "no guest script $VM/guest/tests/$t.sh"
  PACKAGES="" MODULES="" PROGRAMS="" PROJECT_BINS="" FILES="" C_PROGRAMS="" PYTHON_SCRIPTS="" PYTHON=""
  # shellcheck source=/dev/null
  . "$VM/conf/$t.conf"
  ALL_PACKAGES="$ALL_PACKAGES $PACKAGES" ALL_MODULES="$ALL_MODULES $MODULES"
  ALL_PROGRAMS="$ALL_PROGRAMS $PROGRAMS" ALL_BINS="$ALL_BINS $PROJECT_BINS"
  ALL_FILES="$ALL_FILES $FILES" ALL_C="$ALL_C $C_PROGRAMS" ALL_PY="$ALL_PY $PYTHON_SCRIPTS"
  if [ -n "$PYTHON" ]; then
    [ -z "$ALL_PYTHON" ] || [ "$ALL_PYTHON" = "$PYTHON" ] ||
      die "tests want two Python interpreters ($ALL_PYTHON, $PYTHON): boot them apart"
    ALL_PYTHON=$PYTHON
  fi
done
say "tests: $TESTS"

# ---- host packages (skipped when all are installed) --------------------------------------
t=$(now)
missing=""
for p in $ALL_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
if [ -n "$missing" ] && [ "${SKIP_APT:-0}" != 1 ]; then
  [ "$(id -u)" = 0 ] || die "packages missing ($missing): run as root"
  say "installing:$missing"
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
say "packages: $(since "$t") s"

# ---- the kernel: downloaded once, unpacked once -------------------------------------------
t=$(now)
if [ -z "${KPKG:-}" ]; then
  KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }') || true
  if [ -z "$KPKG" ]; then
    [ "$(id -u)" = 0 ] || die "apt has no package lists: run as root (apt-get update)"
    apt-get update -qq
    KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
  fi
fi
[ -n "$KPKG" ] || die "cannot find the kernel package behind linux-image-amd64"
mkdir -p "$RIG_DIR/debs"
deb=$(ls "$RIG_DIR/debs/${KPKG}"_*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
  say "downloading $KPKG"
  (cd "$RIG_DIR/debs" && { apt-get download -qq "$KPKG" 2>/dev/null ||
    { apt-get update -qq && apt-get download -qq "$KPKG"; }; })
  deb=$(ls "$RIG_DIR/debs/${KPKG}"_*.deb | head -1)
fi
KV=${KPKG#linux-image-}
KROOT=$RIG_DIR/kernel/$KV
if [ ! -e "$KROOT/.done" ]; then
  say "unpacking $(basename "$deb")"
  rm -rf "$KROOT"; mkdir -p "$KROOT"
  dpkg -x "$deb" "$KROOT"
  [ -d "$KROOT/lib/modules/$KV" ] || die "$deb holds no lib/modules/$KV"
  depmod -b "$KROOT" "$KV"
  touch "$KROOT/.done"
fi
# An uncompressed kernel: QEMU boots the ELF directly (PVH) and the guest skips
# decompressing it, which takes seconds under TCG.
VMLINUX=$RIG_DIR/vmlinux-$KV
if [ ! -e "$VMLINUX" ]; then
  vmlinuz=$KROOT/boot/vmlinuz-$KV
  for off in $(grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | cut -d: -f1); do
    tail -c +$((off + 1)) "$vmlinuz" | xz -dc --single-stream > "$VMLINUX.tmp" 2>/dev/null || true
    if [ "$(head -c 4 "$VMLINUX.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
      mv "$VMLINUX.tmp" "$VMLINUX"
      break
    fi
  done
  rm -f "$VMLINUX.tmp"
  [ -e "$VMLINUX" ] || say "no xz-compressed ELF in $vmlinuz: booting the bzImage (slower)"
fi
if [ -e "$VMLINUX" ]; then
  ln -f "$VMLINUX" "$RIG_DIR/kernel.img" 2>/dev/null || cp "$VMLINUX" "$RIG_DIR/kernel.img"
else
  cp "$KROOT/boot/vmlinuz-$KV" "$RIG_DIR/kernel.img"
fi
say "kernel $KV: $(since "$t") s"

# ---- initramfs, part 1 (cached): busybox and kernel modules ----------------------------
t=$(now)
MODS=$(echo "$ALL_MODULES" | tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')
key=$(printf '%s\n' "$KV" "$MODS" "$(dpkg-query -W -f='${Version}' busybox-static)" \
  "$(cat "$0" | md5sum)" | md5sum | cut -c1-12)
BASE=$RIG_DIR/base-$key.cpio
if [ ! -e "$BASE" ]; then
  say "building the base initramfs (modules: $MODS)"
  stage=$RIG_DIR/stage-base
  rm -rf "$stage"; mkdir -p "$stage"
  (
    cd "$stage"
    mkdir -p usr/bin usr/sbin usr/lib/x86_64-linux-gnu usr/lib64 etc proc sys dev tmp run root
    ln -s usr/bin bin; ln -s usr/sbin sbin; ln -s usr/lib lib; ln -s usr/lib64 lib64
    cp /bin/busybox usr/bin/busybox
    for a in $(/bin/busybox --list); do
      [ -e "usr/bin/$a" ] || ln -s busybox "usr/bin/$a"
    done
    mkdir -p "usr/lib/modules/$KV"
    for m in $MODS; do
      modprobe -d "$KROOT" -S "$KV" --show-depends "$m" ||
        die "no module $m in kernel $KV"
    done | awk '$1 == "insmod" { print $2 }' | sort -u | while read -r f; do
      rel=${f#"$KROOT"/}
      rel=usr/${rel#usr/}     # lib/modules/... -> usr/lib/modules/... (lib is a symlink)
      mkdir -p "$(dirname "$rel")"; cp "$f" "$rel"
    done
    for f in modules.order modules.builtin modules.builtin.modinfo; do
      cp "$KROOT/lib/modules/$KV/$f" "usr/lib/modules/$KV/"
    done
    depmod -b "$stage" "$KV"
    echo 'root:x:0:0:root:/root:/bin/sh' > etc/passwd
    echo 'root:x:0:' > etc/group
    find . | sort | cpio -o -H newc -R 0:0 --quiet > "$BASE.tmp"
  )
  mv "$BASE.tmp" "$BASE"
  rm -rf "$stage"
  find "$RIG_DIR" -maxdepth 1 -name 'base-*.cpio' ! -name "base-$key.cpio" -delete
fi

# ---- initramfs, part 2 (every time): init, tests, programs -----------------------------
stage=$RIG_DIR/stage-top
rm -rf "$stage"; mkdir -p "$stage/usr/bin" "$stage/tests"
# Copies a program and the shared libraries ldd finds for it (under usr/: /lib and /lib64
# are symlinks in the guest).
copy_with_libs() {
  local src=$1 dst=$2 lib
  mkdir -p "$stage/$(dirname "$dst")"
  cp -L "$src" "$stage/$dst"
  { ldd "$src" 2>/dev/null || true; } | awk '/=>/ { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
    [ -e "$lib" ] || continue
    local rel=${lib#/}
    rel=usr/${rel#usr/}
    [ -e "$stage/$rel" ] || { mkdir -p "$stage/$(dirname "$rel")"; cp -L "$lib" "$stage/$rel"; }
  done
}
for b in $ALL_BINS; do
  [ -x "$TARGET_DIR/$b" ] || die "$TARGET_DIR/$b is not built (ci.sh builds it: cargo build \$CARGO_BUILD of conf/<test>.conf)"
  copy_with_libs "$TARGET_DIR/$b" "usr/bin/$(basename "$b")"
done
for p in $ALL_PROGRAMS; do
  [ -x "$p" ] || die "host program $p is missing"
  rel=${p#/}; copy_with_libs "$p" "usr/${rel#usr/}"
done
# C programs of the rig (src/<name>.c, built here with gcc; C_PROGRAMS entries are
# <name> or <name>:<linker flags>).
mkdir -p "$RIG_DIR/bin"
for c in $ALL_C; do
  name=${c%%:*} libs=""
  [ "$name" = "$c" ] || libs=${c#*:}
  # shellcheck disable=SC2086
  gcc -O2 -Wall -Werror -o "$RIG_DIR/bin/$name" "$VM/src/$name.c" ${libs//,/ } ||
    die "cannot build src/$name.c"
  copy_with_libs "$RIG_DIR/bin/$name" "usr/bin/$name"
done
# Other host files (shared objects loaded with dlopen, configuration), at the same path,
# with the libraries of the ELF ones.
for f in $ALL_FILES; do
  [ -f "$f" ] || die "host file $f is missing"
  rel=${f#/}; rel=usr/${rel#usr/}
  case $rel in usr/etc/*) rel=${rel#usr/} ;; esac
  copy_with_libs "$f" "$rel"
done
# Python scripts (PYTHON_SCRIPTS, paths in the repository): the host's python3 and the
# files their imports load (py-closure.py), each at its own path so the interpreter finds
# its prefix and site-packages as on the host; each script's directory goes to
# /<directory name>/ and python3 to /usr/bin/python3. The interpreter is the first python3 on
# PATH, or PYTHON of a conf (e.g. /usr/bin/python3, for Debian's python3-* packages).
# Copies a file to the same path in the guest (under usr/ for /lib and /lib64, symlinks
# there) with its modification time (compiled bytecode is checked against it), and the
# shared libraries ldd finds for it.
guest_path() { local rel=${1#/}; case $rel in lib/* | lib64/*) rel=usr/$rel ;; esac; echo "$rel"; }
copy_same_path() {
  local f=$1 rel lib
  rel=$(guest_path "$f")
  [ -e "$stage/$rel" ] && return 0
  mkdir -p "$stage/$(dirname "$rel")"; cp -pL "$f" "$stage/$rel"
  case $f in *.so | *.so.* | */bin/*) ;; *) return 0 ;; esac
  # Without debugging symbols (pyenv's libpython carries 18 MB of them).
  strip --strip-unneeded "$stage/$rel" 2>/dev/null || true
  { ldd "$f" 2>/dev/null || true; } | awk '/=>/ { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
    [ -e "$lib" ] || continue
    rel=$(guest_path "$lib")
    [ -e "$stage/$rel" ] && continue
    mkdir -p "$stage/$(dirname "$rel")"; cp -pL "$lib" "$stage/$rel"
    strip --strip-unneeded "$stage/$rel" 2>/dev/null || true
  done
}
if [ -n "${ALL_PY// /}" ]; then
  PY=${ALL_PYTHON:-python3}
  command -v "$PY" >/dev/null || die "$PY is missing (PYTHON_SCRIPTS of a test need it)"
  scripts=""
  for s in $ALL_PY; do
    [ -f "$REPO/$s" ] || die "no script $s"
    scripts="$scripts $REPO/$s"
    d=$(dirname "$REPO/$s"); mkdir -p "$stage/$(basename "$d")"
    cp "$d"/*.py "$stage/$(basename "$d")/"
  done
  # shellcheck disable=SC2086
  pyfiles=$("$PY" "$VM/py-closure.py" $scripts) || die "py-closure.py failed for$scripts"
  for f in $pyfiles; do copy_same_path "$f"; done
  ln -sf "/$(guest_path "$(echo "$pyfiles" | head -1)")" "$stage/usr/bin/python3"
  say "python: $(echo "$pyfiles" | wc -l) files for$ALL_PY"
fi
cp "$VM/guest/init" "$stage/init"
cp "$VM"/guest/tests/* "$stage/tests/"
chmod 755 "$stage/init" "$stage"/tests/*.sh
(cd "$stage" && find . ! -name . | sort | cpio -o -H newc -R 0:0 --quiet > "$RIG_DIR/top.cpio")
# The kernel unpacks concatenated archives in order: the second adds to the first.
cat "$BASE" "$RIG_DIR/top.cpio" > "$RIG_DIR/initramfs.cpio"
rm -rf "$stage" "$RIG_DIR/top.cpio"
say "initramfs: $(since "$t") s, $(du -h "$RIG_DIR/initramfs.cpio" | cut -f1)"
