"""The Eviction API of the sandbox's Kubernetes, with PodDisruptionBudgets: what `kubectl
drain` and any drainer use to take pods off a node without breaking a budget.

``POST /api/v1/namespaces/NS/pods/NAME/eviction`` (policy/v1 Eviction) deletes the pod when
every PodDisruptionBudget selecting it allows one more disruption, and answers 429
TooManyRequests otherwise ("Cannot evict pod as it would violate the pod's disruption
budget."), as the API server does (Kubernetes docs, "API-initiated Eviction"). A budget
allows ``currentHealthy - desiredHealthy`` disruptions, where the healthy pods are the
selected ones Running and Ready, and ``desiredHealthy`` is ``minAvailable`` (a number, or a
percentage of the selected pods rounded up) or the selected pods less ``maxUnavailable``
(Kubernetes docs, "Specifying a Disruption Budget for your Application"). A pod that is
not healthy may be evicted whatever the budget (the default unhealthyPodEvictionPolicy,
IfHealthyBudget, lets it go while the budget is met; the sandbox lets it go always: the
simplification). A workload's evicted pod is made again by its controller where it fits.
A node that leaves (``drain_node``: its group scaled in, replaced or deleted) takes its pods
with it: a workload's go, a Job's fail as evicted.
"""

from __future__ import annotations

import math
from typing import Any

from fmctl_sandbox.kube_model import ApiError, Cluster
from fmctl_sandbox.kube_workloads import OWNER_LABEL


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's matchLabels and matchExpressions (In, NotIn, Exists,
    DoesNotExist) against ``labels``; an empty selector selects every pod."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for term in selector.get("matchExpressions") or []:
        key, op, values = term["key"], term["operator"], term.get("values") or []
        present = key in labels
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and present and labels[key] in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def healthy(pod: dict[str, Any]) -> bool:
    """Running and Ready."""
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return status.get("phase") == "Running" and ready


def _budget(value: Any, selected: int) -> int:
    """A budget's number: an integer, or a percentage of ``selected`` rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(selected * int(value[:-1]) / 100)
    return int(value)


def allowed(pdb: dict[str, Any], pods: list[dict[str, Any]]) -> int:
    """How many more disruptions the budget allows among ``pods`` (those it selects)."""
    spec = pdb.get("spec") or {}
    current = sum(healthy(p) for p in pods)
    if "minAvailable" in spec:
        desired = _budget(spec["minAvailable"], len(pods))
    elif "maxUnavailable" in spec:
        desired = len(pods) - _budget(spec["maxUnavailable"], len(pods))
    else:
        return current
    return current - desired


def evict(c: Cluster, namespace: str, name: str) -> None:
    """Evict the pod (delete it), or raise 429 naming the budget that forbids it."""
    pod = c.objects.get(("pods", namespace, name))
    if pod is None:
        raise ApiError(404, "NotFound", f'pods "{name}" not found')
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if healthy(pod):
        for (plural, ns, pdb_name), pdb in sorted(c.objects.items()):
            if plural != "poddisruptionbudgets" or ns != namespace:
                continue
            selector = (pdb.get("spec") or {}).get("selector") or {}
            if not _selects(selector, labels):
                continue
            pods = [
                p
                for (kind, pns, _), p in c.objects.items()
                if kind == "pods"
                and pns == namespace
                and _selects(selector, (p.get("metadata") or {}).get("labels") or {})
            ]
            if allowed(pdb, pods) < 1:
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget. "
                    f"The disruption budget {pdb_name} needs "
                    f"{sum(healthy(p) for p in pods) - allowed(pdb, pods)} healthy pods and "
                    f"has {sum(healthy(p) for p in pods)} currently",
                )
    del c.objects[("pods", namespace, name)]


def drain_node(c: Cluster, node: str) -> None:
    """A node leaves: its pods are evicted (a workload's go, and their controller makes
    them again elsewhere; a Job's fail as evicted), then the node goes."""
    for key, pod in list(c.objects.items()):
        if key[0] != "pods" or pod["spec"].get("nodeName") != node:
            continue
        if pod["metadata"].get("labels", {}).get(OWNER_LABEL):
            del c.objects[key]
        elif (pod.get("status") or {}).get("phase") in (None, "Pending", "Running"):
            pod["status"] = {
                "phase": "Failed",
                "reason": "Evicted",
                "message": f"The node {node} was drained.",
            }
    c.objects.pop(("nodes", "", node), None)
    c.hardware.pop(node, None)
