#!/usr/bin/env bash
# Runs an MPI rank on its own uhca HCA, named uhca0: sets UHCA_DEVICES and UCX_NET_DEVICES
# (uhca0:1), then runs the program. The rank is the launcher's: Open MPI's
# OMPI_COMM_WORLD_RANK, MPICH's (Hydra's) PMI_RANK, or Slurm's SLURM_PROCID.
#
# By default the device is a mock HCA on the loopback address
# UHCA_RANK_NET.(UHCA_RANK_BASE + rank) (127.0.0.140 + rank). With UHCA_RANK_DEVICES, a
# list of UHCA_DEVICES values separated by '|', rank r takes entry r (ranks on ConnectX
# functions bound to vfio-pci: "vfio:uhca0=0000:3b:00.0,ip=10.0.0.1|vfio:uhca0=...").
#
#   mpirun -np 4 tests/mpi/uhca-rank.sh ./program ARGS...
set -euo pipefail
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-}}}
if [[ -z $rank ]]; then
  echo "$0: no rank from the launcher (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)" >&2
  exit 2
fi
if [[ -n ${UHCA_RANK_DEVICES:-} ]]; then
  IFS='|' read -r -a entries <<<"$UHCA_RANK_DEVICES"
  if ((rank >= ${#entries[@]})); then
    echo "$0: rank $rank: UHCA_RANK_DEVICES has ${#entries[@]} entries" >&2
    exit 2
  fi
  export UHCA_DEVICES=${entries[$rank]}
  export UCX_NET_DEVICES=uhca0:1
  exec "$@"
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
