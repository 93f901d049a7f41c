#!/bin/bash
# What `fmctl check` judges, gathered on one node: its GPUs (nvidia-smi), DCGM's level-2
# diagnostic, its EFA devices (fi_info, counted by efa-devices.sh: the prolog's rule) and
# which optional exporters the bootstrap could not install, and what the health agent last
# recorded. Usage: node-check.sh DIR POOL
# writes DIR/nodes/NODE/{pool,nvidia-smi.csv,dcgmi-diag.json,fi_info.txt,efa-devices.txt,
# exporters.txt,imex.txt,health.txt} (those of FMCTL_CHECK_PARTS: gpu, efa; both unless told), NODE being
# $NODE_NAME when set (a Kubernetes pod's hostname is the pod's, not the node's), else
# Slurm's $SLURMD_NODENAME, else `hostname -s`. With DIR "-", the files go to stdout instead, each after a line
# "==> fmctl-check NODE FILE <==" (what `fmctl check NAME` reads from a pod's log).
#
# Run it only on idle nodes: the diagnostic loads every GPU for minutes. On Slurm, one task
# per node in an exclusive allocation, to a folder every node sees (FSx):
#   srun --partition=POOL --nodes=N --ntasks-per-node=1 --exclusive \
#     /opt/fmctl/slurm/lib/node-check.sh /fsx/fmctl-check POOL
# then, with slurm/jobs/nccl-tests.sbatch's log copied to /fsx/fmctl-check/nccl/POOL.txt:
#   fmctl check -f cluster.yaml --from /fsx/fmctl-check
set -uo pipefail
# efa-devices.sh comes before this script on srun's stdin (cluster-check.sh) or beside it.
if ! declare -F fmctl_efa_rdm_domains >/dev/null; then
  # shellcheck source=efa-devices.sh
  . "$(dirname "${BASH_SOURCE[0]:-$0}")/efa-devices.sh" || {
    echo "node-check.sh: efa-devices.sh is missing beside it" >&2
    exit 2
  }
fi

dir="${1:?usage: node-check.sh DIR POOL}"
pool="${2:?usage: node-check.sh DIR POOL}"
node="${NODE_NAME:-${SLURMD_NODENAME:-$(hostname -s)}}"
if [ "$dir" = - ]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  out="$scratch"
else
  out="$dir/nodes/$node"
fi
mkdir -p "$out"
printf '%s\n' "$pool" > "$out/pool"

# What to look at: FMCTL_CHECK_PARTS, "gpu efa" unless told. On Kubernetes each part runs in
# the container whose image has its tools (DCGM's for GPUs; the EFA user space for fi_info).
parts=" ${FMCTL_CHECK_PARTS:-gpu efa} "
files=(pool)

# A failing tool is a finding, not a reason to stop: its error text is what fmctl reads.
if [[ "$parts" == *" gpu "* ]]; then
  nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,ecc.errors.uncorrected.volatile.total \
    --format=csv,noheader,nounits > "$out/nvidia-smi.csv" 2>&1
  if command -v dcgmi > /dev/null 2>&1; then
    # The node's one host engine: on a Slurm node the nvidia-dcgm service; on Kubernetes
    # fmctl's DaemonSet's, named (FMCTL_DCGM_HOST), so that dcgmi never starts one of its own
    # beside it (NVIDIA supports one engine a node: NVIDIA/DCGM#108).
    engine=()
    [ -z "${FMCTL_DCGM_HOST:-}" ] || engine=(--host "$FMCTL_DCGM_HOST")
    dcgmi diag -r 2 -j "${engine[@]}" > "$out/dcgmi-diag.json" 2>&1
  else
    echo "dcgmi not installed on $node" > "$out/dcgmi-diag.json"
  fi
  # What on-node-configured.sh recorded: NAME ok|missing: why (none on Kubernetes).
  : > "$out/exporters.txt"
  for record in /var/lib/fmctl/exporters/*; do
    [ -f "$record" ] && printf '%s %s\n' "$(basename "$record")" "$(head -n 1 "$record")" >> "$out/exporters.txt"
  done
  # On an UltraServer node, whether this allocation's multi-node NVLink domain formed: the
  # local daemon's word (`-q`: READY, this node only), then the domain's (`-N -j`: its
  # status and every peer's; the IMEX prolog waits for the same).
  if command -v nvidia-imex-ctl > /dev/null 2>&1; then
    { timeout 10 nvidia-imex-ctl -q 2>&1 || true
      echo "-- nvidia-imex-ctl -N -j"
      timeout 10 nvidia-imex-ctl -N -j 2>&1 || true
    } > "$out/imex.txt"
  else
    echo "nvidia-imex-ctl not installed on $node" > "$out/imex.txt"
  fi
  # The health agent's state (lib/health-agent.sh): healthy, draining or held, and why.
  health_state="${FMCTL_HEALTH_STATE:-/var/lib/fmctl/health/state}"
  if [ -s "$health_state" ]; then
    head -n 1 "$health_state" > "$out/health.txt"
  else
    echo "no health agent record on $node" > "$out/health.txt"
  fi
  files+=(nvidia-smi.csv dcgmi-diag.json exporters.txt imex.txt health.txt)
fi

if [[ "$parts" == *" efa "* ]]; then
  "$(fmctl_fi_info_path)" -p efa -t FI_EP_RDM > "$out/fi_info.txt" 2>&1
  fmctl_efa_rdm_domains < "$out/fi_info.txt" > "$out/efa-devices.txt"
  files+=(fi_info.txt efa-devices.txt)
fi

if [ "$dir" = - ]; then
  for file in "${files[@]}"; do
    printf '==> fmctl-check %s %s <==\n' "$node" "$file"
    cat "$out/$file"
  done
fi
exit 0
