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
# The domain not UP in time (every peer READY and connected) drains the node with the reason, so `sinfo -R` says the
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
# Where the driver's IMEX channel devices live, and the kernel's table of device majors.
channels="${FMCTL_IMEX_CHANNELS:-/dev/nvidia-caps-imex-channels}"
devices="${FMCTL_PROC_DEVICES:-/proc/devices}"
fail() { fmctl_fail "NVLink domain not formed: $*"; }

# CUDA's fabric memory handles (what NCCL's multi-node NVLink path exports and imports) open
# an IMEX channel, /dev/nvidia-caps-imex-channels/channelN, which the administrator creates
# (CUDA driver API, "IMEX channels"; NVIDIA's IMEX guide: the major number of
# nvidia-caps-imex-channels in /proc/devices, minor N). Without one NCCL silently leaves
# NVLink for EFA. Channel 0, for every user's jobs, as AWS's PCS UltraServer prolog makes it
# (and as the driver's NVreg_CreateImexChannel0=1 would).
major=$(awk '$2 == "nvidia-caps-imex-channels" { print $1; exit }' "$devices" 2>/dev/null)
[ -n "$major" ] || fail "the NVIDIA driver registers no nvidia-caps-imex-channels device ($devices)"
have=$(stat -c '%F %t:%T' "$channels/channel0" 2>/dev/null)
if [ "$have" != "character special file $(printf '%x' "$major"):0" ]; then
  rm -f "$channels/channel0"
  { install -d -m 0755 "$channels" && mknod -m 0666 "$channels/channel0" c "$major" 0; } ||
    fail "cannot create $channels/channel0 (major $major)"
fi

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
# systemctl's own first line goes into the drain reason, so `sinfo -R` says why ("Job for
# nvidia-imex.service failed because ...": its second line only points at `systemctl status`;
# systemd src/shared/bus-wait-for-jobs.c, log_job_error_with_service_result).
out=$(timeout 30 systemctl restart nvidia-imex 2>&1)
status=$?
if [ $status = 124 ]; then
  fail "systemctl restart nvidia-imex did not return in 30 s"
elif [ $status != 0 ]; then
  fail "systemctl restart nvidia-imex failed: ${out%%$'\n'*}"
fi

# `nvidia-imex-ctl -q` prints READY once this node's daemon is up (the IMEX guide's command
# service) -- this node's only: "not the entire domain" (NVIDIA's DRA driver,
# cmd/compute-domain-daemon). The domain is `-N -j`'s word: its "status" (UP, DOWN or
# DEGRADED: DCGM's DCGM_FI_IMEX_DOMAIN_STATUS reads the same field) and, per peer in
# "nodes", its "status" (READY) and its "connections" (CONNECTED), as GB200 Slurm prologs
# in the wild read them. The job's nodes run this prolog at once (PrologFlags=Alloc), so
# each waits for the others' daemons.
deadline=$((SECONDS + wait_s))
state=""
while [ "$SECONDS" -lt "$deadline" ]; do
  state=$(timeout 5 nvidia-imex-ctl -c "$config" -q 2>&1 | head -n 1)
  [ "$state" = READY ] && break
  sleep 1
done
[ "$state" = READY ] ||
  fail "nvidia-imex not READY within ${wait_s}s (${state:-no answer}; $count peers in $peers)"
judge='
import json, sys
try:
    domain = json.load(sys.stdin)
except ValueError:
    print("nvidia-imex-ctl -N -j gave no JSON"); sys.exit(1)
nodes = domain.get("nodes") or {}
lagging = sorted(
    "%s %s" % (n.get("host", "?"), n.get("status", "?"))
    for n in nodes.values() if n.get("status") != "READY"
)
cut = sorted(
    "%s-%s" % (n.get("host", "?"), c.get("host", "?"))
    for n in nodes.values()
    for c in (n.get("connections") or {}).values() if c.get("status") != "CONNECTED"
)
if domain.get("status") == "UP" and len(nodes) == int(sys.argv[1]) and not lagging and not cut:
    sys.exit(0)
print("domain %s, %d of %s nodes%s%s" % (
    domain.get("status", "?"), len(nodes), sys.argv[1],
    "; not READY: " + ", ".join(lagging) if lagging else "",
    "; not connected: " + ", ".join(cut[:4]) if cut else ""))
sys.exit(1)
'
said=""
while [ "$SECONDS" -lt "$deadline" ]; do
  if said=$(timeout 5 nvidia-imex-ctl -c "$config" -N -j 2>/dev/null |
    python3 -c "$judge" "$count"); then
    exit 0
  fi
  sleep 1
done
fail "the IMEX domain is not UP within ${wait_s}s (${said:-no answer})"
