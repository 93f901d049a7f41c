#!/bin/bash
# Prometheus exporters as systemd services. Usage: install-exporter.sh node|efa|dcgm|slurm
#   node   node exporter on :9100 (host metrics)
#   efa N  EFA counters on :9109: efa-metrics.sh writes the devices' sysfs hw_counters (and
#          N, the devices expected) every 15 s for a node exporter's textfile collector
#   dcgm   NVIDIA DCGM exporter on :9400 (GPU metrics): NVIDIA's dcgm-exporter binary against
#          the node's DCGM host engine; a container only where a runtime exists
#   slurm  Slurm exporter on :9341 (jobs, queue, nodes), head node only
# Downloads are checked against the release's published SHA-256 sums before use. Exits
# non-zero with the reason on its last stderr line when the exporter cannot be installed;
# on-node-configured.sh treats every exporter as optional (a warning, never a failed node).
set -euo pipefail

kind="${1:?usage: install-exporter.sh node|efa N|dcgm|slurm}"
NODE_EXPORTER_VERSION="${NODE_EXPORTER_VERSION:-1.10.2}"
DCGM_EXPORTER_IMAGE="${DCGM_EXPORTER_IMAGE:-nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless}"
# rivosinc/prometheus-slurm-exporter: v1.7.0 is the newest tag seen publicly (its
# .goreleaser.yaml names the archives <project>_<os>_<arch>.tar.gz; GoReleaser's default
# checksum file is <project>_<version>_checksums.txt).
SLURM_EXPORTER_VERSION="${SLURM_EXPORTER_VERSION:-1.7.0}"

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

# dcgm-exporter talks to the node's DCGM host engine (nvidia-dcgm.service, which the
# ParallelCluster cookbook installs and the driver AMIs run). ParallelCluster AMIs ship
# neither Docker nor Podman, so the binary is the way: NVIDIA packages it as
# datacenter-gpu-manager-exporter (/usr/bin/dcgm-exporter; its own unit runs
# `dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv` after nvidia-dcgm.service).
install_dcgm_exporter() {
  local counters bin runtime
  counters="$(dirname "$0")/dcgm-counters.csv"
  # The exporter is only a client of the host engine: with nv-hostengine not answering it
  # exits at once and systemd restarts it every 10 s, an exporter "running" that exports
  # nothing. Ask the engine first (any dcgmi query needs it), and say so instead.
  command -v dcgmi >/dev/null 2>&1 || {
    echo "no DCGM on this node (dcgmi missing): nothing for dcgm-exporter to read" >&2
    return 1
  }
  timeout 15 dcgmi discovery -l >/dev/null 2>&1 || {
    echo "the DCGM host engine (nv-hostengine, nvidia-dcgm.service) does not answer: dcgm-exporter would restart in a loop" >&2
    return 1
  }
  bin="$(command -v dcgm-exporter || true)"
  [ -n "$bin" ] || [ ! -x /usr/bin/dcgm-exporter ] || bin=/usr/bin/dcgm-exporter
  if [ -n "$bin" ]; then
    cat >/etc/systemd/system/fmctl-dcgm-exporter.service <<UNIT
[Unit]
Description=fmctl dcgm-exporter (GPU metrics on :9400)
Wants=nvidia-dcgm.service
After=nvidia-dcgm.service

[Service]
ExecStart=$bin -f $counters -a :9400 -r localhost:5555
Restart=always
RestartSec=10
NoNewPrivileges=yes
ProtectHome=yes

[Install]
WantedBy=multi-user.target
UNIT
  else
    runtime="$(command -v docker || command -v podman || true)"
    if [ -z "$runtime" ]; then
      echo "no dcgm-exporter binary (package datacenter-gpu-manager-exporter) and no container runtime on this node" >&2
      return 1
    fi
    "$runtime" pull "$DCGM_EXPORTER_IMAGE"
    cat >/etc/systemd/system/fmctl-dcgm-exporter.service <<UNIT
[Unit]
Description=fmctl dcgm-exporter (GPU metrics on :9400), as a container
After=network-online.target nvidia-dcgm.service

[Service]
ExecStartPre=-$runtime rm -f fmctl-dcgm-exporter
ExecStart=$runtime run --rm --name fmctl-dcgm-exporter --gpus all --cap-add SYS_ADMIN -p 9400:9400 -v $counters:/etc/fmctl/dcgm-counters.csv:ro -e DCGM_EXPORTER_COLLECTORS=/etc/fmctl/dcgm-counters.csv $DCGM_EXPORTER_IMAGE
ExecStop=$runtime stop fmctl-dcgm-exporter
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
  fi
  systemctl daemon-reload
  systemctl enable --now fmctl-dcgm-exporter.service
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
    install_dcgm_exporter
    ;;
  slurm)
    bin=/usr/local/bin/prometheus-slurm-exporter
    base="https://github.com/rivosinc/prometheus-slurm-exporter/releases/download/v$SLURM_EXPORTER_VERSION"
    install_release "$base/prometheus-slurm-exporter_linux_$arch.tar.gz" \
      "$base/prometheus-slurm-exporter_${SLURM_EXPORTER_VERSION}_checksums.txt" \
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
