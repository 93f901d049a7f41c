#!/bin/sh
# EFA device counters in Prometheus text format, for node_exporter's textfile collector.
# EFA devices keep their counters in sysfs hw_counters (tx_bytes, rx_bytes, rx_drops,
# rdma_read_bytes, retrans_pkts, ...), not in the InfiniBand port counters node_exporter's
# infiniband collector reads, so that collector shows nothing for them.
# Usage: efa-metrics.sh OUT_FILE EXPECTED_DEVICES [SYSFS_ROOT] [INTERVAL_SECONDS]
# Writes OUT_FILE atomically; with INTERVAL_SECONDS, again and again. POSIX sh (busybox too).
set -eu

out="${1:?usage: efa-metrics.sh OUT_FILE EXPECTED_DEVICES [SYSFS_ROOT] [INTERVAL]}"
expected="${2:?expected number of EFA devices}"
root="${3:-/sys}"
interval="${4:-}"

write() {
  tmp="$out.tmp.$$"
  devices=0
  {
    echo "# HELP fmctl_efa_hw_stat EFA hardware statistic from sysfs hw_counters, by name (stat)."
    echo "# TYPE fmctl_efa_hw_stat untyped"
    for dev in "$root"/class/infiniband/*; do
      [ -d "$dev" ] || continue
      name="$(basename "$dev")"
      # EFA devices only (not other RDMA devices a host may also have): bound to efa.
      case "$(readlink "$dev/device/driver" 2>/dev/null || true)" in
        */efa) ;;
        *) continue ;;
      esac
      devices=$((devices + 1))
      for port in "$dev"/ports/*; do
        [ -d "$port/hw_counters" ] || continue
        for counter in "$port"/hw_counters/*; do
          [ -f "$counter" ] || continue
          value="$(cat "$counter" 2>/dev/null || echo "")"
          case "$value" in '' | *[!0-9]*) continue ;; esac
          echo "fmctl_efa_hw_stat{device=\"$name\",port=\"$(basename "$port")\",stat=\"$(basename "$counter")\"} $value"
        done
      done
    done
    echo "# HELP fmctl_efa_devices EFA devices present on the node."
    echo "# TYPE fmctl_efa_devices gauge"
    echo "fmctl_efa_devices $devices"
    echo "# HELP fmctl_efa_devices_expected EFA devices this instance type has (fmctl's catalog)."
    echo "# TYPE fmctl_efa_devices_expected gauge"
    echo "fmctl_efa_devices_expected $expected"
  } >"$tmp"
  mv "$tmp" "$out"
}

write
if [ -n "$interval" ]; then
  while sleep "$interval"; do write; done
fi
