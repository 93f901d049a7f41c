#!/bin/bash
# Slurm prolog drop-in (ParallelCluster runs /opt/slurm/etc/scripts/prolog.d/*, as root, from
# slurmd): before a job starts, the node must show every GPU and every EFA device fmctl's
# catalog says it has. On a shortfall it drains the node with the reason and exits non-zero:
# ParallelCluster's slurm.conf has SchedulerParameters=nohold_on_prolog_fail, so the job is
# requeued elsewhere instead of NCCL falling back to TCP or a rank dying on a missing GPU.
# Every tool gets a deadline: the whole prolog stays within seconds, far inside Slurm's
# prolog and batch-start timeouts (ParallelCluster: BatchStartTimeout=180).
set -uo pipefail

env_file=/etc/fmctl/node.env
[ -f "$env_file" ] || exit 0
# shellcheck source=/dev/null
. "$env_file"
lib=/opt/fmctl/slurm/lib
# $slurm: /opt/slurm on ParallelCluster, PCS's prefix on PCS (lib/slurm-prefix.sh).
slurm=/opt/slurm
if [ -r "$lib/slurm-prefix.sh" ]; then
  # shellcheck source=../lib/slurm-prefix.sh
  . "$lib/slurm-prefix.sh"
fi
deadline="${FMCTL_PROLOG_TOOL_TIMEOUT:-20}"
node="${SLURMD_NODENAME:-$(hostname -s)}"

fail() {
  local why="fmctl prolog: $*"
  echo "$why on $node" >&2
  logger -t fmctl-prolog -- "$why on $node (job ${SLURM_JOB_ID:-?})" 2>/dev/null || true
  # The reason on the node, for `sinfo -R` and `fmctl status` (slurmd's own is "Prolog error").
  timeout 10 "$slurm/bin/scontrol" update NodeName="$node" State=DRAIN Reason="$why" \
    >/dev/null 2>&1 || true
  exit 1
}

if [ "${FMCTL_EXPECTED_GPUS:-0}" -gt 0 ]; then
  out=$(timeout "$deadline" nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null)
  status=$?
  [ $status -ne 124 ] || fail "nvidia-smi did not answer within ${deadline}s (a GPU or the driver hangs)"
  gpus=$(printf '%s\n' "$out" | grep -c '^[[:space:]]*[0-9][0-9]*[[:space:]]*$')
  [ "$gpus" -eq "$FMCTL_EXPECTED_GPUS" ] ||
    fail "sees $gpus GPUs, expected $FMCTL_EXPECTED_GPUS"
fi

if [ "${FMCTL_EFA_ENABLED:-false}" = true ] && [ "${FMCTL_EXPECTED_EFA:-0}" -gt 0 ]; then
  # shellcheck source=../lib/efa-devices.sh
  . "$lib/efa-devices.sh" || fail "$lib/efa-devices.sh is missing"
  out=$(timeout "$deadline" "$(fmctl_fi_info_path)" -p efa -t FI_EP_RDM 2>/dev/null)
  [ $? -ne 124 ] || fail "fi_info did not answer within ${deadline}s"
  efa=$(printf '%s\n' "$out" | fmctl_efa_rdm_domains | wc -l)
  [ "$efa" -eq "$FMCTL_EXPECTED_EFA" ] ||
    fail "sees $efa EFA devices, expected $FMCTL_EXPECTED_EFA"
fi
exit 0
