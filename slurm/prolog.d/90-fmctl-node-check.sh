#!/bin/bash
# Slurm prolog drop-in (ParallelCluster runs /opt/slurm/etc/scripts/prolog.d/*, as root, from
# slurmd): before a job starts, the node must show every GPU and every EFA device fmctl's
# catalog says it has. On a shortfall it drains the node with the reason and exits non-zero:
# ParallelCluster's slurm.conf has SchedulerParameters=nohold_on_prolog_fail, so the job is
# requeued elsewhere instead of NCCL falling back to TCP or a rank dying on a missing GPU.
# Every tool gets a deadline: the whole prolog stays within seconds, far inside Slurm's
# prolog and batch-start timeouts (ParallelCluster: BatchStartTimeout=180).
set -uo pipefail

# node.env, $slurm, $node and fmctl_fail (a node without node.env exits 0 here).
# shellcheck source=../lib/prolog-common.sh
. /opt/fmctl/slurm/lib/prolog-common.sh || exit 0
deadline="${FMCTL_PROLOG_TOOL_TIMEOUT:-20}"
fail() { fmctl_fail "$@"; }

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
