#!/bin/bash
# Wind a pool down before its Capacity Block ends: run on the head or login node as root,
# through SSM Run Command, by fmctl's schedule at T-60 min and by the rule that hears EC2's
# Capacity Block expiration warning at T-40 (whichever comes first acts; the other finds
# the work done).
#   block-end.sh PARTITION END_EPOCH --block CR_ID [--signal NAME|none]
# What it does, with Slurm's own means (scontrol(1), scancel(1)):
# - a maintenance reservation over every node of the partition (PartitionName= with
#   Nodes=ALL), from now to the block's end (a duration in minutes: Slurm reads a date in the
#   controller's local time zone, a duration in none), with IGNORE_JOBS so that it can start
#   while jobs run. No job that is not in the reservation starts on those nodes from then on,
#   and a powered-down node is not resumed for one: nothing launches into the ending block.
#   Running jobs go on. The reservation ends with the block, so the next block's nodes are
#   free again with nothing for fmctl to undo.
# - the jobs running in the partition are sent the signal (USR1 by default; the batch shell
#   and every step: --full), once: only by the run that made the reservation, so that the
#   second run does not ask them to checkpoint again.
# What it prints is what fmctl and its tests read:
#   reserved NAME PARTITION MINUTES    the reservation made now
#   held NAME                          it was there already (an earlier run made it)
#   signalled JOBID SIGNAL             one a line
#   done
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=slurm-prefix.sh
. "$here/slurm-prefix.sh"
usage="usage: block-end.sh PARTITION END_EPOCH --block CR_ID [--signal NAME|none]"
partition="${1:?$usage}"
end="${2:?$usage}"
shift 2
block="" signal="USR1"
while [ $# -gt 0 ]; do
  case "$1" in
    --block) block="${2:?--block needs a reservation id}"; shift ;;
    --signal) signal="${2:?--signal needs a signal name or none}"; shift ;;
    *) echo "block-end.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case "$end" in '' | *[!0-9]*) echo "$usage" >&2; exit 2 ;; esac
[ -n "$block" ] || { echo "$usage" >&2; exit 2; }

name="fmctl-block-$partition"
if scontrol show reservation "$name" >/dev/null 2>&1; then
  echo "held $name"
  echo "done"
  exit 0
fi
minutes=$(( (end - $(date +%s) + 59) / 60 ))
[ "$minutes" -ge 1 ] || minutes=1
# (scontrol says "Reservation created: NAME" on stdout: what this script prints is its own.)
if ! scontrol create reservation ReservationName="$name" StartTime=now Duration="$minutes" \
    PartitionName="$partition" Nodes=ALL Users=root Flags=MAINT,IGNORE_JOBS >/dev/null; then
  echo "block-end.sh: scontrol could not reserve partition $partition ($block)" >&2
  exit 1
fi
echo "reserved $name $partition $minutes"
if [ "$signal" != none ]; then
  while read -r job; do
    [ -n "$job" ] || continue
    if scancel --signal="$signal" --full "$job"; then echo "signalled $job $signal"; fi
  done < <(squeue --noheader --partition="$partition" --states=R --format='%A' | sort -u)
fi
echo "done"
