#!/bin/bash
# AWS PCS: a GPU node group's nodeReady lifecycle script (render/pcs.py, lifecycle_actions).
# PCS runs it after slurmd starts and the node registers with the controller, at every boot
# (botocore's PCS model, NodeLifecycleStages): the verify gate's last check, the 2-node NCCL
# pair (lib/verify-pair.sh), run as the unit on-node-configured.sh installs, which the
# health agent starts again for a node held after a slow pair. The pair returns the node or
# drains it; it runs only for a node the gate held (pcs-node-bootstrapped.sh).
# Exit status 1 only when the pair drained the node (below the floor with two peers: the
# node is the slow one), so that PCS terminates it (onError TERMINATE) and the group
# launches another, as clustermgtd replaces a drained node on ParallelCluster. A node held
# after a slow pair with the one idle peer is not judged yet: it stays, held (exit 0).
# Before the pair, the node's Slurm record: a new instance may take the Slurm node of one PCS
# terminated because fmctl condemned it (its agent's drain, "fmctl-health: ... -> replace",
# or a failed pair), and slurmctld keeps a drain across a node's restarts. What PCS does with
# that record is not documented, so this instance, which has just passed the gate, resumes
# a drain of fmctl's that says replace, or reboot (its agent's own reboot of this node,
# health.repair: reboot), and no other (a person's drain, a drain-only one, stay). One its
# own agent condemned already this boot is not resumed: the stage fails and PCS ends it.
set -uo pipefail

if [ -s /var/lib/fmctl/health/replace ]; then
  echo "fmctl: this node's health agent asked for a new instance ($(cat /var/lib/fmctl/health/replace)): PCS terminates it" >&2
  exit 1
fi
if [ -r /opt/fmctl/slurm/lib/slurm-prefix.sh ]; then
  # shellcheck source=../lib/slurm-prefix.sh
  . /opt/fmctl/slurm/lib/slurm-prefix.sh
  node="$(timeout 60 sinfo -h -N -o '%N %n' 2>/dev/null |
    awk -v h="$(hostname -s)" '$2 == h {print $1; exit}')"
  [ -n "$node" ] || node="$(hostname -s)"
  show="$(timeout 60 scontrol show node -o "$node" 2>/dev/null)"
  # Slurm shows the reason with who set it and when: "REASON [root@2026-12-04T13:35:27]".
  reason="$(printf '%s\n' "$show" | sed -n 's/.* Reason=\(.*\)/\1/p' | sed 's/ \[[^]]*\]$//')"
  state="$(printf '%s\n' "$show" | sed -n 's/.* State=\([^ ]*\).*/\1/p')"
  if [[ "$state" == *DRAIN* && "$reason" == fmctl-health:* ]]; then
    case "$reason" in
      *"-> replace") said="kept the drain of the instance it replaces" ;;
      *"-> reboot") said="passed the gate at this boot, after the reboot its health agent asked for" ;;
      *) said="" ;;
    esac
    if [ -n "$said" ] && timeout 60 scontrol update NodeName="$node" State=RESUME; then
      echo "fmctl: $node $said ($reason): resumed"
    fi
  fi
fi

if [ ! -f /etc/systemd/system/fmctl-verify-pair.service ]; then
  echo "fmctl: no verify pair here (fmctl-verify-pair.service): not one of fmctl's GPU nodes, or health is off"
  exit 0
fi
systemctl start fmctl-verify-pair.service || true  # the unit fails when the node did
drained=/var/lib/fmctl/health/pair-drained
if [ -e "$drained" ]; then
  echo "fmctl: this node failed its NCCL pair ($(cat "$drained")): PCS terminates it" >&2
  exit 1
fi
