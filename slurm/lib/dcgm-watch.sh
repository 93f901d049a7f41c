#!/bin/bash
# DCGM's health watches for fmctl's node agent on EKS (issue 33): the agent's image (python)
# has no dcgmi, so this runs in DCGM's own image in a container of the agent's pod, a client
# of the node's one DCGM host engine at HOST (templates/kubernetes/dcgm: NVIDIA supports one
# engine a node, NVIDIA/DCGM#108). It waits for the engine, turns every health watch on
# (`dcgmi health -s a`) and each INTERVAL writes their answer (`dcgmi health -c -j`,
# NVIDIA/DCGM dcgmi/Health.cpp) to REPORT, whole (a new file moved into place), where
# health-detect.sh reads it. An answer dcgmi could not give is not written: the report grows
# old and the agent stops reading it. A restarted engine forgets its watches: they are
# turned on again. Each pass touches ./alive, which the container's liveness probe reads.
# Every dcgmi call names the engine (--host): dcgmi never starts one of its own then.
#
# Usage: dcgm-watch.sh REPORT INTERVAL HOST
set -u
report="$1"
interval="$2"
host="$3"
trap 'exit 0' TERM INT

watch_all() { timeout 30 dcgmi health -s a --host "$host" >/dev/null 2>&1; }

# The engine answers once it has started and found the GPUs (seconds, or the time its pod
# takes to start on a new node).
until timeout 5 dcgmi discovery -l --host "$host" >/dev/null 2>&1; do
  : >alive
  sleep 2
done
watch_all || true

while :; do
  : >alive # each pass, in its working folder: the container's liveness probe reads it
  if answer=$(timeout 30 dcgmi health -c -j --host "$host" 2>&1); then
    printf '%s\n' "$answer" >"$report.new" && mv -f "$report.new" "$report"
  elif [[ "$answer" == *"Health watches not enabled"* ]]; then
    watch_all || true
  fi
  sleep "$interval" &
  wait $!
done
