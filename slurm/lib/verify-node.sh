#!/bin/bash
# fmctl's verify gate (issue 33): may this GPU node take work? Run by on-node-configured.sh on
# every new or replaced ParallelCluster compute node, before slurmd starts: ParallelCluster
# runs OnNodeConfigured (`fetch_and_run -postinstall`) and only then the finalize recipe that
# starts slurmd (aws-parallelcluster cli/src/pcluster/resources/compute_node/user_data.sh at
# 451cc53, lines 152-153; cookbook finalize_compute.rb at f75d84c). A node that fails here
# never registers: its bootstrap fails and clustermgtd launches another instance in its place,
# at most protected_failure_count (10) times in a row before it stops launching for the
# queue (aws-parallelcluster-node clustermgtd.py at 2e8f9a8), so a bad AMI cannot loop
# forever.
# Checks, each against what the node must show (/etc/fmctl/node.env):
#   - every GPU listed by nvidia-smi, none with uncorrectable ECC errors since the driver
#     loaded (ecc.errors.uncorrected.volatile.total), each with as many NVLinks up as the
#     node's best GPU (nvidia-smi nvlink -s), and no row remap failed or still pending
#     (nvidia-smi -q -d ROW_REMAPPER: the boot reset the GPUs, which applies a pending one);
#   - every EFA device (efa-devices.sh: the prolog's counting rule), each passing traffic
#     to itself (fi_pingpong over the device, as the EFA installer's efa_test.sh runs it;
#     health.verify.efaLoopback, on unless told);
#   - DCGM's diagnostic at the spec's level (health.verify.dcgmLevel, 2 unless told; 0 skips
#     it): any test with status Fail fails the node. Without DCGM or its host engine the
#     diagnostic is skipped and said so: that is the image's fault, not the node's;
#   - then, once it passes, the node is held (reserved) for the 2-node NCCL pair that runs
#     after slurmd starts (lib/verify-pair.sh, health.verify.ncclPair).
# Prints one line per check ("ok ..." / "FAIL ..." / "skip ..."), records them in
# /var/lib/fmctl/health/verify.txt, exits 0 when the node passes and 1 when it does not.
# A pass is also recorded for this boot (/run is a tmpfs: a reboot forgets it).
#
# On Kubernetes (FMCTL_VERIFY_SCHEDULER=kubernetes) it runs in the containers of the Job
# fmctl's verify controller starts on a tainted node (templates/kubernetes/health-verify):
# the settings come from the container's environment (FMCTL_NODE_ENV=/dev/null), the
# report goes to FMCTL_HEALTH_DIR, and there is no boot record and no Slurm hold: the exit
# status is the verdict, and the controller lifts the node's startup taint on a pass.
#
# --once-per-boot: as fmctl-verify.service runs it at every boot, before slurmd (the unit
# on-node-configured.sh installs): a node that passed since it booted (OnNodeConfigured on
# the first boot, just before the finalize recipe starts slurmd) is not checked twice; after
# a reboot (health.repair: reboot, or a person's `scontrol reboot`) it is, and slurmd, which
# requires the unit, starts only if the node passes. One that fails never answers Slurm
# again: Slurm marks it DOWN at ResumeTimeout, "reboot timed out" (scontrol(1), reboot), and
# clustermgtd replaces a DOWN static node.
set -uo pipefail

passed=/run/fmctl/verified
if [ "${1:-}" = --once-per-boot ] && [ -e "$passed" ]; then
  echo "ok: passed already since this boot ($(cat "$passed"))"
  exit 0
fi

lib="$(dirname "${BASH_SOURCE[0]:-$0}")"
env_file="${FMCTL_NODE_ENV:-/etc/fmctl/node.env}"
[ -r "$env_file" ] || { echo "skip: no $env_file, not one of fmctl's GPU nodes"; exit 0; }
# shellcheck source=/dev/null
. "$env_file"
if [ -r "$lib/../health.env" ]; then
  # shellcheck source=/dev/null
  . "$lib/../health.env"
fi
deadline="${FMCTL_HEALTH_TOOL_TIMEOUT:-60}"
level="${FMCTL_HEALTH_VERIFY_DCGM_LEVEL:-2}"
dir="${FMCTL_HEALTH_DIR:-/var/lib/fmctl/health}"
on_slurm=true
[ "${FMCTL_VERIFY_SCHEDULER:-slurm}" != kubernetes ] || on_slurm=false
install -d -m 0755 "$dir"
report="$dir/verify.txt"
: >"$report"
failed=0

say() {  # ok|FAIL|skip TEXT
  printf '%s %s\n' "$1" "$2" | tee -a "$report"
  [ "$1" != FAIL ] || failed=1
}

want_gpus="${FMCTL_EXPECTED_GPUS:-0}"
if [ "$want_gpus" -gt 0 ]; then
  smi=$(timeout "$deadline" nvidia-smi --query-gpu=index,ecc.errors.uncorrected.volatile.total \
    --format=csv,noheader,nounits 2>&1)
  gpus=$(printf '%s\n' "$smi" | grep -c '^[[:space:]]*[0-9][0-9]*[[:space:]]*,')
  if [ "$gpus" -ge "$want_gpus" ]; then
    say ok "gpus: $gpus of $want_gpus"
  else
    say FAIL "gpus: $gpus of $want_gpus ($(printf '%s\n' "$smi" | grep -v '^[[:space:]]*[0-9]' | head -n 1))"
  fi
  # "[N/A]" where ECC is off: no errors to count.
  ecc=$(printf '%s\n' "$smi" | awk -F', *' '$2 ~ /^[0-9]+$/ && $2 > 0 {printf "%sGPU %s: %s", sep, $1, $2; sep = ", "}')
  if [ -n "$ecc" ]; then
    say FAIL "ecc: uncorrectable errors ($ecc)"
  else
    say ok "ecc: no uncorrectable errors"
  fi
  # Every GPU with as many NVLinks up (reporting a speed) as the node's best GPU: the agent's
  # rule (health-agent.sh), here without a past to compare with. No NVLink: no check.
  # shellcheck source=nvlinks.sh
  . "$lib/nvlinks.sh"
  links=$(timeout "$deadline" nvidia-smi nvlink -s 2>/dev/null | fmctl_nvlinks)
  if [ -n "$links" ]; then
    best=$(printf '%s\n' "$links" | fmctl_nvlinks_best)
    short=$(printf '%s\n' "$links" | fmctl_nvlinks_short "$best")
    if [ -n "$short" ]; then
      say FAIL "nvlink: $short up"
    else
      say ok "nvlink: $(printf '%s\n' "$links" | wc -l) GPUs with $best links up each"
    fi
  fi
  # Row remapping: a failed remap is NVIDIA's RMA criterion; one still pending after the
  # boot's reset did not take (the health agent would only reboot the node again).
  # shellcheck source=row-remap.sh
  . "$lib/row-remap.sh"
  remaps=$(timeout "$deadline" nvidia-smi -q -d ROW_REMAPPER 2>/dev/null | fmctl_row_remaps)
  if [ -n "$remaps" ]; then
    say FAIL "row-remap: $(printf '%s\n' "$remaps" | awk '{printf "%sGPU %s %s", sep, $1, $2; sep = ", "}')"
  else
    say ok "row-remap: no remap failed or pending"
  fi
fi

want_efa="${FMCTL_EXPECTED_EFA:-0}"
if [ "${FMCTL_EFA_ENABLED:-false}" = true ] && [ "$want_efa" -gt 0 ]; then
  # shellcheck source=efa-devices.sh
  . "$lib/efa-devices.sh"
  domains=$(timeout "$deadline" "$(fmctl_fi_info_path)" -p efa -t FI_EP_RDM 2>/dev/null |
    fmctl_efa_rdm_domains)
  efa=$(printf '%s\n' "$domains" | grep -c .)
  if [ "$efa" -ge "$want_efa" ]; then
    say ok "efa: $efa of $want_efa devices"
  else
    say FAIL "efa: $efa of $want_efa devices"
  fi
  # Traffic through every device, on this node alone: the EFA installer's efa_test.sh (a
  # fi_pingpong server, half a second, a client to localhost given 8 s), device by device
  # (-d DOMAIN), one at a time (each pair takes the same port).
  if [ "${FMCTL_HEALTH_VERIFY_EFA_LOOPBACK:-true}" = true ] && [ "$efa" -gt 0 ]; then
    pingpong=fi_pingpong
    [ ! -x /opt/amazon/efa/bin/fi_pingpong ] || pingpong=/opt/amazon/efa/bin/fi_pingpong
    silent=()
    while IFS= read -r domain; do
      FI_EFA_ENABLE_SHM_TRANSFER=0 timeout 15 "$pingpong" -e rdm -p efa -d "$domain" \
        >/dev/null 2>&1 &
      server=$!
      sleep 0.5
      FI_EFA_ENABLE_SHM_TRANSFER=0 timeout 8 "$pingpong" -e rdm -p efa -d "$domain" localhost \
        >/dev/null 2>&1 || silent+=("$domain")
      kill "$server" 2>/dev/null
      wait "$server" 2>/dev/null
    done <<<"$domains"
    if [ "${#silent[@]}" -eq 0 ]; then
      say ok "efa-loopback: $efa of $efa devices passed traffic"
    else
      say FAIL "efa-loopback: ${#silent[@]} of $efa devices passed no traffic (${silent[*]})"
    fi
  fi
fi

if [ "$want_gpus" -gt 0 ] && [ "$level" -gt 0 ]; then
  if ! command -v dcgmi >/dev/null 2>&1; then
    say skip "dcgm: dcgmi is not installed on this image"
  else
    # How long each level normally lasts (dcgmi-diag(1): 1 seconds, 2 about two minutes,
    # 3 about 15; 4 "extended", no figure given): twice that, and 4 hours for level 4.
    default_deadline=1800
    [ "$level" -lt 4 ] || default_deadline=14400
    diag_deadline="${FMCTL_HEALTH_VERIFY_DCGM_TIMEOUT:-$default_deadline}"
    engine=()
    if [ -n "${FMCTL_DCGM_HOST:-}" ]; then
      # The node's one host engine (Kubernetes: templates/kubernetes/dcgm), named: dcgmi then
      # never starts an engine of its own beside it (NVIDIA/DCGM dcgmi/Diag.cpp starts an
      # embedded one only when no host was given). Its pod may still be starting on a new
      # node: waited for, up to FMCTL_DCGM_WAIT seconds.
      engine=(--host "$FMCTL_DCGM_HOST")
      waited=0
      until timeout 5 dcgmi discovery -l "${engine[@]}" >/dev/null 2>&1 ||
        [ "$waited" -ge "${FMCTL_DCGM_WAIT:-300}" ]; do
        sleep 2
        waited=$((waited + 2))
      done
    fi
    diag=$(timeout "$diag_deadline" dcgmi diag -r "$level" -j "${engine[@]}" 2>&1)
    diag_status=$?
    if [ -z "${FMCTL_DCGM_HOST:-}" ] && [[ "$diag" == *"Unable to connect to host engine"* ]] &&
      command -v nv-hostengine >/dev/null 2>&1; then
      # No host engine yet this early in the boot. The node's own, where it has one
      # (nvidia-dcgm.service, DCGM's package's unit): started now, it is the one engine the
      # exporter and the agent use later; a bare nv-hostengine would hold its port and leave
      # the service failing beside it. Else one of the gate's own (it daemonizes).
      if systemctl cat nvidia-dcgm.service >/dev/null 2>&1; then
        timeout 60 systemctl start nvidia-dcgm.service >/dev/null 2>&1 || true
        for _ in $(seq 15); do
          timeout 5 dcgmi discovery -l >/dev/null 2>&1 && break
          sleep 1
        done
      else
        nv-hostengine >/dev/null 2>&1 || true
      fi
      diag=$(timeout "$diag_deadline" dcgmi diag -r "$level" -j 2>&1)
      diag_status=$?
    fi
    if [ "$diag_status" -eq 124 ]; then
      # A diagnostic that does not end is a GPU that does not answer, not a pass.
      say FAIL "dcgm: level $level diagnostic did not finish in ${diag_deadline} s"
    elif [[ "$diag" != *"{"* ]]; then
      say skip "dcgm: no diagnostic ($(printf '%s\n' "$diag" | tail -n 1))"
    else
      # DCGM 3 and 4 both give every test's results a "status" (Pass, Skip, Warn, Fail).
      fails=$(printf '%s\n' "$diag" | grep -c '"status": *"Fail"')
      if [ "$fails" -gt 0 ]; then
        say FAIL "dcgm: level $level diagnostic, $fails failed results"
      else
        say ok "dcgm: level $level diagnostic passed"
      fi
    fi
  fi
fi

if [ "$failed" -ne 0 ]; then
  [ "$on_slurm" = true ] || exit 1
  logger -t fmctl-verify -- "$(hostname -s) failed the verify gate: $(grep '^FAIL' "$report" | tr '\n' ';')" \
    2>/dev/null || true
  exit 1
fi
[ "$on_slurm" = true ] || exit 0
install -d -m 0755 "${passed%/*}"
date -u +%Y-%m-%dT%H:%M:%SZ >"$passed"
# The gate's last check needs Slurm: a 2-node NCCL all-reduce with a healthy peer
# (lib/verify-pair.sh, health.verify.ncclPair). Here the node is only held for it (reserved
# to root before slurmd starts, so no job lands on it); fmctl-verify-pair.service runs the
# pair once slurmd does, and returns the node or drains it.
"$lib/verify-pair.sh" --hold || true
exit 0
