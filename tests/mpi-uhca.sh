#!/usr/bin/env bash
# MPI over UCX over uhca's libibverbs.so.1 (issue 26): Debian bookworm's Open MPI 4.1
# (`--mca pml ucx`) and MPICH 4.0 (ch4:ucx) run tests/mpi/collectives.c (MPI_Allreduce,
# MPI_Allgather, MPI_Bcast, MPI_Alltoall on int and float, 8 B to 8 MiB, every result
# checked against a reference each rank computes) at 2 and 4 ranks, each rank a process with
# its own mock HCA on its own loopback address (tests/mpi/uhca-rank.sh: 127.0.0.140 + rank),
# UCX_TLS=rc_verbs (ud_verbs as UCP's auxiliary transport for the connection set-up), and at
# 4 ranks UCX_TLS=ud_verbs; then a rank killed (SIGKILL) mid-run must make the job end with
# an error, not hang. One PASS or FAIL line per check.
#
#   bash tests/mpi-uhca.sh     environment: UHCA_REQUIRE_MPI=1 fails (instead of skipping)
#                              when UCX, Open MPI or MPICH (their mpicc) is missing;
#                              UHCA_MPI_MAX (largest message, default 8 MiB);
#                              UHCA_MPI_PROFILE (debug or release build of the library,
#                              default release: the model's datapath is 10 times faster);
#                              UHCA_MPI_TIMEOUT (a job's limit, 300 s);
#                              UHCA_MPI_RANKS (the job sizes, default "2 4"; "2 4 8"
#                              adds 8 ranks: 40 s with Open MPI, 130 s with MPICH)
#                              UHCA_MPI_ONLY (openmpi or mpich: that one only)
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
PROFILE=${UHCA_MPI_PROFILE:-release}
MAX=${UHCA_MPI_MAX:-8388608}
T=${UHCA_MPI_TIMEOUT:-300}
RANKS=${UHCA_MPI_RANKS:-2 4}
export UHCA_RANK_BASE=140 # rank r on 127.0.0.(140 + r)
cd "$REPO"

missing() {
  if [[ "${UHCA_REQUIRE_MPI:-}" == 1 ]]; then
    echo "FAIL: $1 (UHCA_REQUIRE_MPI=1)"
    exit 1
  fi
  echo "skip: $1 (apt-get install ucx-utils openmpi-bin libopenmpi-dev mpich libmpich-dev)"
  exit 0
}
have_ompi=0 have_mpich=0
command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null && have_ompi=1
command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null && have_mpich=1
[[ -e /usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0 ]] || missing "no UCX verbs transports (libuct_ib)"
if [[ "${UHCA_REQUIRE_MPI:-}" == 1 ]]; then
  [[ $have_ompi == 1 ]] || missing "no Open MPI (mpicc.openmpi, mpirun.openmpi)"
  [[ $have_mpich == 1 ]] || missing "no MPICH (mpicc.mpich, mpiexec.mpich)"
fi
[[ $have_ompi == 1 || $have_mpich == 1 ]] || missing "no Open MPI and no MPICH"
bash ibverbs/uhca-dev-nodes.sh 2 >/dev/null ||
  missing "cannot make /dev/infiniband/uhca_uverbs* (ibverbs/uhca-dev-nodes.sh needs root)"

if [[ $PROFILE == release ]]; then
  cargo build -q --release -p uhca-ibverbs || exit 1
else
  cargo build -q -p uhca-ibverbs || exit 1
fi
work=$(mktemp -d /tmp/uhca-mpi.XXXXXX)
job=
cleanup() {
  [[ -n $job ]] && kill -9 "$job" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/lib" "$work/pids"
ln -s "$TARGET_DIR/$PROFILE/libuhca_ibverbs.so" "$work/lib/libibverbs.so.1"
src=ibverbs/tests/c/companions
for n in mlx5 efa rdmacm; do
  cc -shared -fPIC -O2 -Wall -Werror -Wno-unused-parameter -Wl,-soname,lib$n.so.1 \
    -Wl,--version-script=$src/$n.map -o "$work/lib/lib$n.so.1" $src/$n.c || exit 1
done
export LD_LIBRARY_PATH=$work/lib
export UCX_TLS=rc_verbs,ud_verbs:aux UCX_LOG_LEVEL=info
rank_sh=$REPO/tests/mpi/uhca-rank.sh

failed=0
pass() { echo "PASS $*"; }
fail() {
  echo "FAIL $*"
  failed=1
}

# The launch command of MPI $1 with $2 ranks (the program and its arguments follow).
launch() {
  local mpi=$1 n=$2
  if [[ $mpi == openmpi ]]; then
    # pml ucx for every message; no other transport to fall back on (no shared memory,
    # TCP or the verbs BTL), the one-sided component off (the test is two-sided).
    echo mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" --mca pml ucx \
      --mca btl self --mca osc ^ucx -x LD_LIBRARY_PATH -x UCX_TLS -x UCX_LOG_LEVEL \
      -x UHCA_RANK_BASE -x UHCA_MPI_PIDDIR "$rank_sh"
  else
    # MPIR_CVAR_NOLOCAL: ranks on one host talk through the network module (UCX) too.
    echo mpiexec.mpich -n "$n" -genv MPIR_CVAR_NOLOCAL 1 "$rank_sh"
  fi
}

# A whole run over transport $3 (rc_verbs, or ud_verbs): every case PASS, the summary
# line, exit 0, and UCX's lanes on that transport of uhca's device.
run_job() {
  local mpi=$1 n=$2 tl=${3:-rc_verbs} exe=$work/coll-$1 log=$work/$1-$2-${3:-rc_verbs}.log
  local start=$SECONDS tls=$UCX_TLS
  [[ $tl == ud_verbs ]] && tls=ud_verbs
  # shellcheck disable=SC2046
  UCX_TLS=$tls timeout -k 5 "$T" $(launch "$mpi" "$n") "$exe" "$MAX" >"$log" 2>&1
  local rc=$? secs=$((SECONDS - start))
  local cases bad lanes
  cases=$(grep -c '^PASS ' "$log")
  bad=$(grep -c '^FAIL ' "$log")
  lanes=$(grep -o 'ep_cfg\[[0-9]*\]: tag([a-z_]*/[a-z0-9_]*:1)' "$log" | sed 's/.*: //' | sort -u | tr '\n' ' ')
  if [[ $rc == 0 && $bad == 0 && $cases -gt 0 ]] && grep -q "^all collectives correct: $n ranks" "$log" &&
    [[ $lanes == "tag($tl/uhca0:1) " ]]; then
    pass "$mpi $n ranks, UCX_TLS=$tls: $cases cases correct, 8 B to $MAX B, in ${secs} s (UCX lanes: $lanes)"
    grep -E '^PASS (Allreduce|Allgather|Bcast|Alltoall) +(int|float) +'"$MAX"' B' "$log" | sed 's/^/    /'
  else
    fail "$mpi $n ranks, UCX_TLS=$tls: exit $rc after ${secs} s, $cases cases passed, $bad failed, UCX lanes '$lanes'"
    grep -E '^FAIL|UCX  ERROR|Fatal|Assertion|rror' "$log" | head -20
  fi
}

# A job of 4 ranks looping on the collectives; rank 2 is killed (SIGKILL) once all ranks
# are past their first round: the launcher must end the job with an error within 60 s.
kill_job() {
  local mpi=$1 exe=$work/coll-$1 log=$work/$1-kill.log
  rm -f "$work"/pids/*
  local start=$SECONDS
  # shellcheck disable=SC2046
  UHCA_MPI_PIDDIR=$work/pids timeout -k 5 "$T" $(launch "$mpi" 4) "$exe" 262144 100000 >"$log" 2>&1 &
  job=$!
  local i
  for ((i = 0; i < 600; i++)); do
    # One round done: 6 sizes (8 B to 256 KiB) of 8 cases.
    [[ $(grep -sc '^PASS ' "$log") -ge 48 ]] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  local victim ran=$((SECONDS - start))
  victim=$(cat "$work/pids/rank2.pid" 2>/dev/null)
  if [[ -z $victim ]] || ! kill -0 "$job" 2>/dev/null; then
    fail "$mpi kill: the job did not get going (rank 2's pid '$victim')"
    tail -5 "$log"
    wait "$job"
    job=
    return
  fi
  kill -9 "$victim"
  local killed=$SECONDS rc=
  for ((i = 0; i < 600; i++)); do
    if ! kill -0 "$job" 2>/dev/null; then
      wait "$job"
      rc=$?
      break
    fi
    sleep 0.1
  done
  local secs=$((SECONDS - killed))
  if [[ -z $rc ]]; then
    fail "$mpi kill: the job still runs 60 s after rank 2 was killed (a hang)"
    kill -9 "$job" 2>/dev/null
    wait "$job"
  elif [[ $rc != 0 ]]; then
    pass "$mpi kill: rank 2 killed after ${ran} s of running, the job ended ${secs} s later with exit $rc: $(grep -m1 -E 'exited on signal|KILLED BY SIGNAL|BAD TERMINATION|MPI_ABORT|UCX  ERROR' "$log" | tr -s ' ' | cut -c1-150)"
  else
    fail "$mpi kill: rank 2 killed, the job ended with exit $rc after ${secs} s"
    tail -5 "$log"
  fi
  job=
}

for mpi in ${UHCA_MPI_ONLY:-openmpi mpich}; do
  [[ $mpi == openmpi && $have_ompi == 0 ]] && continue
  [[ $mpi == mpich && $have_mpich == 0 ]] && continue
  mpicc.$mpi -O2 -Wall -Werror -o "$work/coll-$mpi" tests/mpi/collectives.c || exit 1
  for n in $RANKS; do
    run_job "$mpi" "$n"
  done
  run_job "$mpi" 4 ud_verbs
  kill_job "$mpi"
done
# (Each case line: collective, type, a rank's message size, wrong elements over all
# ranks, the slowest rank's time.)
if [[ $failed == 0 ]]; then echo "MPI over UCX over uhca: all checks passed"; fi
exit $failed
