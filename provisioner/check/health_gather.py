"""Gather `fmctl health NAME`: on Slurm, slurm/lib/cluster-health.sh on the controller host
through Run Command (read-only: sinfo and scontrol show); on EKS, the GPU nodes as the
Kubernetes API shows them.

On EKS fmctl's node agent is not built yet (issue 33): a node's state there is what
Kubernetes says — not Ready (``failed``), cordoned (``drained``, or ``draining`` while pods
that hold GPUs remain), the verify gate's startup taint ``fmctl.dev/unverified``
(``verifying``) — and the report says so in its notes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from provisioner.check.health import (
    HealthReport,
    NodeHealth,
    PoolHealth,
    budget_of,
    parse_slurm,
)
from provisioner.drivers.aws import AwsError
from provisioner.render.context import POOL_LABEL, ClusterContext
from provisioner.resources.context import Context
from provisioner.resources.ssm_run import bundle, head_node, run_script
from provisioner.shipped import shipped_dir

#: The verify gate's startup taint on a Kubernetes node (issue 33).
UNVERIFIED_TAINT = "fmctl.dev/unverified"
KUBE_NOTE = (
    "EKS: fmctl's node agent is not built yet; states are Kubernetes' own (Ready, cordoned, "
    "the fmctl.dev/unverified taint)"
)


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


def kube_report(
    context: ClusterContext, nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]
) -> HealthReport:
    """The GPU pools' nodes as Kubernetes shows them (see the module's docstring)."""
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
    for node in nodes:
        meta, spec, status = node["metadata"], node.get("spec", {}), node.get("status", {})
        pool = (meta.get("labels") or {}).get(POOL_LABEL, "")
        if pool not in pools:
            continue
        conditions = status.get("conditions", [])
        ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
        taints = {t.get("key", "") for t in spec.get("taints") or []}
        since = ready.get("lastTransitionTime")
        if ready.get("status") != "True":
            state, detail = "failed", f"not Ready: {ready.get('reason') or 'no Ready condition'}"
        elif UNVERIFIED_TAINT in taints:
            state, detail = "verifying", f"tainted {UNVERIFIED_TAINT}"
        elif spec.get("unschedulable"):
            running = meta["name"] in busy
            state = "draining" if running else "drained"
            detail = "cordoned" + (", pods still running" if running else "")
        else:
            state, detail, since = "healthy", "Ready", None
        out.append(NodeHealth(meta["name"], pool, state, None, since, detail))
    counts = {p: sum(1 for n in out if n.pool == p) for p in sorted(pools)}
    return HealthReport(
        context.name,
        "kubernetes",
        pools=tuple(
            PoolHealth(p, n, 0, budget_of(context.health_max_in_repair, n))
            for p, n in counts.items()
        ),
        nodes=tuple(sorted(out, key=lambda n: (n.pool, n.name))),
        notes=(KUBE_NOTE,),
    )
