#!/bin/bash
# ParallelCluster OnNodeStart on compute nodes: runs before Slurm starts on the node.
# Usage: on-node-start.sh EFA_ENABLED EXPECTED_GPUS EXPECTED_EFA_DEVICES [EFA_RDMA_READ [IMEX]]
# IMEX true on UltraServer nodes (p6e-gb200): the prolog forms each job's NVLink domain.
# Runs as root from cinc-client's environment (no login shell, no /opt/slurm/bin on PATH).
set -euo pipefail

efa_enabled="${1:?usage: on-node-start.sh EFA_ENABLED EXPECTED_GPUS EXPECTED_EFA_DEVICES}"
expected_gpus="${2:?expected GPU count}"
expected_efa="${3:?expected EFA device count}"
rdma_read="${4:-false}"
imex="${5:-false}"

case "$efa_enabled" in true | false) ;; *) echo "EFA_ENABLED must be true or false" >&2; exit 2 ;; esac
case "$rdma_read" in true | false) ;; *) echo "EFA_RDMA_READ must be true or false" >&2; exit 2 ;; esac
case "$imex" in true | false) ;; *) echo "IMEX must be true or false" >&2; exit 2 ;; esac
[[ "$expected_gpus" =~ ^[0-9]+$ && "$expected_efa" =~ ^[0-9]+$ ]] || {
  echo "counts must be whole numbers" >&2
  exit 2
}

install -d -m 0755 /etc/fmctl
# What the prolog checks before every job (from fmctl's catalog, not from the node itself).
cat > /etc/fmctl/node.env <<ENV
FMCTL_EFA_ENABLED=$efa_enabled
FMCTL_EXPECTED_GPUS=$expected_gpus
FMCTL_EXPECTED_EFA=$expected_efa
FMCTL_EFA_RDMA_READ=$rdma_read
FMCTL_IMEX=$imex
ENV
chmod 0644 /etc/fmctl/node.env

if [ "$efa_enabled" = true ]; then
  # Jobs get the NCCL/EFA environment in every login and batch shell.
  # (on-node-configured.sh brings lib/nccl-env.sh to the node moments later.)
  cat > /etc/profile.d/fmctl-nccl.sh <<'PROFILE'
# Written by fmctl's on-node-start.sh: the NCCL/EFA environment for every shell and job.
if [ -f /opt/fmctl/slurm/lib/nccl-env.sh ]; then
  . /opt/fmctl/slurm/lib/nccl-env.sh
fi
PROFILE
  chmod 0644 /etc/profile.d/fmctl-nccl.sh
fi
echo "fmctl on-node-start: efa=$efa_enabled gpus=$expected_gpus efa_devices=$expected_efa rdma_read=$rdma_read imex=$imex"
