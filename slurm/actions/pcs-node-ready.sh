#!/bin/bash
# AWS PCS: a GPU node group's nodeReady lifecycle script (render/pcs.py, lifecycle_actions).
# PCS runs it after slurmd starts and the node registers with the controller, at every boot
# (botocore's PCS model, NodeLifecycleStages): the verify gate's last check, the 2-node NCCL
# pair (lib/verify-pair.sh), run as the unit on-node-configured.sh installs, which the
# health agent starts again for a node held after a slow pair. The pair returns the node or
# drains it; it runs only for a node the gate held (pcs-node-bootstrapped.sh).
set -uo pipefail

if [ ! -f /etc/systemd/system/fmctl-verify-pair.service ]; then
  echo "fmctl: no verify pair here (fmctl-verify-pair.service): not one of fmctl's GPU nodes, or health is off"
  exit 0
fi
systemctl start fmctl-verify-pair.service
