#!/bin/bash
# ParallelCluster OnNodeConfigured: runs once Slurm is configured on the node.
# Usage: on-node-configured.sh head|compute S3_PREFIX [--node-exporter] [--dcgm-exporter]
#        [--efa-exporter=N] [--slurm-exporter] [--enroot-data=DIR] [--topology=tree|block]
#        [--prometheus] [--grafana]   (head node: Prometheus, and Grafana beside it)
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

# Slurm's topology.conf, kept current from what `fmctl topology` publishes (head node only).
install_topology() {
  local style="$1"
  [ "$role" = head ] || { echo "--topology is for the head node" >&2; exit 2; }
  cat >/etc/systemd/system/fmctl-topology.service <<UNIT
[Unit]
Description=fmctl: Slurm topology.conf from EC2 instance topology
After=slurmctld.service
[Service]
Type=oneshot
ExecStart=$home/lib/topology-refresh.sh $prefix $style
UNIT
  cat >/etc/systemd/system/fmctl-topology.timer <<UNIT
[Unit]
Description=fmctl: refresh Slurm topology.conf
[Timer]
OnBootSec=1min
OnUnitActiveSec=2min
[Install]
WantedBy=timers.target
UNIT
  systemctl daemon-reload
  "$home/lib/topology-refresh.sh" "$prefix" "$style"
  systemctl enable --now fmctl-topology.timer
}

for flag in "$@"; do
  case "$flag" in
    --node-exporter) "$home/lib/install-exporter.sh" node ;;
    --efa-exporter=*) "$home/lib/install-exporter.sh" efa "${flag#--efa-exporter=}" ;;
    --dcgm-exporter) "$home/lib/install-exporter.sh" dcgm ;;
    --slurm-exporter) "$home/lib/install-exporter.sh" slurm ;;
    --enroot-data=*) "$home/lib/enroot-pyxis.sh" "${flag#--enroot-data=}" ;;
    --topology=*) install_topology "${flag#--topology=}" ;;
    --prometheus) "$home/lib/install-monitoring.sh" ;;
    --grafana) "$home/lib/install-monitoring.sh" --grafana ;;
    *) echo "unknown flag: $flag" >&2; exit 2 ;;
  esac
done
echo "fmctl on-node-configured: $role done"
