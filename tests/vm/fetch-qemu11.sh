#!/usr/bin/env bash
# Fetches QEMU 11.1 (the first Debian QEMU with a vfio-user client, `-device vfio-user-pci`)
# from Debian trixie-backports and unpacks it with every library it needs into one root,
# without installing anything: the host's libc is older than this QEMU needs, so it runs
# through the root's own dynamic loader (see qemu11 in vfio-user.sh).
#
#   tests/vm/fetch-qemu11.sh            ROOT: $RIG_DIR/qemu11/root (default target/vm/...)
#
# apt runs on a private configuration (its own sources, lists, cache and an empty dpkg
# status, so it resolves the whole dependency closure); the host's apt state is untouched.
# Cached: a root that already has the binary is kept. Writes $RIG_DIR/qemu11/qemu, a wrapper
# that starts this QEMU through the root's loader; where the host has its own QEMU (7.2), whose
# modules this one would load from the built-in module path and abort on, the wrapper runs
# it in a private mount namespace with the root's module directory mounted over that path.
set -euo pipefail
VM=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$VM/../.." && pwd)
RIG_DIR=${RIG_DIR:-$REPO/target/vm}
Q=$RIG_DIR/qemu11
ROOT=$Q/root
write_wrapper() {
  cat > "$Q/qemu" <<WRAP
#!/bin/sh
# QEMU 11.1 from $ROOT, through its own loader (written by tests/vm/fetch-qemu11.sh).
R='$ROOT'
M=/usr/lib/x86_64-linux-gnu/qemu
run() {
  exec "\$R/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \\
    --library-path "\$R/usr/lib/x86_64-linux-gnu:\$R/lib/x86_64-linux-gnu" \\
    "\$R/usr/bin/qemu-system-x86_64" -L "\$R/usr/share/qemu" -L "\$R/usr/share/seabios" "\$@"
}
if [ -d "\$M" ] && [ "\${RIG_QEMU11_NS:-}" != 1 ]; then
  exec unshare -m env RIG_QEMU11_NS=1 sh -c 'mount --bind "\$0/usr/lib/x86_64-linux-gnu/qemu" /usr/lib/x86_64-linux-gnu/qemu && exec "\$@"' "\$R" "\$0" "\$@"
fi
run "\$@"
WRAP
  chmod +x "$Q/qemu"
}
if [ -x "$ROOT/usr/bin/qemu-system-x86_64" ]; then
  write_wrapper
  echo "fetch-qemu11: cached in $ROOT"
  exit 0
fi
mkdir -p "$Q/etc/apt/preferences.d" "$Q/lists/partial" "$Q/cache/archives/partial" "$Q/state" "$Q/debs"
: > "$Q/state/status"
cat > "$Q/etc/apt/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie-backports main
SRC
cat > "$Q/etc/apt/preferences.d/backports" <<PREF
Package: *
Pin: release n=trixie-backports
Pin-Priority: 500
PREF
APT=(-o Dir::Etc::sourcelist="$Q/etc/apt/sources.list" -o Dir::Etc::sourceparts=/nonexistent
  -o Dir::Etc::preferencesparts="$Q/etc/apt/preferences.d" -o Dir::State::Lists="$Q/lists"
  -o Dir::State::status="$Q/state/status" -o Dir::Cache="$Q/cache"
  -o Dir::Cache::archives="$Q/cache/archives" -o APT::Install-Recommends=false
  -o Debug::NoLocking=true -o APT::Architecture=amd64)
apt-get "${APT[@]}" -q update
apt-get "${APT[@]}" -q -y -d install qemu-system-x86 qemu-system-modules-spice- 2>&1 | tail -3 || \
  apt-get "${APT[@]}" -q -y -d install qemu-system-x86
mkdir -p "$ROOT"
n=0
for d in "$Q"/cache/archives/*.deb; do
  dpkg -x "$d" "$ROOT"
  n=$((n + 1))
done
[ -x "$ROOT/usr/bin/qemu-system-x86_64" ] || { echo "fetch-qemu11: no qemu-system-x86_64 after unpacking $n packages" >&2; exit 1; }
write_wrapper
echo "fetch-qemu11: $n packages unpacked into $ROOT"
