#!/bin/bash
# AWS PCS: a GPU node group's nodeBootstrapped lifecycle script (render/pcs.py,
# lifecycle_actions). PCS runs it after it has set up the node and before slurmd starts, at
# every boot (executionPolicy EVERY_BOOT), and terminates the node when it fails (onError
# TERMINATE); PCS's own deep health check runs after it (botocore's PCS model:
# NodeLifecycleStages, NodeLifecycleScript, DeepHealthChecks).
#   1. The node's bootstrap, pcs-node-bootstrap.sh with the user data's own arguments: it
#      runs once per instance, whichever of cloud-init and PCS comes first, under its lock.
#      A bootstrap that fails here fails the node: it is terminated instead of taking work
#      half made.
#   2. fmctl's verify gate, lib/verify-node.sh --once-per-boot, as ParallelCluster's nodes run
#      it before slurmd: GPUs, ECC, NVLinks, row remaps, EFA devices and their loopback,
#      DCGM's diagnostic at health.verify.dcgmLevel. A node that fails is terminated (the
#      group launches another); one that passes is held for its 2-node NCCL pair, which the
#      nodeReady stage runs (pcs-node-ready.sh).
# Before both, a node its health agent condemned (/var/lib/fmctl/health/replace: a fault the
# table says to replace for, which PCS's own monitoring may not find) fails at once. That
# is how the agent has PCS replace an instance: AWS documents no call to replace one, but
# this stage runs at every boot, reboots included, and a failing script terminates the node
# (botocore's PCS model: ExecutionPolicy EVERY_BOOT, OnError TERMINATE), so the agent
# reboots the drained node once its jobs have ended (lib/health-agent.sh). The stage leaves
# /etc/fmctl/pcs-gate, which tells the agent that this way is open on this instance (and
# that a reboot, with health.repair: reboot, is verified here before slurmd starts).
# Usage: pcs-node-bootstrapped.sh compute S3_PREFIX SLURM_VERSION ... (pcs-node-bootstrap.sh's)
set -euo pipefail

[ "$#" -ge 8 ] || { echo "usage: pcs-node-bootstrapped.sh compute S3_PREFIX SLURM_VERSION EFA GPUS EFA_DEVICES RDMA_READ FSX|- [flags]" >&2; exit 2; }
prefix="$2"
[[ "$prefix" == s3://* ]] || { echo "S3_PREFIX must be an s3:// URI" >&2; exit 2; }
home=/opt/fmctl/slurm
condemned=/var/lib/fmctl/health/replace

if [ -s "$condemned" ]; then
  echo "fmctl: this node's health agent asked for a new instance ($(cat "$condemned")): PCS terminates it" >&2
  exit 1
fi
install -d -m 0755 /etc/fmctl
echo "fmctl's verify gate runs in PCS's nodeBootstrapped stage at every boot; a failure terminates the node" >/etc/fmctl/pcs-gate
# The reboot the agent asked for (health.repair: reboot) is this boot: the gate below judges
# the node, and the nodeReady stage returns it.
rm -f /var/lib/fmctl/health/reboot

if [ ! -e /var/lib/fmctl/bootstrapped ]; then
  # A copy of its own: cloud-init's user data may be writing the shared one right now.
  install -d -m 0755 "$home/actions"
  copy="$(mktemp "$home/actions/.pcs-node-bootstrap.XXXXXX")"
  trap 'rm -f "$copy"' EXIT
  aws s3 cp --only-show-errors "$prefix/actions/pcs-node-bootstrap.sh" "$copy"
  bash "$copy" "$@"
fi

if ! "$home/lib/verify-node.sh" --once-per-boot; then
  echo "fmctl: this node failed the verify gate (/var/lib/fmctl/health/verify.txt): PCS terminates it" >&2
  exit 1
fi
