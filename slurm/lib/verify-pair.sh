#!/bin/bash
# fmctl's verify gate, its last check (issue 33): a new or replaced GPU node takes work only
# once a 2-node NCCL all-reduce with a healthy peer of its partition reaches the pool's
# floor (health.env's FMCTL_NCCL_PAIR_FLOORS, from provisioner/catalog/nccl_baselines.py:
# 85% of the published 2-node measurement, else 70% of EFA's line rate, as `fmctl check`
# judges a pool). It needs Slurm to run the pair, so it runs in two steps:
#
#   verify-pair.sh --hold   before slurmd starts, once verify-node.sh's own checks passed:
#                           reserve the node to root (a reservation fmctl-verify-NODE), so
#                           that when it registers no user job lands on it;
#   verify-pair.sh          once slurmd runs (fmctl-verify-pair.service, after slurmd): wait
#                           for the node to register, add an idle healthy peer of its
#                           partition to the reservation, run all_reduce_perf on the two,
#                           give the peer back; below the floor, once more with a second peer
#                           (to tell a bad node from a bad peer);
#   verify-pair.sh --retry  from the health agent (every run, while a node is held after a
#                           slow pair with its one idle peer): once another peer of the
#                           partition is idle, start fmctl-verify-pair.service again,
#                           without waiting; that run pairs with the new peer only.
#
# Why a reservation and not a drain: ParallelCluster's clustermgtd takes a drained static node
# for an unhealthy one and replaces it (aws-parallelcluster-node slurm_resources.py
# is_state_healthy at 2e8f9a8); a reserved idle node is healthy to it. The compute node can
# ask the controller: root is Slurm's administrator, and munge runs before OnNodeConfigured
# (the cookbook's config_compute.rb: setup_munge_compute_node at f75d84c).
#
# Outcomes, each a line in /var/lib/fmctl/health/verify.txt ("ok"/"FAIL"/"skip"):
#   pass with either peer        the reservation is deleted: the node takes work;
#   fail with two peers          the node is drained ("fmctl-health: nccl-pair ... -> replace"):
#                                ParallelCluster's clustermgtd replaces a drained static node;
#   fail with the one idle peer  neither can be told bad: the node stays held (no work), FAIL,
#                                the peer and its figure kept (pair-first); the run again
#                                with another peer (--retry) then decides as with two;
#   no idle peer, no nccl-tests  said so ("skip"), and the node takes work: the pair is a gate
#   on the image or the pool     on the node, not on the pool's size or the image's contents.
# Exit status: 0, but 1 when the node failed (systemd then shows the unit failed).
set -uo pipefail

lib="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
env_file="${FMCTL_NODE_ENV:-/etc/fmctl/node.env}"
[ -r "$env_file" ] || exit 0
# shellcheck source=/dev/null
. "$env_file"
if [ -r "$lib/../health.env" ]; then
  # shellcheck source=/dev/null
  . "$lib/../health.env"
fi
# shellcheck source=slurm-prefix.sh
. "$lib/slurm-prefix.sh"
deadline="${FMCTL_HEALTH_TOOL_TIMEOUT:-60}"
dir=/var/lib/fmctl/health
install -d -m 0755 "$dir"
report="$dir/verify.txt"
# The one peer a slow pair was run with while no other was idle: "PEER GBPS" (or "none").
first_file="$dir/pair-first"
# This boot's pair drained the node (below the floor with two peers): on PCS the nodeReady
# stage then fails, and PCS terminates the node (pcs-node-ready.sh).
drained_file="$dir/pair-drained"

say() {  # ok|FAIL|skip TEXT
  printf '%s %s\n' "$1" "$2" | tee -a "$report"
}

scontrol() { timeout "$deadline" "$slurm/bin/scontrol" "$@"; }

# This node's Slurm name, by its NodeHostname (ParallelCluster's names are not the
# instance's hostname; its resume program sets NodeHostname before the instance boots).
node="$(timeout "$deadline" "$slurm/bin/sinfo" -h -N -o '%N %n' 2>/dev/null |
  awk -v h="$(hostname -s)" '$2 == h {print $1; exit}')"
[ -n "$node" ] || node="$(hostname -s)"
resv="fmctl-verify-$node"

# The partition (pool) this node serves, and its floor: PARTITION:GBPS:BYTES.
show="$(scontrol show node -o "$node" 2>/dev/null)"
partition="$(printf '%s\n' "$show" | tr ' ' '\n' | sed -n 's/^Partitions=//p' | cut -d, -f1)"
floor="" bytes=""
for entry in ${FMCTL_NCCL_PAIR_FLOORS:-}; do
  if [ "${entry%%:*}" = "$partition" ]; then
    rest="${entry#*:}"
    floor="${rest%%:*}"
    bytes="${rest#*:}"
  fi
done

held() { scontrol show reservation "$resv" >/dev/null 2>&1; }

release() {  # give the node to its partition's jobs
  scontrol delete ReservationName="$resv" >/dev/null 2>&1 || true
}

if [ "${1:-}" = --hold ]; then
  rm -f "$first_file" "$drained_file"  # a new boot: its pair starts afresh
  if [ "${FMCTL_HEALTH_VERIFY_NCCL_PAIR:-true}" != true ]; then
    exit 0
  fi
  if [ -z "$floor" ]; then
    say skip "nccl-pair: no pair floor for partition ${partition:-?} (a pool of one node, or no EFA)"
    exit 0
  fi
  if held; then
    say ok "nccl-pair: $node held for its pair (reservation $resv, from before)"
    exit 0
  fi
  # Users=root: no one's jobs but the pair's; IGNORE_JOBS: made even if the controller still
  # counts a job of the instance this one replaces.
  out="$(scontrol create ReservationName="$resv" Nodes="$node" StartTime=now \
    Duration=UNLIMITED Users=root Flags=IGNORE_JOBS 2>&1)"
  if held; then
    say ok "nccl-pair: $node held for its pair (reservation $resv)"
  else
    say skip "nccl-pair: could not hold $node for its pair: ${out:-no answer}"
  fi
  exit 0
fi

# Idle peers of the partition: up, no job, in no reservation ("idle", not "reserved",
# "drained", "idle~" powered down, ...), this node and the peer of an earlier slow pair
# left out; a fixed order.
idle_peers() {  # SKIP
  "$slurm/bin/sinfo" -h -N -p "$partition" -o '%N %T' 2>/dev/null |
    awk -v me="$node" -v skip="$1" '$1 != me && $1 != skip && $2 == "idle" {print $1}' | sort -u
}

if [ "${1:-}" = --retry ]; then
  if [ ! -s "$first_file" ] || ! held; then
    rm -f "$first_file"  # returned or drained since (a person's `scontrol delete`, a reboot)
    exit 0
  fi
  read -r suspect _ <"$first_file"
  [ -n "$(idle_peers "$suspect")" ] || exit 0
  if systemctl --no-block start fmctl-verify-pair.service 2>/dev/null; then
    logger -t fmctl-verify -- "$node held after a slow pair with $suspect, the one idle peer: another is idle now, pairing again" \
      2>/dev/null || true
  fi
  exit 0
fi

held || exit 0  # nothing held: this boot has no pair to run

# Registered and idle: slurmd answers (ReturnToService=1 returns a node that registers).
joined=""
for _ in $(seq 1 "${FMCTL_NCCL_PAIR_JOIN_TIMEOUT:-300}"); do
  state="$(scontrol show node -o "$node" 2>/dev/null | tr ' ' '\n' | sed -n 's/^State=//p')"
  case "$state" in
    IDLE* | MIXED* | ALLOCATED*) joined=yes; break ;;
  esac
  sleep 1
done
if [ -z "$joined" ]; then
  say skip "nccl-pair: $node did not register (state ${state:-unknown}): released, the agent judges it"
  release
  exit 0
fi

tests_dir="${NCCL_TESTS_DIR:-/opt/nccl-tests/build}"
if [ ! -x "$tests_dir/all_reduce_perf" ]; then
  say skip "nccl-pair: no nccl-tests on this image ($tests_dir/all_reduce_perf): released"
  release
  exit 0
fi

gpus="${FMCTL_EXPECTED_GPUS:-8}"
# shellcheck source=nccl-env.sh
[ ! -r "$lib/nccl-env.sh" ] || . "$lib/nccl-env.sh"

# One run with PEER: the out-of-place bus bandwidth all_reduce_perf prints at $bytes (its
# table: size, count, type, redop, root, time, algbw, busbw, #wrong, ...), or nothing.
# One task a node driving its GPUs (-g): the same ranks as one a GPU, no per-GPU binding.
pair() {  # PEER
  scontrol update ReservationName="$resv" Nodes="$node,$1" >/dev/null 2>&1 || return 2
  out="$(timeout "${FMCTL_NCCL_PAIR_TIMEOUT:-600}" "$slurm/bin/srun" --reservation="$resv" \
    --partition="$partition" --nodes=2 --nodelist="$node,$1" --ntasks-per-node=1 --exclusive \
    --time=15 --job-name=fmctl-verify-pair --mpi="${FMCTL_NCCL_PAIR_MPI:-pmix}" \
    "$tests_dir/all_reduce_perf" -b "$bytes" -e "$bytes" -f 2 -g "$gpus" -c 1 -n 20 2>&1)"
  scontrol update ReservationName="$resv" Nodes="$node" >/dev/null 2>&1 || true
  printf '%s\n' "$out" | awk -v b="$bytes" '$1 == b && $2 ~ /^[0-9]+$/ {print $8 + 0; exit}'
}

# A run again after a slow pair with the one idle peer: that pair counts as the first, and
# only the others are tried.
first="" first_bw=""
if [ -s "$first_file" ]; then
  read -r first first_bw <"$first_file"
  [ "$first_bw" != none ] || first_bw=""
fi
peers="$(idle_peers "$first")"
tried=0
for peer in $peers; do
  bw="$(pair "$peer")"
  status=$?
  [ "$status" -ne 2 ] || continue  # taken by a job meanwhile: the next one
  tried=$((tried + 1))
  if [ -n "$bw" ] && awk -v bw="$bw" -v f="$floor" 'BEGIN {exit !(bw >= f)}'; then
    if [ -n "$first" ]; then
      say ok "nccl-pair: ${bw} GB/s with $peer (floor ${floor} GB/s at ${bytes} B); with $first ${first_bw:-no result}: $first is the suspect"
      logger -t fmctl-verify -- "nccl pair of $node with $first gave ${first_bw:-no result} GB/s, with $peer ${bw}: $first looks slow" \
        2>/dev/null || true
    else
      say ok "nccl-pair: ${bw} GB/s with $peer (floor ${floor} GB/s at ${bytes} B)"
    fi
    rm -f "$first_file"
    release
    exit 0
  fi
  if [ -z "$first" ]; then
    first="$peer" first_bw="$bw"
    continue
  fi
  # Below the floor with two peers: this node.
  why="fmctl-health: nccl-pair ${bw:-no result} GB/s < ${floor} GB/s -> replace"
  say FAIL "nccl-pair: ${bw:-no result} GB/s with $peer, ${first_bw:-no result} with $first (floor ${floor} GB/s at ${bytes} B)"
  scontrol update NodeName="$node" State=DRAIN Reason="$why" >/dev/null 2>&1 ||
    say FAIL "nccl-pair: could not drain $node"
  printf '%s\n' "$why" >"$drained_file"
  rm -f "$first_file"
  release
  logger -t fmctl-verify -- "$node failed its nccl pair: $why" 2>/dev/null || true
  exit 1
done
if [ "$tried" -eq 1 ]; then
  # Below the floor with the one idle peer, and no second to tell which of the two is slow:
  # neither drained (a good node replaced for a bad peer would come back to the same peer),
  # the node kept out of work in its reservation until another peer is idle (--retry,
  # from the health agent) or a person returns it.
  say FAIL "nccl-pair: ${first_bw:-no result} GB/s with $first, the one idle peer (floor ${floor} GB/s at ${bytes} B): $node stays held until another peer is idle (the health agent pairs it again); \`scontrol delete ReservationName=$resv\` returns it"
  printf '%s %s\n' "$first" "${first_bw:-none}" >"$first_file"
  logger -t fmctl-verify -- "$node and $first gave ${first_bw:-no result} GB/s, below ${floor}: $node held in $resv" \
    2>/dev/null || true
  exit 1
fi
if [ -n "$first" ]; then
  exit 1  # run again, and still no other idle peer: held, as the earlier run said
fi
say skip "nccl-pair: no idle peer in partition $partition: released untested"
release
exit 0
