#!/bin/bash
# Prometheus exporters as systemd services. Usage: install-exporter.sh node|efa|dcgm|slurm
#   node   node exporter on :9100 (host metrics)
#   efa N  EFA counters on :9109: efa-metrics.sh writes the devices' sysfs hw_counters (and
#          N, the devices expected) every 15 s for a node exporter's textfile collector
#   dcgm   NVIDIA DCGM exporter on :9400 (GPU metrics), as a container
#   slurm  Slurm exporter on :9341 (jobs, queue, nodes), head node only
# Downloads are checked against the release's published SHA-256 sums before use.
set -euo pipefail

kind="${1:?usage: install-exporter.sh node|efa N|dcgm|slurm}"
NODE_EXPORTER_VERSION="${NODE_EXPORTER_VERSION:-1.10.2}"
DCGM_EXPORTER_IMAGE="${DCGM_EXPORTER_IMAGE:-nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless}"
SLURM_EXPORTER_VERSION="${SLURM_EXPORTER_VERSION:-1.8.0}"

# shellcheck source-path=SCRIPTDIR source=release.sh
source "$(dirname "$0")/release.sh"

# unit NAME EXEC...: a restart-always service under a throwaway user.
unit() {
  local name="$1"
  shift
  service "$name" "" "" "$@"
}

install_node_exporter() {
  local base="https://github.com/prometheus/node_exporter/releases/download/v$NODE_EXPORTER_VERSION"
  local dir="node_exporter-$NODE_EXPORTER_VERSION.linux-$arch"
  install_release "$base/$dir.tar.gz" "$base/sha256sums.txt" "$dir/node_exporter" \
    /usr/local/bin/node_exporter
}

case "$kind" in
  node)
    install_node_exporter
    unit fmctl-node-exporter /usr/local/bin/node_exporter --web.listen-address=:9100
    ;;
  efa)
    expected="${2:?usage: install-exporter.sh efa EXPECTED_DEVICES}"
    install_node_exporter
    # As root (sysfs counters), owning /var/lib/fmctl-efa (0755: the exporter reads it).
    service fmctl-efa-metrics root fmctl-efa /bin/sh "$(dirname "$0")/efa-metrics.sh" \
      /var/lib/fmctl-efa/efa.prom "$expected" /sys 15
    unit fmctl-efa-exporter /usr/local/bin/node_exporter --collector.disable-defaults \
      --collector.textfile --collector.textfile.directory=/var/lib/fmctl-efa \
      --web.listen-address=:9109
    ;;
  dcgm)
    runtime="$(command -v docker || command -v podman || true)"
    if [ -z "$runtime" ]; then
      echo "fmctl: no container runtime for the DCGM exporter on this node" >&2
      exit 1
    fi
    "$runtime" pull "$DCGM_EXPORTER_IMAGE"
    cat > /etc/systemd/system/fmctl-dcgm-exporter.service <<UNIT
[Unit]
Description=fmctl dcgm-exporter
After=network-online.target

[Service]
ExecStartPre=-$runtime rm -f fmctl-dcgm-exporter
ExecStart=$runtime run --rm --name fmctl-dcgm-exporter --gpus all --cap-add SYS_ADMIN -p 9400:9400 -v $(dirname "$0")/dcgm-counters.csv:/etc/fmctl/dcgm-counters.csv:ro -e DCGM_EXPORTER_COLLECTORS=/etc/fmctl/dcgm-counters.csv $DCGM_EXPORTER_IMAGE
ExecStop=$runtime stop fmctl-dcgm-exporter
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
    systemctl daemon-reload
    systemctl enable --now fmctl-dcgm-exporter.service
    ;;
  slurm)
    bin=/usr/local/bin/prometheus-slurm-exporter
    base="https://github.com/rivosinc/prometheus-slurm-exporter/releases/download/v$SLURM_EXPORTER_VERSION"
    install_release "$base/prometheus-slurm-exporter_linux_$arch.tar.gz" "$base/checksums.txt" \
      prometheus-slurm-exporter "$bin"
    # The exporter shells out to squeue/sinfo: it needs Slurm's binaries on its PATH.
    unit fmctl-slurm-exporter /usr/bin/env PATH=/opt/slurm/bin:/usr/bin:/bin "$bin" \
      -web.listen-address=:9341
    ;;
  *)
    echo "unknown exporter: $kind" >&2
    exit 2
    ;;
esac
echo "fmctl: $kind exporter running"
