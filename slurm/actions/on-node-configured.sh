#!/bin/bash
# ParallelCluster OnNodeConfigured: runs once Slurm is configured on the node, as root, from
# cinc-client's environment (no login shell: /etc/profile.d is not read, so /opt/slurm/bin
# is not on PATH; aws-parallelcluster-cookbook custom_action_executor.py).
# On AWS PCS, pcs-node-bootstrap.sh runs it (roles login and compute) the same way.
# Usage: on-node-configured.sh head|login|compute S3_PREFIX [--node-exporter] [--dcgm-exporter]
#        [--efa-exporter=N] [--slurm-exporter] [--containers[=DATA_DIR]] [--topology=tree|block]
#        [--prometheus] [--grafana]   (head node: Prometheus, and Grafana beside it)
# Exporters and the head node's Prometheus/Grafana are optional: one that cannot be
# installed is a warning, recorded in /var/lib/fmctl/exporters/NAME for `fmctl check` to report, never a failed bootstrap (a
# failed OnNodeConfigured makes ParallelCluster replace the node, again and again).
set -euo pipefail

role="${1:?usage: on-node-configured.sh head|login|compute S3_PREFIX [flags]}"
prefix="${2:?S3 prefix of the uploaded slurm folder}"
shift 2

case "$role" in head | login | compute) ;; *) echo "role must be head, login or compute" >&2; exit 2 ;; esac
[[ "$prefix" == s3://* ]] || { echo "S3_PREFIX must be an s3:// URI" >&2; exit 2; }

home=/opt/fmctl/slurm
install -d -m 0755 "$home"
aws s3 sync --only-show-errors "$prefix" "$home"
find "$home" -name '*.sh' -exec chmod 0755 {} +
# $slurm and PATH: where Slurm is on this node (/opt/slurm, the ParallelCluster cookbook's
# cluster.slurm.install_dir; PCS's prefix when pcs-node-bootstrap.sh recorded one).
# shellcheck source=../lib/slurm-prefix.sh
. "$home/lib/slurm-prefix.sh"

if [ "$slurm" = /opt/slurm ]; then
  # ParallelCluster: the task prolog its slurm.conf names, in /opt/slurm (shared with every
  # compute node), and the prolog.d/epilog.d drop-ins it runs. (PCS's cluster names fmctl's
  # Prolog and Epilog in $home itself, in its slurmCustomSettings.)
  scripts=/opt/slurm/etc/scripts
  install -d -m 0755 "$scripts"
  install -m 0755 "$home/lib/task-prolog.sh" "$scripts/fmctl-task-prolog.sh"
  if [ "$role" = compute ]; then
    install -d -m 0755 "$scripts/prolog.d" "$scripts/epilog.d"
    install -m 0755 "$home"/prolog.d/*.sh "$scripts/prolog.d/"
    install -m 0755 "$home"/epilog.d/*.sh "$scripts/epilog.d/"
  fi
fi

# optional NAME COMMAND...: run an optional installer; its failure is a warning and a record.
state=/var/lib/fmctl/exporters
optional() {
  local name="$1" log
  shift
  install -d -m 0755 "$state"
  log="$(mktemp)"
  if "$@" 2>"$log"; then
    echo ok >"$state/$name"
  else
    printf 'missing: %s\n' "$(tail -n 1 "$log")" >"$state/$name"
    echo "fmctl: warning: the $name exporter could not be installed: $(tail -n 1 "$log")" >>"$log"
  fi
  cat "$log" >&2
  rm -f "$log"
}

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
    --node-exporter) optional node "$home/lib/install-exporter.sh" node ;;
    --efa-exporter=*) optional efa "$home/lib/install-exporter.sh" efa "${flag#--efa-exporter=}" ;;
    --dcgm-exporter) optional dcgm "$home/lib/install-exporter.sh" dcgm ;;
    --slurm-exporter) optional slurm "$home/lib/install-exporter.sh" slurm ;;
    --containers) "$home/lib/enroot-pyxis.sh" "$role" ;;
    --containers=*) "$home/lib/enroot-pyxis.sh" "$role" "${flag#--containers=}" ;;
    # What clusters made by an earlier fmctl pass: their nodes run this script with their old
    # Args until (and unless) the cluster's update lands.
    --enroot-data=*) "$home/lib/enroot-pyxis.sh" "$role" "${flag#--enroot-data=}" ;;
    --topology=*) install_topology "${flag#--topology=}" ;;
    --prometheus) optional prometheus "$home/lib/install-monitoring.sh" ;;
    --grafana) optional grafana "$home/lib/install-monitoring.sh" --grafana ;;
    *) echo "unknown flag: $flag" >&2; exit 2 ;;
  esac
done
# fmctl's health agent on every GPU node (lib/health-agent.sh: faults drain the node through
# Slurm, within a repair budget): on by default, so not a flag either.
# Its settings are the spec's health: section (slurm/health.env, rendered with the scripts).
health_enabled=true health_interval=30
if [ -r "$home/health.env" ]; then
  health_enabled="$(sed -n 's/^FMCTL_HEALTH_ENABLED=//p' "$home/health.env")"
  health_interval="$(sed -n 's/^FMCTL_HEALTH_INTERVAL=//p' "$home/health.env")"
fi
if [ "$role" = compute ] && [ "$health_enabled" = true ] && [ -f /etc/fmctl/node.env ] &&
  grep -q '^FMCTL_EXPECTED_GPUS=[1-9]' /etc/fmctl/node.env; then
  cat >/etc/systemd/system/fmctl-health.service <<UNIT
[Unit]
Description=fmctl: node health agent (faults drain the node through Slurm)
[Service]
Type=oneshot
ExecStart=/bin/bash $home/lib/health-agent.sh
UNIT
  cat >/etc/systemd/system/fmctl-health.timer <<UNIT
[Unit]
Description=fmctl: node health agent every ${health_interval} s
[Timer]
OnBootSec=${health_interval}s
OnUnitActiveSec=${health_interval}s
AccuracySec=1s
[Install]
WantedBy=timers.target
UNIT
  systemctl daemon-reload
  systemctl enable --now fmctl-health.timer ||
    echo "fmctl: warning: the health agent's timer did not start" >&2
  # The gate's last check, the 2-node NCCL pair (lib/verify-pair.sh): once slurmd runs, for
  # a node the gate held for it. On ParallelCluster slurmd pulls it in at every start
  # (WantedBy); on PCS the node group's nodeReady stage starts it (pcs-node-ready.sh). On
  # both the health agent starts it again when a held node's peer was slow (--retry).
  pair_install=""
  if [ "$slurm" = /opt/slurm ]; then
    pair_install="[Install]
WantedBy=slurmd.service"
  fi
  cat >/etc/systemd/system/fmctl-verify-pair.service <<UNIT
[Unit]
Description=fmctl: verify gate's 2-node NCCL all-reduce before the node takes work
After=slurmd.service
[Service]
Type=oneshot
ExecStart=/bin/bash $home/lib/verify-pair.sh
$pair_install
UNIT
  systemctl daemon-reload
  # The verify gate (lib/verify-node.sh), on ParallelCluster: this runs before slurmd starts,
  # so a node that fails it never takes work, and its failed bootstrap makes clustermgtd
  # launch another in its place. (On PCS the node group's nodeBootstrapped stage runs it,
  # before slurmd, at every boot: pcs-node-bootstrapped.sh.)
  if [ "$slurm" = /opt/slurm ]; then
    # ... and at every later boot, before slurmd (the cookbook's slurmd.service, which this
    # unit's RequiredBy makes depend on it): a rebooted node takes work again only once it
    # passes. The agent reboots a node only where this unit is installed.
    cat >/etc/systemd/system/fmctl-verify.service <<UNIT
[Unit]
Description=fmctl: verify gate (GPUs, ECC, EFA, DCGM) before slurmd takes work
Before=slurmd.service
After=network-online.target remote-fs.target
Wants=network-online.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/bash $home/lib/verify-node.sh --once-per-boot
[Install]
RequiredBy=slurmd.service
UNIT
    systemctl daemon-reload
    systemctl enable fmctl-verify.service ||
      echo "fmctl: warning: the verify gate's boot unit could not be enabled" >&2
    systemctl enable fmctl-verify-pair.service ||
      echo "fmctl: warning: the verify gate's pair unit could not be enabled" >&2
    if ! "$home/lib/verify-node.sh"; then
      echo "fmctl: this node failed the verify gate (/var/lib/fmctl/health/verify.txt): not joining the cluster" >&2
      exit 1
    fi
  fi
fi
# The head node always gets enroot and pyxis (srun there registers --container-image): not a
# flag, since its Args cannot change on a cluster update (ParallelCluster: UNSUPPORTED).
if [ "$role" = head ]; then
  "$home/lib/enroot-pyxis.sh" head
fi

# The head node's records go where `fmctl status` reads them: the one prefix of the artifact
# bucket it may write (S3_PREFIX is s3://BUCKET/NAME/slurm: NAME-check/ beside it). Compute
# nodes may not write there; `fmctl check` reads theirs from the nodes.
if [ "$role" = head ] && [ -d "$state" ]; then
  summary="$(mktemp)"
  for record in "$state"/*; do
    printf '%s %s\n' "$(basename "$record")" "$(head -n 1 "$record")"
  done >"$summary"
  aws s3 cp --only-show-errors "$summary" "${prefix%/*}-check/exporters/head.txt" ||
    echo "fmctl: warning: could not publish the exporters' state for fmctl status" >&2
  rm -f "$summary"
fi
echo "fmctl on-node-configured: $role done"
