#!/bin/bash
# ParallelCluster OnNodeStart on the head node: runs before the cookbook configures and starts
# slurmctld (as root, cinc's environment). With TopologyPlugin=topology/tree in slurm.conf,
# slurmctld retries a missing topology.conf for 60 s and then exits fatally ("something wrong
# with opening/reading topology.conf", Slurm 24.11, seen in the stand-in node): the head node
# would fail. So the provisional tree fmctl rendered (one leaf switch per queue) is in place
# first; on-node-configured.sh --topology replaces it with EC2's real topology.
# Usage: on-head-node-start.sh S3_PREFIX
set -euo pipefail

prefix="${1:?usage: on-head-node-start.sh S3_PREFIX}"
[[ "$prefix" == s3://* ]] || { echo "S3_PREFIX must be an s3:// URI" >&2; exit 2; }
conf=/opt/slurm/etc/topology.conf
install -d -m 0755 /opt/slurm/etc
if [ ! -s "$conf" ]; then
  aws s3 cp --only-show-errors "$prefix/topology.conf" "$conf"
  chmod 0644 "$conf"
fi
echo "fmctl on-head-node-start: $conf in place"
