#!/bin/bash
# What `fmctl health NAME` reads on a Slurm cluster, run as root on the head node
# (ParallelCluster) or a login node (PCS) through SSM Run Command. Read-only. Prints:
#   == nodes
#   PARTITION|STATE|REASON-TIME|NODES|REASON    sinfo's groups: one line per partition,
#                                               state, reason and its time, so a thousand
#                                               healthy nodes are one line (Run Command
#                                               answers with 24,000 characters at most)
#   == held
#   NODE|COMMENT                                nodes whose health agent holds a fault it
#                                               did not act on (its repair budget was spent,
#                                               or someone else had taken the node out): the
#                                               agent keeps that in the node's Comment
#   == verifying
#   NODE                                        nodes the verify gate holds for their 2-node
#                                               NCCL pair (reservation fmctl-verify-NODE,
#                                               lib/verify-pair.sh)
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# SSM's shell reads no profile: slurm-prefix.sh puts Slurm's commands first on PATH
# (ParallelCluster's /opt/slurm, or PCS's prefix).
# shellcheck source=slurm-prefix.sh
. "$here/slurm-prefix.sh"
echo "== nodes"
# The reason last: a person's may hold any character.
sinfo -h -a -o '%P|%T|%H|%N|%E' || exit 1
echo "== held"
# `scontrol show node -o`: one line per node, "Key=Value" fields; a Comment runs to the next
# field, which starts a new capitalised Key=.
scontrol show node -o |
  sed -n 's/^NodeName=\([^ ]*\) .* Comment=\(fmctl-health: .*\)/\1|\2/p' |
  sed 's/ [A-Z][A-Za-z]*=.*$//'
echo "== verifying"
# ("No reservations in the system" when there are none.) A section the nodes' states do not
# depend on: a failed look leaves it empty, not the report failed.
{ scontrol show reservation -o 2>/dev/null || true; } |
  sed -n 's/^ReservationName=fmctl-verify-\([^ ]*\) .*/\1/p'
