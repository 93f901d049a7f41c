#!/bin/bash
# What fmctl's node health agent finds on a GPU node (issue 33), one place for both of its
# hosts: sourced by health-agent.sh on a Slurm node (it fills `faults`), and run as a
# script by the Kubernetes agent's container (templates/kubernetes/health-agent/
# node_agent.py), where it prints one `code<TAB>detail` line per fault. What it reads, and
# from where, is said above each look below; the settings come from the environment
# (slurm/health.env on Slurm, the DaemonSet's env on EKS):
#   FMCTL_EXPECTED_GPUS, FMCTL_EFA_ENABLED, FMCTL_EXPECTED_EFA, FMCTL_FSX_MOUNT,
#   FMCTL_NVME_MOUNT, FMCTL_SYSFS (sysfs: /sys);
#   FMCTL_KERNEL_LOG: a file of the kernel's new lines, read instead of `journalctl -k`
#     (a container has no journal: the Kubernetes agent reads /dev/kmsg and writes them);
#   FMCTL_EFA_FROM_SYSFS=true: count EFA devices in sysfs instead of with fi_info (a
#     container without libfabric);
#   FMCTL_IN_CONTAINER=true: nvidia-smi missing is the container's lack (the NVIDIA runtime
#     did not put it there), not 0 GPUs: said as `unchecked`, never a fault.
# State between runs (the kernel cursor, NVLinks seen, EFA counters) is in $dir.

# Run on its own (not sourced): where things are, and the faults as lines.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  lib="$(cd "$(dirname "$0")" && pwd)"
  dir="${FMCTL_HEALTH_DIR:-/var/lib/fmctl/health}"
  deadline="${FMCTL_HEALTH_TOOL_TIMEOUT:-20}"
  install -d -m 0755 "$dir"
fi

faults=()  # "code<TAB>detail"

if [ "${FMCTL_IN_CONTAINER:-false}" = true ] && [ "${FMCTL_EXPECTED_GPUS:-0}" -gt 0 ] &&
  ! command -v nvidia-smi >/dev/null 2>&1; then
  # Nothing about the GPUs can be read here: say so once, look at nothing else of theirs.
  faults+=("unchecked	nvidia-smi is not in the container (the node's NVIDIA runtime did not add it)")
  FMCTL_EXPECTED_GPUS=0
fi


# XIDs since the last run. journalctl -k shows this boot's kernel log; --cursor-file starts
# after the saved cursor and saves the last entry's (systemd's journalctl(1)). In a container
# the agent hands over the kernel's new lines itself (FMCTL_KERNEL_LOG).
kernel_lines() {
  if [ -n "${FMCTL_KERNEL_LOG:-}" ]; then
    cat "$FMCTL_KERNEL_LOG" 2>/dev/null
  else
    timeout "$deadline" journalctl -k -o short-iso --no-pager \
      --cursor-file="$dir/kernel.cursor" 2>/dev/null
  fi
}
while IFS= read -r code; do
  [ -n "$code" ] && faults+=("xid:$code	XID $code")
done < <(kernel_lines | sed -n 's/.*NVRM: Xid ([^)]*): \([0-9][0-9]*\),.*/\1/p')

if [ "${FMCTL_EXPECTED_GPUS:-0}" -gt 0 ]; then
  out=$(timeout "$deadline" nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null)
  gpus=$(printf '%s\n' "$out" | grep -c '^[[:space:]]*[0-9][0-9]*[[:space:]]*$')
  [ "$gpus" -ge "$FMCTL_EXPECTED_GPUS" ] ||
    faults+=("gpu-count	$gpus of $FMCTL_EXPECTED_GPUS GPUs")
fi

# NVLink (nvlinks.sh reads `nvidia-smi nvlink -s`): every GPU of a node has as many links as
# the others (the awsome-distributed-training EFA cheatsheet's table: 18 on p5 to
# p6e-gb200), so a GPU with fewer links up than the node's best, or a best below what this
# node had (its record, nvlinks: the most seen), is a link down.
if [ "${FMCTL_EXPECTED_GPUS:-0}" -gt 0 ] && [ -r "$lib/nvlinks.sh" ]; then
  # shellcheck source=nvlinks.sh
  . "$lib/nvlinks.sh"
  links=$(timeout "$deadline" nvidia-smi nvlink -s 2>/dev/null | fmctl_nvlinks)
  if [ -n "$links" ]; then
    best=$(printf '%s\n' "$links" | fmctl_nvlinks_best)
    had=$(cat "$dir/nvlinks" 2>/dev/null || echo 0)
    [ "$best" -le "$had" ] || { echo "$best" >"$dir/nvlinks"; had=$best; }
    short=$(printf '%s\n' "$links" | fmctl_nvlinks_short "$had")
    [ -z "$short" ] || faults+=("nvlink-down	$short NVLinks up")
  fi
fi

# Row remapping (row-remap.sh reads `nvidia-smi -q -d ROW_REMAPPER`): a GPU whose remap
# failed has no spare row left for a bad one, NVIDIA's RMA criterion (replace); one whose
# remap is pending runs on until the GPU is next reset, which NVIDIA leaves to a convenient
# time: the table's reboot, its jobs left to finish (a replacement, under health.repair:
# replace, resets it as well). GPUs before Ampere print no such section: nothing to find.
if [ "${FMCTL_EXPECTED_GPUS:-0}" -gt 0 ] && [ -r "$lib/row-remap.sh" ]; then
  # shellcheck source=row-remap.sh
  . "$lib/row-remap.sh"
  remaps=$(timeout "$deadline" nvidia-smi -q -d ROW_REMAPPER 2>/dev/null | fmctl_row_remaps)
  if [ -n "$remaps" ]; then  # (none to sort: no two more processes a pass)
    failed=$(printf '%s\n' "$remaps" | fmctl_row_remaps_of failure)
    pending=$(printf '%s\n' "$remaps" | fmctl_row_remaps_of pending)
    [ -z "$failed" ] || faults+=("row-remap-failure	GPU $failed: row remapping failed")
    [ -z "$pending" ] || faults+=("row-remap-pending	GPU $pending: row remapping pending")
  fi
fi

# The storage the spec mounts on every node (health.env): FSx for Lustre and the
# instance-store array. Each must be a mount point and answer; a Lustre client that hangs
# blocks stat, so each look has 10 s.
for mount in "fsx-missing:${FMCTL_FSX_MOUNT:-}" "nvme-missing:${FMCTL_NVME_MOUNT:-}"; do
  path="${mount#*:}"
  [ -n "$path" ] || continue
  if ! timeout 10 mountpoint -q "$path" 2>/dev/null; then
    faults+=("${mount%%:*}	$path not mounted")
  elif ! timeout 10 stat -f "$path" >/dev/null 2>&1; then
    faults+=("${mount%%:*}	$path does not answer")
  fi
done

# DCGM's health watches (`dcgmi health -c -j`; NVIDIA/DCGM dcgmi/Health.cpp at 72fa3fe): the
# watches' overall result is Healthy, Warning or Failure, each failing system a child whose
# value says so. A Failure is node-level, a Warning only counted. Watches are off until set:
# a run that finds them off sets them all (`dcgmi health -s a`; memory, NVLink, PCIe and
# thermal need 60 s before they answer) and checks on the next run. No host engine: no check.
# On EKS the agent's image has no dcgmi: DCGM's own container beside it keeps the watches and
# writes their answer each interval (dcgm-watch.sh) to $FMCTL_DCGM_REPORT, read here while it
# is fresh (no older than $FMCTL_DCGM_REPORT_MAX_AGE seconds; older: no check).
report=""
if [ "${FMCTL_EXPECTED_GPUS:-0}" -gt 0 ] && [ -n "${FMCTL_DCGM_REPORT:-}" ]; then
  written=$(stat -c %Y "$FMCTL_DCGM_REPORT" 2>/dev/null || echo 0)
  if [ $(($(date +%s) - written)) -le "${FMCTL_DCGM_REPORT_MAX_AGE:-120}" ]; then
    report=$(cat "$FMCTL_DCGM_REPORT" 2>/dev/null || true)
  fi
elif [ "${FMCTL_EXPECTED_GPUS:-0}" -gt 0 ] && command -v dcgmi >/dev/null 2>&1; then
  report=$(timeout "$deadline" dcgmi health -c -j 2>&1)
  if [[ "$report" == *"Health watches not enabled"* ]]; then
    timeout "$deadline" dcgmi health -s a >/dev/null 2>&1 || true
  fi
fi
if [[ "$report" == *'"Overall Health"'* ]]; then
  overall=$(printf '%s\n' "$report" | awk '/"Overall Health"/ {f = 1}
    f && /"value"/ {sub(/.*"value" *: *"/, ""); sub(/".*/, ""); print; exit}')
  # The systems whose own value is the overall one (e.g. "Memory system").
  systems=$(printf '%s\n' "$report" | awk -v want="$overall" '
    /" *: *\{/ {key = $0; sub(/^ *"/, "", key); sub(/" *: *\{.*/, "", key)}
    /"value"/ && index($0, "\"" want "\"") && (key ~ / system$/ || key == "Driver") {print key}' |
    sort -u | paste -sd, -)
  case "$overall" in
    Failure) faults+=("dcgm-health	${systems:-DCGM health check}: Failure") ;;
    Warning) faults+=("dcgm-health-warn	${systems:-DCGM health check}: Warning") ;;
  esac
fi
# EFA devices: the RDM domains libfabric lists (efa-devices.sh), as the prolog counts them;
# without libfabric (a container), the EFA devices in sysfs (vendor 0x1d0f, device 0xefa*:
# the test the counters below use too).
sysfs="${FMCTL_SYSFS:-/sys}"
# sysfs attributes are read by the shell itself (`read`), not with a process each: a pass on
# a node of 32 EFA devices reads some 250 of them.
efa_in_sysfs() {
  local device vendor id
  for device in "$sysfs"/class/infiniband/*; do
    vendor="" id=""
    { read -r vendor <"$device/device/vendor"; } 2>/dev/null
    [ "$vendor" = 0x1d0f ] || continue
    { read -r id <"$device/device/device"; } 2>/dev/null
    [[ "$id" == 0xefa* ]] && echo "${device##*/}"
  done
}
if [ "${FMCTL_EFA_ENABLED:-false}" = true ] && [ "${FMCTL_EXPECTED_EFA:-0}" -gt 0 ]; then
  if [ "${FMCTL_EFA_FROM_SYSFS:-false}" = true ]; then
    efa=$(efa_in_sysfs | wc -l)
  elif [ -r "$lib/efa-devices.sh" ]; then
    # shellcheck source=efa-devices.sh
    . "$lib/efa-devices.sh"
    out=$(timeout "$deadline" "$(fmctl_fi_info_path)" -p efa -t FI_EP_RDM 2>/dev/null)
    efa=$(printf '%s\n' "$out" | fmctl_efa_rdm_domains | wc -l)
  else
    efa=$FMCTL_EXPECTED_EFA
  fi
  [ "$efa" -ge "$FMCTL_EXPECTED_EFA" ] ||
    faults+=("efa-count	$efa of $FMCTL_EXPECTED_EFA EFA devices")
fi

# EFA error counters: the EFA driver's hw_counters (the kernel's sysfs-class-infiniband ABI,
# /sys/class/infiniband/DEV/ports/N/hw_counters/NAME; EFA devices are vendor 0x1d0f, device
# 0xefa*), the ones AWS's node monitoring agent watches (aws/eks-node-monitoring-agent
# monitors/networking/efa/efa.go at 51af549). A rise since the last run is counted as
# EFA_ERRORS, never acted on: that agent only warns of them too, and a peer's trouble raises
# them as well. FMCTL_SYSFS: where sysfs is (/sys; a test's folder on a node without EFA).
counters="$dir/efa-counters"
touch "$counters"
: >"$counters.new"
declare -A counted=()  # the last run's value of each counter, read once
while read -r key value; do
  [ -n "$key" ] && counted[$key]=$value
done <"$counters"
for efa_device in $(efa_in_sysfs); do
  device="$sysfs/class/infiniband/$efa_device"
  for port in "$device"/ports/*; do
    [ -d "$port/hw_counters" ] || continue
    for name in rx_drops rdma_read_wr_err rdma_write_wr_err retrans_timeout_events \
      unresponsive_remote_events impaired_remote_conn_events; do
      [ -r "$port/hw_counters/$name" ] || continue
      key="${device##*/}/${port##*/}/$name"
      now_value=""
      { read -r now_value <"$port/hw_counters/$name"; } 2>/dev/null
      [[ "$now_value" =~ ^[0-9]+$ ]] || continue
      printf '%s %s\n' "$key" "$now_value" >>"$counters.new"
      before="${counted[$key]:-}"
      if [ -n "$before" ] && [ "$now_value" -gt "$before" ]; then
        faults+=("efa-errors	$key +$((now_value - before))")
      fi
    done
  done
done
mv "$counters.new" "$counters"

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  [ "${#faults[@]}" -eq 0 ] || printf '%s\n' "${faults[@]}"
fi
