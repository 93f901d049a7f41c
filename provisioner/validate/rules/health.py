"""Rules of the spec's health: section (issue 33's health loop): its settings, the repair
each scheduler can make, the Kubernetes-only switches, and how long the verify gate's DCGM
diagnostic may hold a node."""

from __future__ import annotations

import re
from collections.abc import Iterator

from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem
from provisioner.validate.rules.registry import RuleContext, rule

SHARE_RE = re.compile(r"^(\d+)%$")


@rule("health-settings")
def health_settings(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """health.interval is 10 s to 10 min (below it the agent's own tools, each given 20 s,
    would overlap; above it a fault goes unseen for too long); health.maxInRepair is a count
    of at least 1 or a share from 1% to 100%."""
    seconds = spec.health.interval_seconds()
    if seconds is None or not 10 <= seconds <= 600:
        yield Problem(
            "health-settings",
            f"health interval {spec.health.interval!r} is not between 10s and 10m",
            ("health", "interval"),
            hint="write it like 30s or 2m",
        )
    budget = spec.health.max_in_repair
    share = SHARE_RE.match(budget.strip()) if isinstance(budget, str) else None
    if isinstance(budget, int):
        ok = budget >= 1
    elif share:
        ok = 1 <= int(share.group(1)) <= 100
    else:
        ok = budget.strip().isdigit() and int(budget) >= 1
    if not ok:
        yield Problem(
            "health-settings",
            f"health maxInRepair {budget!r} is neither a count of at least 1 "
            "nor a share from 1% to 100%",
            ("health", "maxInRepair"),
            hint="a count of nodes like 2, or a share of each partition like 10% (at least one)",
        )


@rule("health-repair")
def health_repair(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """health.repair drain-only needs a scheduler that leaves a drained node alone: PCS
    (healthMonitoring ISOLATE). ParallelCluster's clustermgtd replaces every drained static
    node (aws-parallelcluster-node slurm_resources.py is_state_healthy, clustermgtd
    terminate_drain_nodes, on by default); EKS node auto repair has no cordon-only action
    (NoAction leaves the node schedulable)."""
    if spec.health.repair != "drain-only" or not spec.health.enabled:
        return
    if ctx.scheduler == "slurm" and spec.slurm.provider == "pcs":
        return
    where = (
        "ParallelCluster replaces every drained static node (clustermgtd)"
        if ctx.scheduler == "slurm"
        else "EKS node auto repair cannot cordon without repairing (NoAction leaves the "
        "node schedulable)"
    )
    yield Problem(
        "health-repair",
        f"health repair 'drain-only' cannot hold a node here: {where}",
        ("health", "repair"),
        hint="use repair: replace or reboot; drain-only works with slurm.provider: pcs",
    )


@rule("health-kubernetes-gate")
def health_kubernetes_gate(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """health.verify.kubernetesGate is EKS's: a Slurm node always passes the gate (before
    slurmd on ParallelCluster, PCS's own check on PCS), and a gate with health off would
    taint nodes nothing verifies."""
    if not spec.health.verify.kubernetes_gate:
        return  # the default (on for EKS where health is, nothing on Slurm), or off
    if ctx.scheduler != "kubernetes":
        yield Problem(
            "health-kubernetes-gate",
            "health verify kubernetesGate is for EKS: Slurm nodes pass the verify gate always",
            ("health", "verify", "kubernetesGate"),
            hint="remove it; the Slurm gate is verify-node.sh before slurmd (on PCS too)",
        )
    elif not spec.health.enabled:
        yield Problem(
            "health-kubernetes-gate",
            "health verify kubernetesGate needs health enabled: nothing would lift the taint",
            ("health", "verify", "kubernetesGate"),
            hint="set health.enabled: true, or drop kubernetesGate",
        )


@rule("health-kubernetes-agent")
def health_kubernetes_agent(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """health.kubernetesAgent is EKS's: every Slurm GPU node runs the agent already (a
    systemd timer), and the agent is health's."""
    if spec.health.kubernetes_agent is None:
        return  # the default: on for EKS where health is, nothing on Slurm
    if ctx.scheduler != "kubernetes":
        yield Problem(
            "health-kubernetes-agent",
            "health kubernetesAgent is for EKS: Slurm GPU nodes run the agent always",
            ("health", "kubernetesAgent"),
            hint="remove it; on Slurm the agent is slurm/lib/health-agent.sh, on by default",
        )
    elif spec.health.kubernetes_agent and not spec.health.enabled:
        yield Problem(
            "health-kubernetes-agent",
            "health kubernetesAgent needs health enabled: health.enabled: false turns the "
            "agent off",
            ("health", "kubernetesAgent"),
            hint="set health.enabled: true, or drop kubernetesAgent",
        )


@rule("health-dcgm-extended")
def health_dcgm_extended(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """DCGM's level-4 diagnostic is allowed up to four hours (verify-node.sh's deadline) on
    every new, replaced or rebooted GPU node before it takes work: allowed, but said."""
    gated = ctx.scheduler != "kubernetes" or spec.health.verify.kubernetes_gate is not False
    level = spec.health.verify.dcgm_level
    pcs = ctx.scheduler != "kubernetes" and spec.slurm.provider == "pcs"
    if spec.health.enabled and pcs and level >= 3:
        # On PCS the gate is a nodeBootstrapped lifecycle script, and PCS gives a node
        # "approximately 30 minutes to join Slurm" (PCS User Guide, best practices for node
        # lifecycle actions), with no setting to lengthen it as ParallelCluster has.
        yield Problem(
            "health-dcgm-extended",
            f"health verify dcgmLevel {level} does not fit on PCS: its diagnostic takes up "
            f"to {'30 minutes' if level == 3 else '4 hours'} before slurmd starts, and PCS "
            "gives a node about 30 minutes to join Slurm",
            ("health", "verify", "dcgmLevel"),
            hint="use level 2 (a few minutes) on PCS; PCS's own deep health check (QUICK) "
            "runs after it",
        )
        return
    if spec.health.enabled and gated and level >= 4:
        yield Problem(
            "health-dcgm-extended",
            "health verify dcgmLevel 4 gives DCGM's extended diagnostic up to 4 hours on every "
            "new, replaced or rebooted GPU node before it takes work (ParallelCluster's "
            "bootstrap is allowed 4.5 hours for it)",
            ("health", "verify", "dcgmLevel"),
            hint="level 2 (a few minutes) or 3 (about 30 minutes) find most faults; keep 4 "
            "for burn-in",
            level="warning",
        )
