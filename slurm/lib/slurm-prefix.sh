#!/bin/bash
# Sourced: sets $slurm to where Slurm is installed on this node. ParallelCluster's cookbook
# installs it in /opt/slurm; AWS PCS's installer in /opt/aws/pcs/scheduler/slurm-VERSION,
# which pcs-node-bootstrap.sh records in /etc/fmctl/slurm.env (FMCTL_SLURM_PREFIX).
slurm=/opt/slurm
if [ -r /etc/fmctl/slurm.env ]; then
  # shellcheck source=/dev/null
  . /etc/fmctl/slurm.env
  slurm="${FMCTL_SLURM_PREFIX:-$slurm}"
fi
export PATH="$slurm/bin:$slurm/sbin:$PATH"
