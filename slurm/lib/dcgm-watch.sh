#!/bin/bash
# DCGM's health watches for fmctl's node agent on EKS (issue 33): the agent's image (python)
# has no dcgmi, so this runs in DCGM's own image in a container of the agent's pod. It starts
# a host engine of its own, in the foreground (`nv-hostengine -n`, as NVIDIA's GPU operator
# runs its nvidia-dcgm DaemonSet), turns every health watch on (`dcgmi health -s a`) and each
# INTERVAL writes their answer (`dcgmi health -c -j`, NVIDIA/DCGM dcgmi/Health.cpp) to REPORT,
# whole (a new file moved into place), where health-detect.sh reads it. An answer dcgmi could
# not give is not written: the report grows old and the agent stops reading it. When the host
# engine ends, so does this (the kubelet restarts the container). Each pass touches ./alive,
# which the container's liveness probe reads.
#
# Usage: dcgm-watch.sh REPORT INTERVAL
set -u
report="$1"
interval="$2"

nv-hostengine -n &
engine=$!
trap 'kill "$engine" 2>/dev/null' EXIT
trap 'exit 0' TERM INT

# The engine answers once it has found the GPUs (seconds; up to 30 on a slow boot).
for _ in $(seq 30); do
  timeout 5 dcgmi discovery -l >/dev/null 2>&1 && break
  kill -0 "$engine" 2>/dev/null || break
  sleep 1
done
timeout 30 dcgmi health -s a >/dev/null 2>&1 || true

while kill -0 "$engine" 2>/dev/null; do
  : >alive # each pass, in its working folder: the container's liveness probe reads it
  if answer=$(timeout 30 dcgmi health -c -j 2>&1); then
    printf '%s\n' "$answer" >"$report.new" && mv -f "$report.new" "$report"
  elif [[ "$answer" == *"Health watches not enabled"* ]]; then
    # A restarted engine forgets its watches.
    timeout 30 dcgmi health -s a >/dev/null 2>&1 || true
  fi
  sleep "$interval" &
  wait $!
done
echo "dcgm-watch: nv-hostengine has ended" >&2
exit 1
