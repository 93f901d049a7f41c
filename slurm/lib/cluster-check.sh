#!/bin/bash
# `fmctl check NAME` on a Slurm cluster: run on the head node as root (fmctl sends it through
# SSM Run Command), in two steps, fmctl judging the nodes in between:
#   cluster-check.sh nodes [--include-busy] [--timeout SECONDS] POOL...
#     node-check.sh on each partition's idle nodes, one task per node in an exclusive
#     allocation (srun --exclusive: never beside a user's job; --immediate: give up rather
#     than queue behind one). efa-devices.sh and node-check.sh travel on srun's stdin
#     (--input=all), so the nodes run this fmctl's copy.
#   cluster-check.sh nccl [--timeout SECONDS] [--shared DIR] POOL:GPUS:COUNT:HOSTLIST...
#     nccl-tests.sbatch across the given nodes of each pool (those that passed; HOSTLIST in
#     Slurm's compressed form, e.g. train-st-p5-[1-4,9]). The job's log is written by its
#     first node into DIR, which this node must see too: ParallelCluster NFS-shares /home
#     (the default, /home/fmctl-check); PCS shares no /home, so fmctl names the cluster's
#     FSx mount there.
# What it prints is what `fmctl check` reads:
#   ==> fmctl-check NODE FILE <==          node-check.sh's files, node by node
#   ==> fmctl-check-nccl POOL <==          the all_reduce_perf log of the pool
#   ==> fmctl-check-skipped NODE POOL <==  followed by one line: why it was left out
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# SSM Run Command's shell reads no profile: Slurm's commands are where the ParallelCluster
# cookbook installs them (or PCS's installer: lib/slurm-prefix.sh), not on its PATH.
# shellcheck source=slurm-prefix.sh
. "$here/slurm-prefix.sh"
node_check="${FMCTL_NODE_CHECK:-$here/node-check.sh}"
nccl_job="${FMCTL_NCCL_JOB:-$here/../jobs/nccl-tests.sbatch}"
# The NCCL job's log is written by the job's first node: a folder every node sees.
shared="${FMCTL_CHECK_SHARED:-/home/fmctl-check}"
usage="usage: cluster-check.sh nodes|nccl [--include-busy] [--timeout SECONDS] [--shared DIR] POOL[:GPUS:COUNT:HOSTS]..."
step="${1:?$usage}"
shift
include_busy=0 timeout=1800
pools=()
while [ $# -gt 0 ]; do
  case "$1" in
    --include-busy) include_busy=1 ;;
    --timeout) timeout="${2:?--timeout needs seconds}"; shift ;;
    --shared) shared="${2:?--shared needs a folder}"; shift ;;
    -*) echo "cluster-check.sh: unknown flag $1" >&2; exit 2 ;;
    *) pools+=("$1") ;;
  esac
  shift
done
[ ${#pools[@]} -gt 0 ] || { echo "$usage" >&2; exit 2; }
minutes=$(( (timeout + 59) / 60 ))

skip() { printf '==> fmctl-check-skipped %s %s <==\n%s\n' "$1" "$2" "$3"; }

check_nodes() {
  local pool="$1" node state list count out status
  local idle=()
  # Every node of the partition with its state; idle ones are checked.
  while read -r node state; do
    [ -n "$node" ] || continue
    case "$state" in
      idle) idle+=("$node") ;;
      alloc* | mix*)
        if [ "$include_busy" = 1 ]; then idle+=("$node"); else
          skip "$node" "$pool" "busy: a job holds it (--include-busy waits for it)"
        fi ;;
      *) skip "$node" "$pool" "state $state" ;;
    esac
  done < <(sinfo --noheader --Node --partition="$pool" --format='%N %t' | sort -u)
  [ ${#idle[@]} -gt 0 ] || return 0
  list=$(IFS=,; echo "${idle[*]}")
  count=${#idle[@]}
  # srun --label prefixes each line with its task number: one task per node, so lines are
  # grouped back by task (tasks' output may interleave line by line).
  out=$(mktemp)
  srun --label --partition="$pool" --nodelist="$list" --nodes="$count" --ntasks-per-node=1 \
    --exclusive --immediate="$timeout" --time="$minutes" --input=all \
    bash -s -- - "$pool" < <(cat "$here/efa-devices.sh" "$node_check") > "$out" 2>&1
  status=$?
  awk '{ task = $1; sub(/^ *[0-9]+: /, ""); lines[task] = lines[task] $0 "\n" }
       END { for (task in lines) printf "%s", lines[task] }' "$out"
  if [ $status -ne 0 ] && ! grep -q '==> fmctl-check ' "$out"; then
    for node in "${idle[@]}"; do
      skip "$node" "$pool" "srun failed ($status): $(tail -n 1 "$out")"
    done
  fi
  rm -f "$out"
}

run_nccl() {
  local pool="$1" gpus="$2" count="$3" list="$4" log
  # World-writable and sticky, as /tmp: the job runs as root here, but a user's own check
  # may share the folder.
  install -d -m 1777 "$shared"
  log="$shared/nccl-$pool-$$.out"
  # One rank per GPU (a pool without GPUs, one per node, asks for no GPU gres).
  local per=(--ntasks-per-node="$gpus" --gpus-per-node="$gpus")
  [ "$gpus" -gt 0 ] || per=(--ntasks-per-node=1)
  # --deadline: Slurm drops the job rather than let it wait past the check's time to
  # start. Slurm cancels a job whose start plus its time limit would pass the deadline
  # (sbatch(1), --deadline; a real slurmctld cancelled one asked for --time equal to the
  # whole wait), so the deadline is the wait and then the run.
  sbatch --wait --partition="$pool" --nodelist="$list" --nodes="$count" "${per[@]}" \
    --exclusive --time="$minutes" --deadline="now+$((timeout + minutes * 60))" \
    --output="$log" "$nccl_job" > /dev/null 2>&1
  printf '==> fmctl-check-nccl %s <==\n' "$pool"
  cat "$log" 2>/dev/null ||
    echo "error: the NCCL job left no log at $log (is $shared shared with the compute nodes?)"
  rm -f "$log"
}

for entry in "${pools[@]}"; do
  case "$step" in
    nodes) check_nodes "$entry" ;;
    nccl)
      IFS=: read -r pool gpus count list <<< "$entry"
      [ -n "${list:-}" ] || { echo "$usage" >&2; exit 2; }
      run_nccl "$pool" "$gpus" "$count" "$list" ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
exit 0
