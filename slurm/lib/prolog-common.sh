# Sourced by fmctl's Slurm prolog drop-ins (prolog.d/*), which slurmd runs as root with no
# PATH: what the node must show (/etc/fmctl/node.env, from on-node-start.sh), where Slurm is
# ($slurm: /opt/slurm on ParallelCluster, PCS's prefix there: lib/slurm-prefix.sh), this
# node's Slurm name ($node), and fmctl_fail, which drains the node with the reason.
# A node without node.env is not one of fmctl's GPU nodes: the sourcing prolog exits 0.
# shellcheck shell=bash
PATH=/usr/sbin:/usr/bin:/sbin:/bin
env_file=/etc/fmctl/node.env
[ -f "$env_file" ] || exit 0
# shellcheck source=/dev/null
. "$env_file"
lib=/opt/fmctl/slurm/lib
slurm=/opt/slurm
if [ -r "$lib/slurm-prefix.sh" ]; then
  # shellcheck source=slurm-prefix.sh
  . "$lib/slurm-prefix.sh"
fi
node="${SLURMD_NODENAME:-$(hostname -s)}"

# fmctl_fail REASON: say it (stderr, syslog), drain the node with it, fail the job. The
# reason stays on the node for `sinfo -R` and `scontrol show node` (slurmd's own is "Prolog
# error"); ParallelCluster's nohold_on_prolog_fail requeues the job elsewhere.
fmctl_fail() {
  local why="fmctl prolog: $*"
  echo "$why on $node" >&2
  logger -t fmctl-prolog -- "$why on $node (job ${SLURM_JOB_ID:-?})" 2>/dev/null || true
  timeout 10 "$slurm/bin/scontrol" update NodeName="$node" State=DRAIN Reason="$why" \
    >/dev/null 2>&1 || true
  exit 1
}
