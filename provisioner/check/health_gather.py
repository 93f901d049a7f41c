"""Gather `fmctl health NAME`: on Slurm, slurm/lib/cluster-health.sh on the controller host
through Run Command (read-only: sinfo and scontrol show); on EKS, the GPU nodes as the
Kubernetes API shows them.

On EKS the detector is AWS's node monitoring agent (the eks-node-monitoring-agent add-on
fmctl installs with health on): it sets a node condition per kind of fault
(AcceleratedHardwareReady for GPU XIDs and NVLink, KernelReady, NetworkingReady,
StorageReady, ContainerRuntimeReady; the EKS User Guide, "Node health"), and node auto
repair, which fmctl turns on for every GPU node group, cordons the node and reboots or
replaces it as fmctl's overrides say (catalog.eks_repair: a minute after an Xid or a
double-bit error, EKS's own 10 minutes for other GPU states, 30 for the rest). A node's state
here: a failing condition not yet acted on is ``suspect``, cordoned with one ``repairing``;
not Ready ``failed``; cordoned otherwise ``drained`` (or ``draining`` while pods remain);
the verify gate's startup taint ``fmctl.dev/unverified`` ``verifying``, or ``failed`` once
fmctl's verify controller has recorded that the node failed the gate (``repairing`` once it
has had the node's instance terminated for a replacement, ``fmctl.dev/verify-repair``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from provisioner.catalog.eks_repair import (
    AGENT_CONDITION,
    UNHEALTHY_TAINT,
    UNVERIFIED_TAINT,
    fmctl_action,
)
from provisioner.catalog.faults import fault_table, repair_budget, rule
from provisioner.check.health import (
    Fault,
    HealthEvent,
    HealthReport,
    NodeHealth,
    PoolHealth,
    natural,
    parse_slurm,
)
from provisioner.drivers.aws import AwsError
from provisioner.render.context import ClusterContext
from provisioner.render.pools import POOL_LABEL
from provisioner.resources.context import Context
from provisioner.resources.ssm_run import bundle, head_node, run_script
from provisioner.shipped import shipped_dir

#: The verdict fmctl's verify controller records on the node
#: (templates/kubernetes/health-verify/verify_controller.py); the startup taint it lifts is
#: catalog.eks_repair's UNVERIFIED_TAINT.
VERDICT_ANNOTATION = "fmctl.dev/verify"
#: What the controller did about a node that failed: "replacing TIME: ..." or "held TIME: WHY".
REPAIR_ANNOTATION = "fmctl.dev/verify-repair"
#: The node monitoring agent's conditions (EKS User Guide, "Node health"; its repository's
#: docs/node-health-issues.adoc at 51af549).
MONITOR_CONDITIONS = (
    "AcceleratedHardwareReady",
    "ContainerRuntimeReady",
    "KernelReady",
    "NetworkingReady",
    "StorageReady",
)
KUBE_NOTE = (
    "EKS: faults from the node monitoring agent's conditions, repairs by EKS node auto "
    "repair (fmctl's own node agent too with health.kubernetesAgent)"
)
#: With fmctl's node agent on EKS (health.kubernetesAgent).
KUBE_AGENT_NOTE = (
    "EKS: faults from fmctl's node agent (FmctlHealthy) and the node monitoring agent's "
    "conditions; repairs by fmctl's verify controller and EKS node auto repair"
)
#: Said too when the cluster has no verify gate.
KUBE_NO_GATE = "new nodes take work unverified (health.verify.kubernetesGate is off)"
_XID_REASON = re.compile(r"NvidiaXID(\d+)(Error|Warning)")
#: The agent's condition message: ``fmctl-health: XID 79 RESTART_BM -> reboot; jobs: ...`` or
#: ``fmctl-health: GPU_MISSING (7 of 8 GPUs) -> replace; jobs: ...`` (node_agent.py).
_AGENT_MESSAGE = re.compile(r"fmctl-health: (?:XID (\d+) )?(\S+).* -> (\S+);")


def _agent_fault(condition: dict[str, Any]) -> Fault:
    """The fault fmctl's node agent reports, with its code from the fault table; the action
    is the controller's, a replacement (EKS gives it no reboot a verification follows)."""
    message = str(condition.get("message") or "")
    found = _AGENT_MESSAGE.match(message)
    fault_class = str(condition.get("reason") or "")
    if found and found.group(1):
        code = f"xid:{found.group(1)}"
    else:
        code = next((r.code for r in fault_table() if r.fault_class == fault_class), fault_class)
    return Fault(code, fault_class, "replace", message)


def _condition_fault(condition: dict[str, Any], repair: str) -> Fault:
    """A failing monitoring condition as a fault: an XID takes its class from fmctl's fault
    table (NVIDIA's catalog), anything else the condition's own reason; the action is what
    EKS will do, as fmctl's overrides tell it for ``health.repair`` (catalog.eks_repair)."""
    reason = str(condition.get("reason") or condition.get("type"))
    detail = str(condition.get("message") or reason)
    action = {"NoAction": "none"}.get(acting := fmctl_action(reason, repair), acting.lower())
    xid = _XID_REASON.fullmatch(reason)
    row = rule(f"xid:{xid.group(1)}") if xid else None
    if xid and row is not None:
        return Fault(row.code, row.fault_class, action, detail)
    return Fault(reason, str(condition.get("type")), action, detail)


def _events(
    node: str, pool: str, failing: list[dict[str, Any]], verdict: str, repair: str = ""
) -> list[HealthEvent]:
    """What the node's conditions and the verify gate's verdict say happened, and when: a
    failing condition since it changed, the gate's verdict ("passed TIME" or "failed TIME:
    WHAT", verify_controller.py) and what the controller did about a failure ("replacing
    TIME: ..." or "held TIME: WHY") at their times."""
    out = [
        HealthEvent(
            str(c.get("lastTransitionTime") or ""),
            node,
            pool,
            f"{c.get('type')} False: {c.get('reason') or ''}".rstrip(": "),
        )
        for c in failing
    ]
    outcome, _, rest = verdict.partition(" ")
    if outcome in ("passed", "failed") and rest:
        when, _, what = rest.partition(": ")
        said = (
            "passed the verify gate" if outcome == "passed" else f"failed the verify gate: {what}"
        )
        out.append(HealthEvent(when, node, pool, said))
    outcome, _, rest = repair.partition(" ")
    if outcome in ("draining", "replacing", "held") and rest:
        when, _, what = rest.partition(": ")
        out.append(HealthEvent(when, node, pool, f"{outcome}: {what}"))
    return out


def health_script() -> str:
    """What Run Command runs on the controller host: this fmctl's cluster-health.sh."""
    lib = shipped_dir("slurm") / "lib"
    files = {
        "cluster-health.sh": (lib / "cluster-health.sh").read_text(),
        "slurm-prefix.sh": (lib / "slurm-prefix.sh").read_text(),
    }
    return bundle(files, 'bash "$work/cluster-health.sh"')


def gather_slurm(ctx: Context, context: ClusterContext) -> HealthReport:
    """Run cluster-health.sh on the head (or PCS login) node and read its answer."""
    instance = head_node(ctx, context.slurm_provider)
    found = run_script(
        ctx, instance, health_script(), f"fmctl health {ctx.cluster}", expected=5.0, limit=120
    )
    if found["Status"] != "Success":
        raise AwsError(
            f"sinfo on {instance} ended {found['Status']}: "
            + (found.get("StandardErrorContent") or "").strip()[-500:],
            hint="SSM's agent must run on the node and Slurm's controller answer",
        )
    return parse_slurm(
        context.name,
        str(found.get("StandardOutputContent") or ""),
        context.health_max_in_repair,
        tuple(p.name for p in context.pools),
    )


#: The verify controller's ConfigMap of replacements under way (verify_controller.py,
#: REPAIRS_MAP, in fmctl-system), which count in their pool's repairs.
REPAIRS_MAP = "fmctl-verify-repairs"


def replacements(repairs: dict[str, Any] | None) -> dict[str, int]:
    """Pool -> replacements the verify controller has under way (its ConfigMap's ``state``:
    ``{"pending": {POOL: [TIME, ...]}}``); a node being replaced is gone from the API, its
    replacement not verified yet."""
    import json

    try:
        state = json.loads(((repairs or {}).get("data") or {}).get("state") or "{}")
    except ValueError:
        return {}
    pending = state.get("pending") if isinstance(state, dict) else None
    if not isinstance(pending, dict):
        return {}
    return {str(k): len(v) for k, v in pending.items() if isinstance(v, list)}


def kube_report(
    context: ClusterContext,
    nodes: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
    repairs: dict[str, Any] | None = None,
) -> HealthReport:
    """The GPU pools' nodes as Kubernetes shows them (see the module's docstring); with the
    verify controller's ConfigMap ``repairs``, its replacements under way count in their
    pools' repairs."""
    pools = {p.name for p in context.pools}
    busy = {
        str(pod.get("spec", {}).get("nodeName"))
        for pod in pods
        if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        and not any(
            o.get("kind") == "DaemonSet" for o in pod["metadata"].get("ownerReferences") or []
        )
    }
    out: list[NodeHealth] = []
    events: list[HealthEvent] = []
    #: Nodes fmctl's controller took out of service for its agent's fault: in repair
    #: (its budget counts them) even while their pods finish.
    taken_out: set[str] = set()
    for node in nodes:
        meta, spec, status = node["metadata"], node.get("spec", {}), node.get("status", {})
        pool = (meta.get("labels") or {}).get(POOL_LABEL, "")
        if pool not in pools:
            continue
        conditions = status.get("conditions", [])
        ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
        taints = {t.get("key", "") for t in spec.get("taints") or []}
        verdict = str((meta.get("annotations") or {}).get(VERDICT_ANNOTATION, ""))
        repair = str((meta.get("annotations") or {}).get(REPAIR_ANNOTATION, ""))
        since = ready.get("lastTransitionTime")
        failing = [
            c
            for c in conditions
            if c.get("type") in MONITOR_CONDITIONS and c.get("status") == "False"
        ]
        # fmctl's agent's condition, looked up once: False a fault, Unknown it cannot look,
        # absent it has not reported yet.
        reported: dict[str, Any] | None = next(
            (c for c in conditions if c.get("type") == AGENT_CONDITION), None
        )
        agent = reported if reported is not None and reported.get("status") == "False" else None
        fault = _condition_fault(failing[0], context.health_repair) if failing else None
        if failing:
            since = failing[0].get("lastTransitionTime")
        events += _events(
            meta["name"], pool, [*failing, *([agent] if agent else [])], verdict, repair
        )
        if ready.get("status") != "True":
            state, detail = "failed", f"not Ready: {ready.get('reason') or 'no Ready condition'}"
        elif agent is not None and UNVERIFIED_TAINT not in taints:
            # fmctl's agent found a node-level fault: the controller takes the node out of
            # service (its taint) and has it replaced once its GPU pods are gone, or holds
            # it (the budget), saying so in the repair annotation.
            fault, since = _agent_fault(agent), agent.get("lastTransitionTime")
            if repair.startswith("replacing"):
                state = "repairing"
            elif UNHEALTHY_TAINT in taints:
                state = "draining" if meta["name"] in busy else "repairing"
                taken_out.add(meta["name"])
            else:
                state = "suspect"
            detail = str(agent.get("message") or "") + (f"; {repair}" if repair else "")
        elif failing:
            cordoned = bool(spec.get("unschedulable"))
            state = "repairing" if cordoned else "suspect"
            detail = f"{failing[0].get('type')} False: {failing[0].get('reason')}"
        elif UNVERIFIED_TAINT in taints and verdict.startswith("failed"):
            # fmctl's verify controller has its instance replaced, or keeps it out of
            # service (for a person, or until the pool's repair budget has room).
            replacing = repair.startswith("replacing")
            state = "repairing" if replacing else "failed"
            detail = f"verify gate: {verdict}" + (f"; {repair}" if repair else "")
            fault = Fault("verify", "VERIFY_FAILED", "replace" if replacing else "drain", verdict)
        elif UNVERIFIED_TAINT in taints:
            # "pairing TIME: ...": its own checks passed, its 2-node NCCL pair is next.
            state, detail = (
                "verifying",
                f"tainted {UNVERIFIED_TAINT}"
                + (f"; {verdict}" if verdict.startswith("pairing") else ""),
            )
        elif spec.get("unschedulable"):
            running = meta["name"] in busy
            state = "draining" if running else "drained"
            detail = "cordoned" + (", pods still running" if running else "")
        elif context.health_kubernetes_agent and reported is None:
            # In service, but not yet looked at by fmctl's node agent (its first pass).
            state, detail = "verifying", f"fmctl's node agent has not reported ({AGENT_CONDITION})"
        else:
            state, detail, since = "healthy", "Ready", None
            if reported is not None and reported.get("status") == "Unknown":
                # Healthy as far as anyone can tell, but say that fmctl's agent cannot look
                # (no nvidia-smi in its container): a node nobody watches is not "fine".
                detail = f"Ready; fmctl's node agent cannot look: {reported.get('message')}"
        out.append(NodeHealth(meta["name"], pool, state, fault, since, detail))
    counts = {p: sum(1 for n in out if n.pool == p) for p in sorted(pools)}
    under_way = replacements(repairs)
    repairing = {
        p: max(
            sum(1 for n in out if n.pool == p and (n.state == "repairing" or n.name in taken_out)),
            # A node the controller is replacing is "repairing" while it is there, and
            # counted by the controller until its replacement is verified.
            under_way.get(p, 0),
        )
        for p in pools
    }
    return HealthReport(
        context.name,
        "kubernetes",
        pools=tuple(
            PoolHealth(p, n, repairing[p], repair_budget(context.health_max_in_repair, n))
            for p, n in counts.items()
        ),
        nodes=tuple(sorted(out, key=lambda n: (n.pool, natural(n.name)))),
        events=tuple(sorted(events, key=lambda e: e.time, reverse=True)),
        notes=(
            KUBE_AGENT_NOTE if context.health_kubernetes_agent else KUBE_NOTE,
            *(() if context.health_verify_kubernetes_gate else (KUBE_NO_GATE,)),
        ),
    )
