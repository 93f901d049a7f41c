#!/bin/bash
# Prometheus exporters as systemd services. Usage: install-exporter.sh node|efa|dcgm|slurm
#   node   node exporter on :9100 (host metrics)
#   efa N  EFA counters on :9109: efa-metrics.sh writes the devices' sysfs hw_counters (and
#          N, the devices expected) every 15 s for a node exporter's textfile collector
#   dcgm   NVIDIA DCGM exporter on :9400 (GPU metrics) against the node's DCGM host engine:
#          the AMI's dcgm-exporter, else NVIDIA's package from its CUDA repository when the
#          node runs DCGM 4 (the only DCGM it pairs with), else a container where a runtime exists
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
# The host engine's DCGM version, as `dcgmi version` prints it ("Hostengine build info:"
# then "Version : 4.5.1"; NVIDIA/DCGM dcgmi/Version.cpp and DcgmBuildInfo's printer, the same
# from DCGM 2 to 4).
dcgm_version() {
  timeout 15 dcgmi version 2>/dev/null |
    awk '/^Hostengine build info/ {h = 1} h && $1 == "Version" {print $3; exit}'
}

# NVIDIA's CUDA network repository for this node's OS (CUDA's Linux installation guide:
# developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>, distro as ubuntu2204,
# amzn2023, rhel9, debian12; arm64 servers are "sbsa").
cuda_repository() {
  local id version carch
  id="$(. /etc/os-release && echo "$ID")"
  version="$(. /etc/os-release && echo "$VERSION_ID")"
  case "$id" in
    ubuntu) id="ubuntu${version//./}" ;;
    rocky | almalinux) id="rhel${version%%.*}" ;;
    *) id="${id}${version%%.*}" ;;
  esac
  case "$(uname -m)" in
    aarch64) carch=sbsa ;;
    *) carch="$(uname -m)" ;;
  esac
  echo "https://developer.download.nvidia.com/compute/cuda/repos/$id/$carch"
}

# packaged_dcgm_exporter: install NVIDIA's datacenter-gpu-manager-exporter (its unit file is
# nvidia-dcgm-exporter.service; fmctl runs the binary under its own unit, against the AMI's
# host engine). An exporter release pairs with one DCGM (NVIDIA's "Install DCGM Exporter":
# run it with the DCGM it was built with; dcgm-exporter --version says both), and the
# package pairs with DCGM 4: on an AMI with DCGM 3 (ParallelCluster before 3.15 ships 3.3.x)
# it would bring DCGM 4 beside the host engine, so it is not tried. The repository is added
# for the install and removed after it, as ParallelCluster's cookbook does with NVIDIA's
# repository. Sets package_reason when it does not install.
packaged_dcgm_exporter() {
  local version repo tmp list paired
  version="$(dcgm_version)"
  case "$version" in
    4.*) ;;
    "")
      package_reason="dcgmi version did not say the host engine's DCGM version"
      return 1
      ;;
    *)
      package_reason="DCGM $version on this node: NVIDIA's packaged exporter pairs with DCGM 4"
      return 1
      ;;
  esac
  repo="$(cuda_repository)"
  tmp="$(mktemp -d)"
  if command -v apt-get >/dev/null 2>&1; then
    # The repository's key and source come in NVIDIA's cuda-keyring package.
    if ! curl -fsSL --retry 5 -o "$tmp/cuda-keyring_1.1-1_all.deb" \
      "$(mirrored "$repo/cuda-keyring_1.1-1_all.deb")"; then
      package_reason="no NVIDIA CUDA repository at $repo"
      rm -rf "$tmp"
      return 1
    fi
    dpkg -i "$tmp/cuda-keyring_1.1-1_all.deb" >/dev/null
    list="$(dpkg -L cuda-keyring | grep '^/etc/apt/sources.list.d/.*\.list$' | head -n 1)"
    if [ -n "$release_mirror" ]; then
      sed -i "s#https://#${release_mirror%/}/#" "$list"
    fi
    if apt-get -q update -o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- \
      -o APT::Get::List-Cleanup=0 >"$tmp/log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends \
        datacenter-gpu-manager-exporter >>"$tmp/log" 2>&1; then
      rm -f "$list"
    else
      rm -f "$list"
      package_reason="apt could not install datacenter-gpu-manager-exporter from $repo: $(tail -n 1 "$tmp/log")"
      rm -rf "$tmp"
      return 1
    fi
  elif command -v dnf >/dev/null 2>&1; then
    # NVIDIA's .repo file names the repository and its key (what `dnf config-manager
    # --add-repo` would add), its URLs taken through the mirror when there is one.
    if ! curl -fsSL --retry 5 -o "$tmp/cuda.repo" \
      "$(mirrored "$repo/cuda-$(basename "$(dirname "$repo")").repo")"; then
      package_reason="no NVIDIA CUDA repository at $repo"
      rm -rf "$tmp"
      return 1
    fi
    [ -z "$release_mirror" ] || sed -i "s#https://#${release_mirror%/}/#g" "$tmp/cuda.repo"
    cp "$tmp/cuda.repo" /etc/yum.repos.d/fmctl-cuda.repo
    if ! dnf -q -y install datacenter-gpu-manager-exporter >"$tmp/log" 2>&1; then
      rm -f /etc/yum.repos.d/fmctl-cuda.repo
      package_reason="dnf could not install datacenter-gpu-manager-exporter from $repo: $(tail -n 1 "$tmp/log")"
      rm -rf "$tmp"
      return 1
    fi
    rm -f /etc/yum.repos.d/fmctl-cuda.repo
  else
    package_reason="neither apt nor dnf on this node"
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$tmp"
  # fmctl's unit runs the binary (its counters, the node's host engine); the package's own
  # unit, were its scripts to start it, would take :9400 first.
  systemctl disable --now nvidia-dcgm-exporter.service >/dev/null 2>&1 || true
  # "dcgm-exporter version 4.5.3-4.8.2": the DCGM it was built with, then its own.
  paired="$(/usr/bin/dcgm-exporter --version 2>/dev/null | awk '{print $NF}')"
  if [ "${paired%%.*}" != "${version%%.*}" ]; then
    package_reason="the packaged exporter ($paired) pairs with DCGM ${paired%%.*}, the node runs DCGM $version"
    # Not left behind: the next run would take its binary for the AMI's.
    if command -v apt-get >/dev/null 2>&1; then
      apt-get -q remove -y datacenter-gpu-manager-exporter >/dev/null 2>&1 || true
    else
      dnf -q -y remove datacenter-gpu-manager-exporter >/dev/null 2>&1 || true
    fi
    return 1
  fi
  return 0
}

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
  if [ -z "$bin" ] && packaged_dcgm_exporter; then
    bin=/usr/bin/dcgm-exporter
  fi
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
      echo "no dcgm-exporter binary (${package_reason:-package datacenter-gpu-manager-exporter}) and no container runtime on this node" >&2
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
