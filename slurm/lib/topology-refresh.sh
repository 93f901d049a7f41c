#!/bin/bash
# Head node: install Slurm's topology.conf from the topology `fmctl topology` published, and
# keep it current (run by fmctl-topology.timer). Usage: topology-refresh.sh S3_PREFIX tree|block
# Reconfigures slurmctld only when the file changed.
set -euo pipefail
# Run by a systemd timer: no profile, so Slurm's bin directory is not on PATH.
export PATH="/opt/slurm/bin:$PATH"

prefix="${1:?usage: topology-refresh.sh S3_PREFIX tree|block}"
style="${2:-tree}"
home=/opt/fmctl/slurm
conf=/opt/slurm/etc/topology.conf
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! aws s3 cp --only-show-errors "$prefix/topology.json" "$work/topology.json" 2>/dev/null; then
  # Nothing published yet (no compute node ran): the provisional tree, one switch per queue.
  echo '{"instances": []}' >"$work/topology.json"
fi
scontrol show nodes -o >"$work/nodes.txt"
python3 "$home/lib/topology.py" "$work/topology.json" "$work/nodes.txt" --style="$style" >"$work/topology.conf"
grep -q '^\(SwitchName\|BlockName\)=' "$work/topology.conf" || { echo "no nodes yet" >&2; exit 0; }

if ! cmp -s "$work/topology.conf" "$conf"; then
  install -m 0644 "$work/topology.conf" "$conf"
  scontrol reconfigure
  echo "fmctl topology: $conf updated"
fi
