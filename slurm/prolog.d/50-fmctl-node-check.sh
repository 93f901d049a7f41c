#!/bin/bash
# Slurm prolog drop-in (ParallelCluster runs /opt/slurm/etc/scripts/prolog.d/*): before a job
# starts, the node must show every GPU and every EFA device fmctl's catalog says it has. A
# non-zero exit makes Slurm drain the node and requeue the job elsewhere, instead of letting
# NCCL fall back to TCP or a rank die on a missing GPU.
set -uo pipefail

env_file=/etc/fmctl/node.env
[ -f "$env_file" ] || exit 0
# shellcheck source=/dev/null
. "$env_file"

fail() {
  echo "fmctl prolog on $(hostname): $*" >&2
  exit 1
}

if [ "${FMCTL_EXPECTED_GPUS:-0}" -gt 0 ]; then
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2> /dev/null | wc -l)
  [ "$gpus" -eq "$FMCTL_EXPECTED_GPUS" ] ||
    fail "sees $gpus GPUs, expected $FMCTL_EXPECTED_GPUS (drain and replace the node)"
fi

if [ "${FMCTL_EFA_ENABLED:-false}" = true ] && [ "${FMCTL_EXPECTED_EFA:-0}" -gt 0 ]; then
  fi_info=/opt/amazon/efa/bin/fi_info
  [ -x "$fi_info" ] || fi_info=fi_info
  efa=$("$fi_info" -p efa -t FI_EP_RDM 2> /dev/null | grep -c '^provider: efa')
  [ "$efa" -eq "$FMCTL_EXPECTED_EFA" ] ||
    fail "sees $efa EFA devices, expected $FMCTL_EXPECTED_EFA (drain and replace the node)"
fi
exit 0
