#!/bin/bash
# Head node: Prometheus on 127.0.0.1:9090 and, with --grafana, Grafana on 127.0.0.1:3000, as
# systemd services, configured from the files fmctl rendered into ../monitoring/. Neither
# listens beyond the node: Grafana is reached through an SSM port forward. Grafana's admin
# password is made here, on the head node, and never leaves it (/etc/fmctl/grafana-admin).
# Usage: install-monitoring.sh [--grafana]
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-3.7.3}"
GRAFANA_VERSION="${GRAFANA_VERSION:-12.3.0}"
here="$(cd "$(dirname "$0")" && pwd)"
monitoring="$(dirname "$here")/monitoring"

# shellcheck source-path=SCRIPTDIR source=release.sh
source "$here/release.sh"

[ -f "$monitoring/prometheus.yml" ] || { echo "no $monitoring/prometheus.yml" >&2; exit 1; }

system_user() {
  id "$1" >/dev/null 2>&1 || useradd --system --no-create-home --shell /sbin/nologin "$1"
}

# Prometheus.
base="https://github.com/prometheus/prometheus/releases/download/v$PROMETHEUS_VERSION"
dir="prometheus-$PROMETHEUS_VERSION.linux-$arch"
install_release "$base/$dir.tar.gz" "$base/sha256sums.txt" "$dir/prometheus" /usr/local/bin/prometheus
system_user fmctl-prometheus
service fmctl-prometheus fmctl-prometheus fmctl-prometheus /usr/local/bin/prometheus \
  "--config.file=$monitoring/prometheus.yml" \
  --storage.tsdb.path=/var/lib/fmctl-prometheus \
  --storage.tsdb.retention.time=15d \
  --web.listen-address=127.0.0.1:9090

if [ "${1:-}" != "--grafana" ]; then
  echo "fmctl: prometheus running"
  exit 0
fi

# Grafana: the release tarball, checked against its published .sha256.
home="/opt/grafana-$GRAFANA_VERSION"
if [ ! -x "$home/bin/grafana" ]; then
  url="https://dl.grafana.com/oss/release/grafana-$GRAFANA_VERSION.linux-$arch.tar.gz"
  tmp="$(mktemp -d)"
  curl -fsSL --retry 5 -o "$tmp/grafana.tar.gz" "$(mirrored "$url")"
  echo "$(curl -fsSL --retry 5 "$(mirrored "$url.sha256")")  $tmp/grafana.tar.gz" | sha256sum -c -
  install -d "$home"
  tar -xzf "$tmp/grafana.tar.gz" -C "$home" --strip-components=1
  rm -rf "$tmp"
fi
system_user fmctl-grafana
install -d -m 0750 -o root -g fmctl-grafana /etc/fmctl /etc/fmctl/grafana \
  /etc/fmctl/grafana/provisioning /etc/fmctl/grafana/provisioning/datasources \
  /etc/fmctl/grafana/provisioning/dashboards
if [ ! -s /etc/fmctl/grafana-admin ]; then
  (umask 077 && openssl rand -base64 24 | tr -d '\n' >/etc/fmctl/grafana-admin)
fi
chown root:fmctl-grafana /etc/fmctl/grafana-admin
chmod 0640 /etc/fmctl/grafana-admin
install -m 0640 -g fmctl-grafana "$monitoring/grafana-datasources.yaml" \
  /etc/fmctl/grafana/provisioning/datasources/fmctl.yaml
install -m 0640 -g fmctl-grafana "$monitoring/grafana-dashboards.yaml" \
  /etc/fmctl/grafana/provisioning/dashboards/fmctl.yaml
cat >/etc/fmctl/grafana/grafana.ini <<INI
[server]
http_addr = 127.0.0.1
http_port = 3000
[paths]
data = /var/lib/fmctl-grafana
logs = /var/lib/fmctl-grafana/log
provisioning = /etc/fmctl/grafana/provisioning
[security]
admin_user = admin
admin_password = \$__file{/etc/fmctl/grafana-admin}
[users]
allow_sign_up = false
[auth.anonymous]
enabled = false
[analytics]
reporting_enabled = false
check_for_updates = false
INI
chgrp fmctl-grafana /etc/fmctl/grafana/grafana.ini
chmod 0640 /etc/fmctl/grafana/grafana.ini
service fmctl-grafana fmctl-grafana fmctl-grafana "$home/bin/grafana" server \
  "--homepath=$home" --config=/etc/fmctl/grafana/grafana.ini
echo "fmctl: prometheus and grafana running (grafana on 127.0.0.1:3000)"
