"""Taking nodes out of an EKS node group without breaking the work on them: which nodes go,
their cordon and drain, and their termination through the group's Auto Scaling group.

Scaling a managed node group in through EKS (UpdateNodegroupConfig) lets its Auto Scaling
group pick the instances to end, and EKS drains each for at most five minutes before it is
terminated (the EKS User Guide, "Delete a managed node group" and "Managed node update
behavior"): a training job's pods get no say. So `up` picks the nodes itself (those it
was already taking out, then the ones with the fewest pods, then the newest), cordons them
(``fmctl.dev/leaving`` on each, so a re-run finds them again), evicts their pods through
the Eviction API (disruption budgets respected, a refusal tried again) for as long as
``compute.drain.timeout`` allows, and only then ends exactly those instances with
``TerminateInstanceInAutoScalingGroup`` and the desired capacity decremented (what the
Kubernetes Cluster Autoscaler does to managed node groups), the group's minimum lowered
first so the decrement is allowed (the EC2 Auto Scaling API reference). A node that does
not drain in time stops the run, cordoned, naming what is still on it: nothing is ended
that the user did not let go.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.aws_errors import NotFound
from provisioner.drivers.kube import KubeApi
from provisioner.resources.context import Context, DrainSettings
from provisioner.resources.eks_upgrade import settled_nodegroup
from provisioner.resources.errors import ResourceError

#: The label `up` puts on a node it is taking out (with the cordon).
LEAVING = "fmctl.dev/leaving"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
#: Pods `kubectl drain` leaves alone: a DaemonSet's (its controller tolerates the cordon and
#: the pod goes with the node) and mirror pods (the kubelet's own).
MIRROR = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class Leaving:
    """A node being taken out: its name and its EC2 instance."""

    node: str
    instance: str


def nodes_of(api: KubeApi, nodegroup: str) -> list[dict[str, Any]]:
    """The Kubernetes nodes of a managed node group (EKS labels them with its name)."""
    return list(api.list("v1", "Node", selector=f"{NODEGROUP_LABEL}={nodegroup}"))


def evictable(pods: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    """The pods on ``node`` a drain must move: running or pending, not a DaemonSet's, not a
    mirror pod."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        owners = {o.get("kind") for o in meta.get("ownerReferences") or []}
        if "DaemonSet" in owners or MIRROR in (meta.get("annotations") or {}):
            continue
        out.append(pod)
    return out


def affected(api: KubeApi, nodegroup: str, count: int | None = None) -> tuple[int, int]:
    """(nodes, pods) a scale-in by ``count`` nodes (None: the whole group) would take out,
    as ``choose`` would pick them: what `plan` and the prompt say."""
    nodes = nodes_of(api, nodegroup)
    pods = api.list("v1", "Pod")
    picked = _ordered(nodes, pods)[: len(nodes) if count is None else count]
    return len(picked), sum(len(evictable(pods, n["metadata"]["name"])) for n in picked)


def _ordered(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Those a run was taking out first, then the fewest pods to move, then the newest."""

    def key(node: dict[str, Any]) -> tuple[int, int, float]:
        meta = node["metadata"]
        leaving = (meta.get("labels") or {}).get(LEAVING) == "true"
        return (0 if leaving else 1, len(evictable(pods, meta["name"])), -_epoch(meta))

    return sorted(nodes, key=key)


def _epoch(meta: dict[str, Any]) -> float:
    """A creationTimestamp (RFC 3339, UTC) as seconds; 0 when absent or unreadable."""
    import calendar

    try:
        stamp = time.strptime(str(meta.get("creationTimestamp", "")), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return 0.0
    return float(calendar.timegm(stamp))


def choose(api: KubeApi, nodegroup: str, count: int) -> list[Leaving]:
    """The ``count`` nodes of the group to take out (see the module's docstring)."""
    picked = _ordered(nodes_of(api, nodegroup), api.list("v1", "Pod"))[:count]
    return [Leaving(n["metadata"]["name"], instance_of(n)) for n in picked]


def everyone(api: KubeApi, nodegroup: str) -> list[Leaving]:
    """Every node of the group (a pool removed, or replaced blue/green)."""
    return [Leaving(n["metadata"]["name"], instance_of(n)) for n in nodes_of(api, nodegroup)]


def instance_of(node: dict[str, Any]) -> str:
    """The node's EC2 instance, from its providerID (``aws:///ZONE/i-...``, as the AWS cloud
    provider registers it)."""
    return str((node.get("spec") or {}).get("providerID", "")).rsplit("/", 1)[-1]


def drain(
    ctx: Context, rid: str, api: KubeApi, leaving: list[Leaving], settings: DrainSettings
) -> None:
    """Cordon ``leaving`` and evict their pods until none is left; ResourceError naming the
    pods still there (and what holds them) once ``settings.timeout_s`` has passed."""
    if not leaving:
        return
    names = [n.node for n in leaving]
    for name in names:
        api.cordon(name, {LEAVING: "true"})
    ctx.emit(rid, "updating", f"draining {len(names)} node(s): {', '.join(names)}")
    deadline = time.monotonic() + settings.timeout_s * ctx.time_scale
    held: list[str] = []
    while True:
        pods = api.list("v1", "Pod")
        left = [p for n in names for p in evictable(pods, n)]
        if not left:
            return
        held = []
        for pod in left:
            meta = pod["metadata"]
            if not api.evict(meta.get("namespace", "default"), meta["name"]):
                held.append(f"{meta.get('namespace', 'default')}/{meta['name']}")
        if time.monotonic() >= deadline:
            # What this last round evicted is gone: say what is still there, not what was
            # (a slow API lets the deadline pass between the evictions and the next look).
            pods = api.list("v1", "Pod")
            left = [p for n in names for p in evictable(pods, n)]
            if not left:
                return
            break
        ctx.fence()
        time.sleep(min(5.0, max(0.05, 5.0 * ctx.time_scale)))
    still = [f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}" for p in left]
    raise ResourceError(
        f"{len(still)} pod(s) still on the nodes being taken out after "
        f"{settings.timeout_s / 60:.0f} min: {', '.join(still[:8])}"
        + (f" (and {len(still) - 8} more)" if len(still) > 8 else "")
        + (f"; their disruption budgets refuse: {', '.join(held[:8])}" if held else ""),
        hint="the nodes stay cordoned and nothing was ended; let those pods finish (or "
        "delete them), or raise compute.drain.timeout, then `fmctl up` again",
    )


def terminate(ctx: Context, rid: str, leaving: list[Leaving]) -> None:
    """End exactly these instances through their Auto Scaling group, its desired capacity
    decremented (no replacement); one already gone is skipped."""
    autoscaling = ctx.aws.client("autoscaling")
    for node in leaving:
        if not node.instance.startswith("i-"):
            continue
        try:
            autoscaling.terminate_instance_in_auto_scaling_group(
                InstanceId=node.instance, ShouldDecrementDesiredCapacity=True
            )
        except NotFound:
            # An instance the group no longer has (ended by a run cut short): nothing to do.
            continue
        ctx.emit(rid, "deleting", f"{node.node} ({node.instance})")


def scale_in(
    ctx: Context,
    rid: str,
    nodegroup: str,
    api: KubeApi,
    live: tuple[int, int, int],
    want: tuple[int, int, int],
    settings: DrainSettings,
) -> None:
    """Take a node group from ``live`` to ``want`` (min, max, desired) nodes the careful way
    (see the module's docstring); the caller then sets ``want`` through EKS."""
    low, high, desired = live
    count = desired - want[2]
    if count <= 0:
        return
    leaving = choose(api, nodegroup, count)
    drain(ctx, rid, api, leaving, settings)
    if desired - len(leaving) < low:
        # Each termination lowers the desired capacity, which may not go below the minimum.
        ctx.aws.client("eks").update_nodegroup_config(
            clusterName=ctx.cluster,
            nodegroupName=nodegroup,
            scalingConfig={"minSize": want[0], "maxSize": high, "desiredSize": desired},
        )
        settled_nodegroup(ctx, rid, nodegroup)
    terminate(ctx, rid, leaving)
