#!/bin/bash
# Slurm prolog drop-in for UltraServer nodes (p6e-gb200): forms the job's multi-node NVLink
# domain. GPU memory is shared across instances only through NVIDIA IMEX, and the IMEX
# daemon on each node must list exactly the job's nodes: nodes_config.cfg, one IPv4 address
# per line (NVIDIA's IMEX guide; the ParallelCluster cookbook's nvidia-imex-nodes template;
# the NVIDIA DRA driver's compute-domain daemon writes the same file). ParallelCluster
# >= 3.14 installs nvidia-imex on its AMIs and enables it on GB200 compute nodes with a
# placeholder peer list (cookbook resources/nvidia_imex/partial/_nvidia_imex_common.rb);
# AWS PCS's "Configure UltraServer instances" has the same per-job prolog do the rest.
#
# Every node of a job is in one NVLink domain: fmctl makes one queue per UltraServer
# Capacity Block (one UltraServer), and a Slurm job runs in one partition.
#
# Runs as root from slurmd with no PATH (PrologFlags=Alloc: once per node, at allocation).
# The daemon not READY in time drains the node with the reason, so `sinfo -R` says the
# NVLink domain did not form (and `fmctl check` judges IMEX on every GPU node) instead of
# NCCL silently leaving NVLink.
set -uo pipefail

# node.env, $slurm, $node and fmctl_fail (a node without node.env exits 0 here).
# shellcheck source=../lib/prolog-common.sh
. /opt/fmctl/slurm/lib/prolog-common.sh || exit 0
[ "${FMCTL_IMEX:-false}" = true ] || exit 0
# Only a job that has its nodes to itself re-forms the domain: restarting nvidia-imex tears
# down the NVLink memory of every other job on the node (AWS PCS User Guide, "Configure
# UltraServer instances": its prolog exits unless SLURM_JOB_OVERSUBSCRIBE is NO or TOPO,
# the values slurmd gives an exclusive job; slurm.conf(5), PrologFlags / prolog environment).
case "${SLURM_JOB_OVERSUBSCRIBE:-}" in
  NO | TOPO) ;;
  *) exit 0 ;;
esac
# The guide's defaults: config in /etc/nvidia-imex, the peer list that config names.
config="${FMCTL_IMEX_CONFIG:-/etc/nvidia-imex/config.cfg}"
wait_s="${FMCTL_IMEX_READY_TIMEOUT:-60}"
fail() { fmctl_fail "NVLink domain not formed: $*"; }

command -v nvidia-imex >/dev/null 2>&1 || fail "nvidia-imex is not installed on this AMI"
command -v nvidia-imex-ctl >/dev/null 2>&1 || fail "nvidia-imex-ctl is not installed"
[ -r "$config" ] || fail "$config is missing"
# The peer list is the file the config names (IMEX_NODE_CONFIG_FILE; the guide's default).
peers=$(sed -n 's/^[[:space:]]*IMEX_NODE_CONFIG_FILE=//p' "$config" | tail -n 1)
peers="${peers:-/etc/nvidia-imex/nodes_config.cfg}"

# The job's nodes (SLURM_JOB_NODELIST, a hostlist expression) and their addresses: Slurm's
# NodeAddr, the instance's private IPv4 on ParallelCluster and PCS.
nodelist="${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}"
[ -n "$nodelist" ] || fail "slurmd gave the prolog no SLURM_JOB_NODELIST"
shown=$(timeout 20 "$slurm/bin/scontrol" show node -o "$nodelist" 2>&1) ||
  fail "scontrol show node $nodelist: ${shown##*$'\n'}"
addresses=$(printf '%s\n' "$shown" | sed -n 's/.* NodeAddr=\([^ ]*\) .*/\1/p')
count=$(printf '%s\n' "$addresses" | grep -c .)
[ "$count" -gt 0 ] || fail "no NodeAddr for $nodelist"

install -d -m 0755 "$(dirname "$peers")"
tmp="$peers.fmctl.$$"
if ! { printf '%s\n' "$addresses" > "$tmp" && mv -f "$tmp" "$peers"; }; then
  fail "cannot write $peers"
fi

# The daemon reads its peers only when it starts (the config's own header says a restart
# is needed for new settings): restart it on the job's list.
timeout 30 systemctl restart nvidia-imex >/dev/null 2>&1 ||
  fail "systemctl restart nvidia-imex failed"

# `nvidia-imex-ctl -q` prints READY once this node's daemon is up (the IMEX guide's command
# service; the DRA driver's compute-domain daemon waits for the same word).
deadline=$((SECONDS + wait_s))
state=""
while [ "$SECONDS" -lt "$deadline" ]; do
  state=$(timeout 5 nvidia-imex-ctl -c "$config" -q 2>&1 | head -n 1)
  [ "$state" = READY ] && exit 0
  sleep 1
done
fail "nvidia-imex not READY within ${wait_s}s (${state:-no answer}; $count peers in $peers)"
