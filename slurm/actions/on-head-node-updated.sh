#!/bin/bash
# ParallelCluster OnNodeUpdated on the head node: runs after `pcluster update-cluster` (which
# `fmctl up` drives) has applied a changed config, as root from cinc's environment. Brings
# the head node this fmctl's slurm folder and the task prolog slurm.conf names, into
# /opt/slurm, which every compute node mounts: nodes that were running before the update
# see it at once (a TaskProlog that does not exist fails every task).
# Usage: on-head-node-updated.sh S3_PREFIX
set -euo pipefail
export PATH="/opt/slurm/bin:/opt/slurm/sbin:$PATH"

prefix="${1:?usage: on-head-node-updated.sh S3_PREFIX}"
[[ "$prefix" == s3://* ]] || { echo "S3_PREFIX must be an s3:// URI" >&2; exit 2; }
home=/opt/fmctl/slurm
install -d -m 0755 "$home" /opt/slurm/etc/scripts
aws s3 sync --only-show-errors "$prefix" "$home"
find "$home" -name '*.sh' -exec chmod 0755 {} +
install -m 0755 "$home/lib/task-prolog.sh" /opt/slurm/etc/scripts/fmctl-task-prolog.sh
echo "fmctl on-head-node-updated: $home and the task prolog are current"
