#!/bin/bash
# Take Slurm nodes out of service before a change ends them (a pool scaled in or removed):
# run on the login or head node as root, through SSM Run Command, by `fmctl up`.
#   drain-nodes.sh NODELIST --timeout SECONDS [--jobs wait|requeue] [--reason TEXT]
# NODELIST is in Slurm's compressed form (train-[3-4]). The nodes are drained (no new job
# lands on them; what runs goes on: scontrol(1), State=DRAIN), then, with --jobs requeue,
# their running jobs are put back in the queue (scontrol requeue: they start again on other
# nodes), and the script waits until no job runs on them any more, or the timeout.
# What it prints is what fmctl reads:
#   drained NODELIST
#   requeued JOBID            (--jobs requeue; one a line)
#   waiting N JOB...          (while jobs run there; at most once a minute)
#   done                      exit 0: nothing runs on the nodes
#   running JOBID USER NAME   exit 3: the timeout passed with these still there
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=slurm-prefix.sh
. "$here/slurm-prefix.sh"
usage="usage: drain-nodes.sh NODELIST --timeout SECONDS [--jobs wait|requeue] [--reason TEXT]"
nodes="${1:?$usage}"
shift
timeout="" jobs="wait" reason="fmctl: capacity taken away by fmctl up"
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) timeout="${2:?--timeout needs seconds}"; shift ;;
    --jobs) jobs="${2:?--jobs needs wait or requeue}"; shift ;;
    --reason) reason="${2:?--reason needs a text}"; shift ;;
    *) echo "drain-nodes.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$timeout" ] || { echo "$usage" >&2; exit 2; }
case "$jobs" in wait | requeue) ;; *) echo "$usage" >&2; exit 2 ;; esac

# Jobs that hold the nodes: running, starting or ending (squeue(1) states R, CF, CG).
holding() { squeue --noheader --nodelist="$nodes" --states=R,CF,CG --format='%A %u %j' | sort -u; }

if ! scontrol update NodeName="$nodes" State=DRAIN Reason="$reason"; then
  echo "drain-nodes.sh: scontrol could not drain $nodes" >&2
  exit 1
fi
echo "drained $nodes"
if [ "$jobs" = requeue ]; then
  # A requeued batch job starts again elsewhere (a job that cannot be requeued, such as an
  # interactive one, is left to finish: scontrol says why, and it is waited for).
  while read -r job _; do
    [ -n "$job" ] || continue
    if scontrol requeue "$job"; then echo "requeued $job"; fi
  done < <(holding)
fi
deadline=$(( $(date +%s) + timeout ))
said=0
while :; do
  running="$(holding)"
  if [ -z "$running" ]; then
    echo "done"
    exit 0
  fi
  now=$(date +%s)
  if [ "$now" -ge "$deadline" ]; then
    printf '%s\n' "$running" | sed 's/^/running /'
    exit 3
  fi
  if [ $((now - said)) -ge 60 ]; then
    echo "waiting $(printf '%s\n' "$running" | wc -l) $(printf '%s\n' "$running" | cut -d' ' -f1 | paste -sd' ')"
    said=$now
  fi
  sleep 5
done
