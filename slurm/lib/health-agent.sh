#!/bin/bash
# fmctl's node health agent on a Slurm GPU node (issue 33: detect, act through the scheduler).
# fmctl-health.timer runs it every 30 s as root (on-node-configured.sh installs it); it reads
# what failed since its last run, decides by fmctl's fault table (lib/faults.tsv, from
# provisioner/catalog/faults.py: NVIDIA's Xid catalog and fmctl's own rows) and acts through
# Slurm:
#   - the kernel log's new `NVRM: Xid (PCI:...): N, ...` lines (journalctl -k, resumed from
#     its cursor file, so each line counts once);
#   - the GPUs nvidia-smi lists and the EFA devices libfabric sees, against what the node
#     must show (/etc/fmctl/node.env, as the prolog checks them);
#   - each GPU's NVLinks up (nvidia-smi nvlink -s), against the node's best GPU and its past;
#   - each GPU's row remapper (nvidia-smi -q -d ROW_REMAPPER): a remap failed or pending;
#   - the FSx file system and the instance-store array mounted and answering;
#   - DCGM's health watches (dcgmi health): a Failure is node-level, a Warning counted;
#   - the EFA devices' error counters (hw_counters), counted only.
# Application-class faults (NVIDIA's RESTART_APP, IGNORE, ...) are counted, never acted on. A
# node-level fault drains the node with a reason users can grep:
#   fmctl-health: XID 79 RESTART_BM -> replace
# On ParallelCluster that is the repair: clustermgtd treats a static node that is drained and
# idle as unhealthy and replaces its instance (aws-parallelcluster-node slurm_resources.py
# is_state_healthy, clustermgtd's terminate_drain_nodes, on by default), so running jobs end
# first; the new instance passes the verify gate before it registers. With health.repair:
# reboot, a fault a reboot cures is `scontrol reboot ASAP` instead (-> reboot), and the node
# passes the gate again before slurmd returns; with drain-only (PCS), it stays drained.
# On PCS, which replaces an instance only for what its own monitoring finds, a drained
# node the agent condemned (-> replace) is rebooted once it has no job left, into its
# nodeBootstrapped stage, which fails for it: PCS terminates the instance and the group
# launches another (actions/pcs-node-bootstrapped.sh says why that is the way). With
# health.repair: reboot, a fault a reboot cures is rebooted the same way, uncondemned: the
# stage's gate verifies the node at the boot and its nodeReady stage returns it.
# The jobs on a node it takes out of service finish, except where the table says the fault
# has lost them already (a GPU to reset, a machine to restart, a GPU gone): requeued at once.
# Never touched: a node someone else drained or took down (their reason stays), and, beyond
# the repair budget (spec health.maxInRepair, default max(1, 10% of the partition) nodes
# drained by this agent at once), every node: the agent only records and alerts, so a bad
# rule or a fabric-wide event cannot drain the fleet.
# A fault it holds is also in the node's Slurm Comment (`fmctl health` reads it there).
# Records: /var/lib/fmctl/health/{state,faults.log,counts}; metrics for the EFA exporter's
# textfile collector (fmctl-health.prom): fmctl_node_health_state, fmctl_node_alloc_cpus,
# fmctl_node_faults_total, fmctl_repairs_total.
set -uo pipefail

# node.env, $slurm, $node (a node without node.env is no GPU node of fmctl's: exit 0).
# shellcheck source=prolog-common.sh
. /opt/fmctl/slurm/lib/prolog-common.sh || exit 0
# The spec's health: settings (render writes slurm/health.env beside lib/).
if [ -r "$lib/../health.env" ]; then
  # shellcheck source=/dev/null
  . "$lib/../health.env"
fi
[ "${FMCTL_HEALTH_ENABLED:-true}" = true ] || exit 0
deadline="${FMCTL_HEALTH_TOOL_TIMEOUT:-20}"
# This node's Slurm name: slurmd runs as `slurmd -N NAME` (ParallelCluster's node names are
# not the instance's hostname), and Slurm knows it by its NodeHostname.
node="$(timeout "$deadline" "$slurm/bin/sinfo" -h -N -o '%N %n' 2>/dev/null |
  awk -v h="$(hostname -s)" '$2 == h {print $1; exit}')"
[ -n "$node" ] || node="$(hostname -s)"
dir=/var/lib/fmctl/health
table="$lib/faults.tsv"
install -d -m 0755 "$dir"
now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# What failed since the last run (health-detect.sh fills `faults`: "code<TAB>detail").
# shellcheck source=health-detect.sh
. "$lib/health-detect.sh"

# lookup CODE: "class action jobs seen" from the table (an XID it does not know: replace, its
# jobs left to finish, as NVIDIA's catalog says of an unexpected one; a kernel line, so an
# event).
lookup() {
  awk -F '\t' -v c="$1" '$1 == c {
      print $2, $3, ($4 == "" ? "finish" : $4), ($5 == "" ? "state" : $5); found = 1; exit}
    END {if (!found) print "UNKNOWN replace finish event"}' "$table"
}

# The table's "seen" column: an event (a kernel line, an EFA counter's rise) is new each run
# that finds it, logged and counted each time; a state (GPUs missing, a link down) is logged
# and counted when it appears, not every run while it lasts (the last run's states:
# $dir/present).
before=$(cat "$dir/present" 2>/dev/null || true)
present=""
act=""  # the first node-level fault: "code class action jobs detail"
for fault in "${faults[@]}"; do
  code="${fault%%	*}"
  detail="${fault#*	}"
  read -r class action jobs seen < <(lookup "$code")
  new=true
  if [ "$seen" = state ]; then
    present+="$code"$'\n'
    ! grep -qxF "$code" <<<"$before" || new=false
  fi
  if [ "$new" = true ]; then
    echo "$now $code $class $action $detail" >>"$dir/faults.log"
    printf '%s %s\n' "$code" "$class" >>"$dir/counts"
  fi
  if [ "$action" != none ] && [ -z "$act" ]; then
    act="$code $class $action $jobs $detail"
  fi
done
printf '%s' "$present" >"$dir/present"

# metrics STATE: the node's state and its fault counts, for the EFA exporter's textfile
# collector (its folder, where it runs).
metrics() {
  local prom=/var/lib/fmctl-efa
  [ -d "$prom" ] || return 0
  {
    echo "# HELP fmctl_node_health_state fmctl's health agent: the node's state (1 for the current)."
    echo "# TYPE fmctl_node_health_state gauge"
    for s in healthy draining held; do
      printf 'fmctl_node_health_state{state="%s"} %d\n' "$s" "$([ "$s" = "$1" ] && echo 1 || echo 0)"
    done
    echo "# HELP fmctl_node_faults_total Faults the health agent saw on the node, by code and class."
    echo "# TYPE fmctl_node_faults_total counter"
    [ ! -s "$dir/counts" ] || sort "$dir/counts" | uniq -c |
      awk '{printf "fmctl_node_faults_total{code=\"%s\",class=\"%s\"} %d\n", $2, $3, $1}'
    # CPUs allocated to jobs (scontrol's CPUAlloc, from the node's record this run already
    # read): 0 is a node with no job, which the GpuNodeIdle alert joins with its GPUs'
    # activity.
    local alloc
    alloc="$(printf '%s\n' "$show" | sed -n 's/.* CPUAlloc=\([0-9][0-9]*\).*/\1/p')"
    echo "# HELP fmctl_node_alloc_cpus CPUs Slurm has allocated to jobs on the node (0: no job)."
    echo "# TYPE fmctl_node_alloc_cpus gauge"
    [ -z "$alloc" ] || printf 'fmctl_node_alloc_cpus %d\n' "$alloc"
    echo "# HELP fmctl_repairs_total The agent's decisions on node-level faults: drained for the action, or held (budget spent, someone else's drain, drain refused)."
    echo "# TYPE fmctl_repairs_total counter"
    [ ! -s "$dir/repairs" ] || sort "$dir/repairs" | uniq -c |
      awk '{printf "fmctl_repairs_total{action=\"%s\",outcome=\"%s\"} %d\n", $2, $3, $1}'
  } >"$prom/fmctl-health.prom.tmp" && mv "$prom/fmctl-health.prom.tmp" "$prom/fmctl-health.prom"
}

# The node's Comment carries a fault the agent holds (`fmctl health` reads it on the
# controller): set when held, cleared once the node is healthy or drained; a comment someone
# else wrote is never touched.
note() {  # TEXT (empty: clear ours)
  local mine=false
  [[ "$comment" != fmctl-health:* ]] || mine=true
  [ "$comment" != "$1" ] || return 0
  if [ "$mine" = true ] || [ -z "$comment" ] || [ "$comment" = "(null)" ]; then
    [ -n "$1" ] || [ "$mine" = true ] || return 0
    timeout "$deadline" "$slurm/bin/scontrol" update NodeName="$node" Comment="$1" >/dev/null 2>&1 || true
  fi
}

# decided ACTION OUTCOME: one decision on a node-level fault, counted once (a fault held
# run after run is one hold).
decided() {
  local was=""
  [ ! -s "$dir/state" ] || read -r was _ <"$dir/state"
  [ "$2" = drained ] || [ "$was" != held ] || return 0
  printf '%s %s\n' "$1" "$2" >>"$dir/repairs"
}

record() {  # STATE DETAIL
  printf '%s %s\n' "$1" "$2" >"$dir/state"
  metrics "$1"
  if [ "$1" = held ]; then note "fmctl-health: held ${2#fmctl-health: }"; else note ""; fi
}

show="$(timeout "$deadline" "$slurm/bin/scontrol" show node -o "$node" 2>/dev/null)"
# Slurm shows the reason with who set it and when: "REASON [root@2026-12-04T13:35:27]".
reason="$(printf '%s\n' "$show" | sed -n 's/.* Reason=\(.*\)/\1/p' | sed 's/ \[[^]]*\]$//')"
node_state="$(printf '%s\n' "$show" | sed -n 's/.* State=\([^ ]*\).*/\1/p')"
# A Comment runs to the next field (a capitalised Key=); "(null)" or absent when none.
comment="$(printf '%s\n' "$show" | sed -n 's/.* Comment=\(.*\)/\1/p' | sed 's/ [A-Z][A-Za-z]*=.*$//')"

# PCS: a node the agent drained, where its boots pass through fmctl's gate in PCS's
# nodeBootstrapped stage (/etc/fmctl/pcs-gate), carries the reason in $condemned (for a new
# instance) or $to_reboot (health.repair: reboot); once Slurm shows it drained with no job
# left (IDLE+DRAIN, nothing completing), the agent reboots it. The stage runs at every boot:
# it fails for a condemned node, and PCS terminates it (onError TERMINATE) and launches
# another; for one rebooted it runs the gate, and the nodeReady stage returns a node that
# passed. Jobs are never cut short for it: a drained node takes none, so idle stays idle
# until the reboot.
condemned="$dir/replace"
to_reboot="$dir/reboot"
repair_once_idle() {
  local marker state
  if [ -s "$condemned" ]; then
    marker="$condemned"
  elif [ -s "$to_reboot" ]; then
    marker="$to_reboot"
  else
    return 0
  fi
  state="$(timeout "$deadline" "$slurm/bin/scontrol" show node -o "$node" 2>/dev/null |
    sed -n 's/.* State=\([^ ]*\).*/\1/p')"
  # Its slurmd answering too: after a reboot whose stage failed (slurmd never starts), it
  # is PCS's to end the node, and a second reboot would only loop.
  [[ "$state" == IDLE+*DRAIN* && "$state" != *COMPLETING* && "$state" != *NOT_RESPONDING* ]] ||
    return 0
  if [ "$marker" = "$condemned" ]; then
    logger -t fmctl-health -- "$(cat "$marker"): $node has no job left: rebooting it into PCS's nodeBootstrapped stage, which fails for it (PCS terminates the instance and launches another)" 2>/dev/null || true
    echo "$now reboot $(cat "$marker") (PCS replaces the instance at its nodeBootstrapped stage)" >>"$dir/faults.log"
  else
    logger -t fmctl-health -- "$(cat "$marker"): $node has no job left: rebooting it (the gate runs at the boot, in PCS's nodeBootstrapped stage)" 2>/dev/null || true
    echo "$now reboot $(cat "$marker") (the gate runs again at the boot)" >>"$dir/faults.log"
  fi
  systemctl reboot
}
# Once the node is back in service, or drained by someone else with their reason, the last
# word is theirs: the condemnation (or the reboot) goes, and no later boot fails for it.
if [[ "$reason" != fmctl-health:* ]] || [[ "$node_state" != *DRAIN* && "$node_state" != *DOWN* ]]; then
  rm -f "$condemned" "$to_reboot"
fi

# A node the verify gate holds after a slow pair with the one idle peer it had (neither
# could be told bad): once another peer is idle, the pair runs again with it
# (verify-pair.sh --retry starts its unit, without waiting), so no person is needed.
if [ -s "$dir/pair-first" ] && [ -r "$lib/verify-pair.sh" ]; then
  timeout "$deadline" /bin/bash "$lib/verify-pair.sh" --retry >/dev/null 2>&1 || true
fi

if [ -z "$act" ]; then
  # Drained by this agent: stays so until replaced. (Slurm keeps a reason on a node resumed
  # while not responding: only a drained or down node's reason is current.)
  if [[ "$reason" == fmctl-health:* ]] && [[ "$node_state" == *DRAIN* || "$node_state" == *DOWN* ]]; then
    record draining "$reason"
    repair_once_idle
  else
    record healthy "no node-level fault"
  fi
  exit 0
fi

read -r code class action jobs detail <<<"$act"
# health.repair: replace (every node-level fault: a new instance), reboot (the faults the
# table says a GPU reset or a restart cures; a new instance for the rest) or drain-only (the
# node stays drained for a person; validation allows it on PCS only, whose node group
# ISOLATEs: ParallelCluster replaces every drained static node).
case "${FMCTL_HEALTH_REPAIR:-replace}" in
  drain-only) action=drain ;;
  reboot) ;;
  *) action=replace ;;
esac
# A reboot only where the node is verified before slurmd starts again (fmctl-verify.service,
# installed on ParallelCluster with the verify gate) and Slurm can reboot it (RebootProgram:
# the cookbook's slurm.conf sets /sbin/reboot); elsewhere a reboot would return the node to
# work unverified, so it is replaced.
# On PCS the nodeBootstrapped stage is that gate (/etc/fmctl/pcs-gate), and the agent
# reboots the node itself once idle (Slurm's RebootProgram there is PCS's to set).
if [ "$action" = reboot ] && [ ! -e /etc/fmctl/pcs-gate ]; then
  program="$(timeout "$deadline" "$slurm/bin/scontrol" show config 2>/dev/null |
    sed -n 's/^RebootProgram *= *//p')"
  if [ ! -e /etc/systemd/system/fmctl-verify.service ] || [ -z "$program" ] ||
    [ "$program" = "(null)" ]; then
    action=replace
  fi
fi
why="fmctl-health: ${class} (${detail}) -> ${action}"
[[ "$code" != xid:* ]] || why="fmctl-health: XID ${code#xid:} ${class} -> ${action}"

case "$node_state" in
  *DRAIN* | *DOWN* | *FAIL*)
    if [[ "$reason" == fmctl-health:* ]]; then
      record draining "$reason"
      repair_once_idle
    else
      # Someone else's: their drain and reason stay.
      logger -t fmctl-health -- "$why on $node: left alone, $node_state by someone else ($reason)" 2>/dev/null || true
      decided "$action" held-other
      record held "$why (the node is $node_state by someone else: ${reason:-no reason})"
    fi
    exit 0
    ;;
esac

# The repair budget, counted over the node's first partition.
partition="$(printf '%s\n' "$show" | sed -n 's/.* Partitions=\([^ ,]*\).*/\1/p')"
total="$(timeout "$deadline" "$slurm/bin/sinfo" -h -N -p "$partition" -o '%N' 2>/dev/null | sort -u | wc -l)"
# Only drained, down or rebooting nodes (sinfo's "reboot^" once the reboot is issued): Slurm
# keeps the reason of a node resumed while not responding.
repairing="$(timeout "$deadline" "$slurm/bin/sinfo" -h -N -p "$partition" -o '%N|%T|%E' 2>/dev/null |
  awk -F'|' '$2 ~ /^(drain|down|reboot)/ && $3 ~ /^fmctl-health:/ {print $1}' | sort -u | wc -l)"
# health.maxInRepair: a count, or a share of the partition (at least one node).
limit="${FMCTL_HEALTH_MAX_IN_REPAIR:-10%}"
if [[ "$limit" == *% ]]; then
  budget=$((total * ${limit%\%} / 100))
  [ "$budget" -ge 1 ] || budget=1
else
  budget="$limit"
fi
if [ "$repairing" -ge "$budget" ]; then
  logger -t fmctl-health -- "$why on $node: held, $repairing of $total nodes of $partition in repair (budget $budget)" 2>/dev/null || true
  decided "$action" held-budget
  record held "$why (budget: $repairing of $total nodes of $partition in repair, at most $budget)"
  exit 0
fi

if [ "$action" = reboot ] && [ ! -e /etc/fmctl/pcs-gate ]; then
  # Slurm drains the node (ASAP), has slurmd run RebootProgram once it is idle, and resumes
  # it (nextstate=RESUME) when slurmd registers again, which fmctl-verify.service allows
  # only once the node passes the verify gate (scontrol(1), reboot). clustermgtd leaves a
  # node it sees rebooting alone (slurm_resources.py is_rebooting at 2e8f9a8).
  drain=(reboot ASAP nextstate=RESUME "reason=$why" "$node")
else
  drain=(update NodeName="$node" State=DRAIN Reason="$why")
fi
if timeout "$deadline" "$slurm/bin/scontrol" "${drain[@]}"; then
  logger -t fmctl-health -- "$why: drained $node" 2>/dev/null || true
  # A fault that has lost the running work already (the table's jobs column: the GPU must be
  # reset, the machine restarted, or a GPU is gone): its jobs are requeued now, to restart
  # elsewhere, rather than hang until their time limit; the node, idle, is repaired at
  # once. A job that may not be requeued (--no-requeue) is left to end as it will.
  if [ "$jobs" = requeue ]; then
    for job in $(timeout "$deadline" "$slurm/bin/squeue" -h -w "$node" -t RUNNING -o %A 2>/dev/null); do
      if timeout "$deadline" "$slurm/bin/scontrol" requeue "$job" 2>/dev/null; then
        logger -t fmctl-health -- "$why: requeued job $job from $node" 2>/dev/null || true
        echo "$now requeued $job" >>"$dir/faults.log"
      fi
    done
  fi
  decided "$action" drained
  record draining "$why"
  if [ -e /etc/fmctl/pcs-gate ] && [ "$action" != drain ]; then
    if [ "$action" = replace ]; then
      printf '%s\n' "$why" >"$condemned"
    else
      printf '%s\n' "$why" >"$to_reboot"
    fi
    repair_once_idle
  fi
else
  decided "$action" held-refused
  record held "$why (scontrol could not drain the node)"
  exit 1
fi
