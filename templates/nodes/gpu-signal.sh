#!/bin/bash
# Ask every process on this node's GPUs to checkpoint: run as root on an EKS node of a pool
# on a Capacity Block, through SSM Run Command, by fmctl's schedule an hour before the block
# ends (EKS drains the node group at T-40 and EC2 ends the instances at the block's end).
#   gpu-signal.sh SIGNAL
# The processes are those the NVIDIA driver lists as compute applications
# (`nvidia-smi --query-compute-apps=pid --format=csv,noheader`: one pid a line, nothing when
# none runs; nvidia-smi(1)). On the host they are the host's pids of the pods' ranks, every
# rank, as Slurm's `scancel --signal` reaches every task of a job. A process that does not
# handle the signal ends on it (USR1's default action), as it would on Slurm.
# The EKS-optimized AL2023 NVIDIA AMI has nvidia-smi in /usr/bin (amazon-eks-ami,
# templates/al2023/runtime/gpu/set-nvidia-clocks.service) and the SSM agent
# (templates/al2023/provisioners/install-worker.sh).
# What it prints is what fmctl and its tests read:
#   signalled PID SIGNAL    one a line
#   gone PID                it ended between the listing and the signal
#   done COUNT              how many were signalled
set -uo pipefail
signal="${1:?usage: gpu-signal.sh SIGNAL}"
case "$signal" in
  USR1 | USR2 | TERM | INT | HUP) ;;
  *) echo "gpu-signal.sh: $signal is not a checkpoint signal" >&2; exit 2 ;;
esac
if ! listed="$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>&1)"; then
  echo "gpu-signal.sh: nvidia-smi failed: $listed" >&2
  exit 1
fi
count=0
# A process on several GPUs is listed once for each: signal it once.
for pid in $(printf '%s\n' "$listed" | tr -d ' ' | grep -E '^[0-9]+$' | sort -un); do
  if kill -s "$signal" "$pid" 2>/dev/null; then
    echo "signalled $pid $signal"
    count=$((count + 1))
  else
    echo "gone $pid"
  fi
done
echo "done $count"
