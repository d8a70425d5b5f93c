# shellcheck shell=bash
# The uhca-vfio-user-server of the host scripts that boot QEMU 11.1 with vfio-user-pci
# devices (vfio-user.sh, linux-mlx5.sh, linux-uhca.sh), sourced by them. Needs TARGET_DIR
# (the cargo target directory holding release/uhca-vfio-user-server), VFIO_USER_DIR (the
# sockets' directory, removed at exit) and RIG_NAME (the script's name in messages). Sets
# `server` (the server's process id) and `server_log`.

# start_server LOG ARG...: starts uhca-vfio-user-server ARG... in the background with its
# output in LOG, after removing any old socket file of its --socket arguments, and sets an
# EXIT trap that stops it and removes VFIO_USER_DIR. Waits about 10 s (100 times 0.1 s) for
# the server to listen on every --socket; if one is missing then, prints
# "RIG_NAME: the server did not start" and LOG and returns 1 (the server is left to the trap).
start_server() {
  server_log=$1; shift
  local sockets=() prev="" arg
  for arg in "$@"; do
    [ "$prev" = --socket ] && sockets+=("$arg")
    prev=$arg
  done
  if [ ${#sockets[@]} -eq 0 ]; then
    echo "$RIG_NAME: start_server: no --socket argument"; return 1
  fi
  mkdir -p "$(dirname "$server_log")"
  rm -f "${sockets[@]}"
  "$TARGET_DIR/release/uhca-vfio-user-server" "$@" > "$server_log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null; rm -rf "$VFIO_USER_DIR"' EXIT
  local _
  for _ in $(seq 100); do
    server_listens "${sockets[@]}" && return 0
    sleep 0.1
  done
  server_listens "${sockets[@]}" && return 0
  echo "$RIG_NAME: the server did not start"; cat "$server_log"; return 1
}

# server_listens SOCKET...: whether every SOCKET is a socket file.
server_listens() {
  local s
  for s in "$@"; do [ -S "$s" ] || return 1; done
}

# stop_server PATTERN COUNT: waits about 5 s (50 times 0.1 s) for COUNT lines of the
# server's log to match PATTERN (a grep regular expression: what the server prints when
# QEMU, its client, has gone), then stops the server and waits for it to exit.
stop_server() {
  local _
  for _ in $(seq 50); do
    [ "$(grep -c -- "$1" "$server_log")" -ge "$2" ] && break
    sleep 0.1
  done
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
}

# boot_vfio_user TEST LOG APPEND: boots the rig with run-vm.sh TEST under QEMU 11.1 (from
# fetch-qemu11.sh, in RIG_DIR/qemu11) as the server's client: the IOMMU in caching mode
# (QEMU's vfio-user client needs it to see the guest's mappings) and the guest's RAM shared
# with the server. The console goes to LOG; APPEND goes on the kernel command line after
# no_timer_check (under TCG on a loaded machine the kernel's check of the timer interrupt
# through the remapped IO-APIC can time out and panic the boot), then the caller's
# EXTRA_APPEND. Returns run-vm.sh's status.
boot_vfio_user() {
  QEMU=$RIG_DIR/qemu11/qemu IOMMU_OPTS=intremap=on,caching-mode=on MEM_SHARED=1 \
    LOG=$2 EXTRA_APPEND="no_timer_check $3 ${EXTRA_APPEND:-}" \
    bash "$VM/run-vm.sh" "$1"
}
