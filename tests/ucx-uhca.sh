#!/usr/bin/env bash
# UCX (Debian bookworm's ucx-utils and libucx0, UCX 1.13) over uhca's libibverbs.so.1
# (issue 26): ucx_info -d lists uhca's mock devices with the rc_verbs and ud_verbs
# transports, and ucx_perftest runs between two processes, each with its own mock HCA on
# its own loopback address (127.0.0.131 and .132, the RoCEv2 port on UDP 4791): tag-matching
# latency and bandwidth, stream latency and bandwidth and ucp_put bandwidth, with
# UCX_TLS=rc_verbs (ud_verbs as UCP's auxiliary transport for the connection set-up: rc
# cannot set itself up) and then UCX_TLS=ud_verbs, on both ends. Each run must choose the
# transport asked for (UCX_LOG_LEVEL=info prints the lanes: "tag(rc_verbs/uhca0:1)"), both
# processes exit 0 and the client prints its "Final:" line. One PASS or FAIL line per check.
#
# UCX skips a verbs device unless /dev/infiniband/<dev_name> is a character device it may
# read and write: ibverbs/uhca-dev-nodes.sh makes uhca's (links to /dev/null; needs root).
#
#   bash tests/ucx-uhca.sh      environment: UHCA_REQUIRE_UCX=1 fails (instead of skipping)
#                               when UCX or cc is missing or the nodes cannot be made;
#                               UCX_RUN_TIMEOUT (60 s a process)
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
SERVER_IP=127.0.0.131
CLIENT_IP=127.0.0.132
PORT=13431 # ucx_perftest's own TCP connection (address exchange)
T=${UCX_RUN_TIMEOUT:-60}
cd "$REPO"

missing() {
  if [[ "${UHCA_REQUIRE_UCX:-}" == 1 ]]; then
    echo "FAIL: $1 (UHCA_REQUIRE_UCX=1)"
    exit 1
  fi
  echo "skip: $1 (apt-get install ucx-utils libucx0 gcc)"
  exit 0
}
command -v ucx_info >/dev/null && command -v ucx_perftest >/dev/null || missing "no ucx_info/ucx_perftest"
uct_ib=$(ls /usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0 2>/dev/null) || missing "no UCX verbs transports (libuct_ib)"
command -v cc >/dev/null || missing "no C compiler (cc) for the companion libraries"
if ! bash ibverbs/uhca-dev-nodes.sh 2 >/dev/null; then
  missing "cannot make /dev/infiniband/uhca_uverbs0,1 (ibverbs/uhca-dev-nodes.sh needs root)"
fi

cargo build -q -p uhca-ibverbs || exit 1
work=$(mktemp -d /tmp/uhca-ucx.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/lib"
ln -s "$TARGET_DIR/debug/libuhca_ibverbs.so" "$work/lib/libibverbs.so.1"
src=ibverbs/tests/c/companions
for n in mlx5 efa rdmacm; do
  cc -shared -fPIC -O2 -Wall -Werror -Wno-unused-parameter -Wl,-soname,lib$n.so.1 \
    -Wl,--version-script=$src/$n.map -o "$work/lib/lib$n.so.1" $src/$n.c || exit 1
done
export LD_LIBRARY_PATH=$work/lib

failed=0
pass() { echo "PASS $*"; }
fail() {
  echo "FAIL $*"
  failed=1
}

# Every symbol (and version) UCX's verbs and rdma_cm transports import resolves here.
undef=$(for f in "$uct_ib" /usr/lib/x86_64-linux-gnu/ucx/libuct_rdmacm.so.0; do
  [[ -e $f ]] && ldd -r "$f" 2>&1 | grep -E 'undefined symbol|not found'
done)
if [[ -z $undef ]]; then pass "ldd -r: UCX's libuct_ib and libuct_rdmacm resolve every symbol"; else
  fail "ldd -r: UCX imports what uhca's libraries lack:"
  echo "$undef"
fi

# ucx_info -d: a memory domain per device, each with rc_verbs and ud_verbs on port 1.
info=$(UHCA_DEVICES="mock:uhca0=udp:$SERVER_IP;mock:uhca1=udp:$CLIENT_IP" timeout -k 5 "$T" ucx_info -d 2>&1)
rc=$?
for d in uhca0 uhca1; do
  for tl in rc_verbs ud_verbs; do
    if [[ $rc == 0 ]] && awk -v d="$d" -v tl="$tl" '
      /# Memory domain:/ { md = $NF }
      /# *Transport:/ { t = $NF }
      /# *Device:/ && md == d && t == tl && $NF == d ":1" { found = 1 }
      END { exit !found }' <<<"$info"; then
      pass "ucx_info -d lists $tl on $d:1"
    else
      fail "ucx_info -d lists $tl on $d:1 (exit $rc)"
    fi
  done
done
if grep -q 'UCX  ERROR' <<<"$info"; then
  fail "ucx_info -d printed errors:"
  grep 'UCX  ERROR' <<<"$info"
else
  pass "ucx_info -d printed no error"
fi

# One ucx_perftest run: server on SERVER_IP, client on CLIENT_IP, both killed after T s.
perftest() {
  local tls=$1 want=$2 name=$3
  shift 3
  local s=$work/server.log c=$work/client.log
  UCX_TLS=$tls UCX_NET_DEVICES=uhca0:1 UCX_LOG_LEVEL=info UHCA_DEVICES="mock:uhca0=udp:$SERVER_IP" \
    timeout -k 5 "$T" ucx_perftest -p $PORT >"$s" 2>&1 &
  local sp=$!
  pids+=("$sp")
  local i
  for ((i = 0; i < 100; i++)); do
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q ":$(printf '%04X' $PORT) [0:]* 0A" && break
    sleep 0.1
  done
  UCX_TLS=$tls UCX_NET_DEVICES=uhca0:1 UCX_LOG_LEVEL=info UHCA_DEVICES="mock:uhca0=udp:$CLIENT_IP" \
    timeout -k 5 "$T" ucx_perftest -p $PORT 127.0.0.1 "$@" >"$c" 2>&1
  local crc=$?
  wait "$sp"
  local src=$?
  local final lane
  final=$(grep '^Final:' "$c" | tr -s ' ')
  lane=$(grep -o 'ep_cfg\[0\]: [a-z_]*([a-z_]*/uhca0:1)' "$c" | head -1)
  if [[ $crc == 0 && $src == 0 && -n $final && $lane == *"($want/uhca0:1)" ]]; then
    pass "ucx_perftest $name UCX_TLS=$tls (${lane#ep_cfg\[0\]: }): $final"
  else
    fail "ucx_perftest $name UCX_TLS=$tls: client exit $crc, server exit $src, lane '$lane'"
    grep -E 'UCX  (ERROR|WARN)|Fatal|Assertion' "$c" "$s" | head -20
  fi
}

for tls in rc_verbs,ud_verbs:aux ud_verbs; do
  want=${tls%%,*}
  perftest "$tls" "$want" "tag_lat 8 B" -t tag_lat -n 1000
  perftest "$tls" "$want" "tag_bw 64 KiB" -t tag_bw -s 65536 -n 200
  perftest "$tls" "$want" "stream_lat 8 B" -t stream_lat -n 1000
  perftest "$tls" "$want" "stream_bw 64 KiB" -t stream_bw -s 65536 -n 200
  perftest "$tls" "$want" "ucp_put_bw 64 KiB" -t ucp_put_bw -s 65536 -n 200
done
# (Final: iterations, latency 50th percentile, average and overall in us, bandwidth
# average and overall in MB/s, message rate average and overall.)
if [[ $failed == 0 ]]; then echo "UCX over uhca: all checks passed"; fi
exit $failed
