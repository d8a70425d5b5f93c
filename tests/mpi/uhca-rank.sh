#!/usr/bin/env bash
# Runs an MPI rank on its own uhca mock HCA: sets UHCA_DEVICES to one mock device, uhca0,
# on the loopback address UHCA_RANK_NET.(UHCA_RANK_BASE + rank) (default 127.0.0.140 +
# rank), and UCX_NET_DEVICES to its port, then runs the program. The rank is the launcher's:
# Open MPI's OMPI_COMM_WORLD_RANK, MPICH's (Hydra's) PMI_RANK, or Slurm's SLURM_PROCID.
#
#   mpirun -np 4 tests/mpi/uhca-rank.sh ./program ARGS...
set -euo pipefail
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-}}}
if [[ -z $rank ]]; then
  echo "$0: no rank from the launcher (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)" >&2
  exit 2
fi
net=${UHCA_RANK_NET:-127.0.0}
last=$((${UHCA_RANK_BASE:-140} + rank))
if ((last > 254)); then
  echo "$0: rank $rank: address $net.$last is out of range (UHCA_RANK_BASE)" >&2
  exit 2
fi
export UHCA_DEVICES="mock:uhca0=udp:$net.$last"
export UCX_NET_DEVICES=uhca0:1
exec "$@"
