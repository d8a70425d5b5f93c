#!/usr/bin/env bash
# Makes the device nodes UCX looks for before it uses a verbs device, for uhca's devices.
#
# UCX (1.13) offers an InfiniBand device only if /dev/infiniband/<dev_name> is a character
# device the process may read and write (`struct ibv_device`'s dev_name; UCX never opens
# it). uhca's devices have no kernel device behind them: their dev_name is uhca_uverbsN (N
# the device's place in UHCA_DEVICES, from 0), which no kernel node is called. This script
# makes /dev/infiniband/uhca_uverbs0 ... uhca_uverbs<COUNT-1> symbolic links to /dev/null
# (a character device everyone may read and write), leaving every other node alone.
#
#   sudo ibverbs/uhca-dev-nodes.sh [COUNT]   COUNT: how many (default 8)
#   sudo ibverbs/uhca-dev-nodes.sh --remove  removes the links it made
set -euo pipefail
dir=/dev/infiniband
if [[ ${1:-} == --remove ]]; then
  for f in "$dir"/uhca_uverbs*; do
    [[ -L $f && $(readlink "$f") == /dev/null ]] && rm -f "$f"
  done
  rmdir "$dir" 2>/dev/null || true
  exit 0
fi
count=${1:-8}
[[ $count =~ ^[0-9]+$ && $count -ge 1 && $count -le 256 ]] || {
  echo "usage: $0 [COUNT (1-256)] | --remove" >&2
  exit 2
}
if [[ ! -w /dev ]]; then
  echo "$0: /dev is not writable: run it as root (sudo $0 $count)" >&2
  exit 1
fi
mkdir -p "$dir"
for ((i = 0; i < count; i++)); do
  f=$dir/uhca_uverbs$i
  if [[ -e $f && ! -L $f ]]; then
    echo "$0: $f exists and is not a link: left alone" >&2
    continue
  fi
  ln -sfn /dev/null "$f"
done
echo "made $dir/uhca_uverbs0..$((count - 1)) (links to /dev/null)"
