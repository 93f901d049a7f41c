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
set -uo pipefail

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
