#!/bin/bash
# ParallelCluster OnNodeConfigured: runs once Slurm is configured on the node.
# Usage: on-node-configured.sh head|compute S3_PREFIX [--node-exporter] [--dcgm-exporter]
#        [--efa-exporter] [--slurm-exporter] [--enroot-data=DIR]
set -euo pipefail

role="${1:?usage: on-node-configured.sh head|compute S3_PREFIX [flags]}"
prefix="${2:?S3 prefix of the uploaded slurm folder}"
shift 2

case "$role" in head | compute) ;; *) echo "role must be head or compute" >&2; exit 2 ;; esac
[[ "$prefix" == s3://* ]] || { echo "S3_PREFIX must be an s3:// URI" >&2; exit 2; }

home=/opt/fmctl/slurm
install -d -m 0755 "$home"
aws s3 sync --only-show-errors "$prefix" "$home"
find "$home" -name '*.sh' -exec chmod 0755 {} +

scripts=/opt/slurm/etc/scripts
if [ "$role" = compute ]; then
  install -d -m 0755 "$scripts/prolog.d" "$scripts/epilog.d"
  install -m 0755 "$home"/prolog.d/*.sh "$scripts/prolog.d/"
  install -m 0755 "$home"/epilog.d/*.sh "$scripts/epilog.d/"
fi

for flag in "$@"; do
  case "$flag" in
    --node-exporter) "$home/lib/install-exporter.sh" node ;;
    --efa-exporter) "$home/lib/install-exporter.sh" efa ;;
    --dcgm-exporter) "$home/lib/install-exporter.sh" dcgm ;;
    --slurm-exporter) "$home/lib/install-exporter.sh" slurm ;;
    --enroot-data=*) "$home/lib/enroot-pyxis.sh" "${flag#--enroot-data=}" ;;
    *) echo "unknown flag: $flag" >&2; exit 2 ;;
  esac
done
echo "fmctl on-node-configured: $role done"
