#!/bin/bash
# Slurm epilog drop-in: remove what a job left in shared memory and in enroot, so the next
# job on the node starts clean. Runs as root with SLURM_JOB_USER set.
set -uo pipefail

user="${SLURM_JOB_USER:-}"
[ -n "$user" ] || exit 0
uid=$(id -u "$user" 2> /dev/null) || exit 0
[ "$uid" -ge 1000 ] || exit 0  # never touch system accounts

# Files the job's user left in /dev/shm (NCCL and dataloader segments).
find /dev/shm -maxdepth 1 -user "$user" -mindepth 1 -exec rm -rf {} + 2> /dev/null

# Containers pyxis created for this job.
if command -v enroot > /dev/null && [ -n "${SLURM_JOB_ID:-}" ]; then
  runuser -u "$user" -- enroot list 2> /dev/null | grep -E "^pyxis_${SLURM_JOB_ID}[._]" |
    while read -r name; do
      runuser -u "$user" -- enroot remove -f "$name" > /dev/null 2>&1
    done
fi
exit 0
