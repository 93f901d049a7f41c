#!/bin/bash
# What `fmctl check` judges, gathered on one node: its GPUs (nvidia-smi), DCGM's level-2
# diagnostic, its EFA devices (fi_info). Usage: node-check.sh DIR POOL
# writes DIR/nodes/$(hostname -s)/{pool,nvidia-smi.csv,dcgmi-diag.json,fi_info.txt}.
#
# Run it only on idle nodes: the diagnostic loads every GPU for minutes. On Slurm, one task
# per node in an exclusive allocation, to a folder every node sees (FSx):
#   srun --partition=POOL --nodes=N --ntasks-per-node=1 --exclusive \
#     /opt/fmctl/slurm/lib/node-check.sh /fsx/fmctl-check POOL
# then, with slurm/jobs/nccl-tests.sbatch's log copied to /fsx/fmctl-check/nccl/POOL.txt:
#   fmctl check -f cluster.yaml --from /fsx/fmctl-check
set -uo pipefail

dir="${1:?usage: node-check.sh DIR POOL}"
pool="${2:?usage: node-check.sh DIR POOL}"
out="$dir/nodes/$(hostname -s)"
mkdir -p "$out"
printf '%s\n' "$pool" > "$out/pool"

# A failing tool is a finding, not a reason to stop: its error text is what fmctl reads.
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,ecc.errors.uncorrected.volatile.total \
  --format=csv,noheader,nounits > "$out/nvidia-smi.csv" 2>&1

fi_info=/opt/amazon/efa/bin/fi_info
[ -x "$fi_info" ] || fi_info=fi_info
"$fi_info" -p efa -t FI_EP_RDM > "$out/fi_info.txt" 2>&1

if command -v dcgmi > /dev/null 2>&1; then
  dcgmi diag -r 2 -j > "$out/dcgmi-diag.json" 2>&1
else
  echo "dcgmi not installed on $(hostname -s)" > "$out/dcgmi-diag.json"
fi
exit 0
