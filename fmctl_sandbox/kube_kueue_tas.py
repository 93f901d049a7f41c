"""Kueue's topology-aware scheduling, as the sandbox's Kueue stand-in plays it
(``kube_kueue`` says after which Kueue sources): where a gang fits by topology among the
flavor's Ready, schedulable nodes whose taints its pods tolerate, what admitted workloads
already hold on each node, and the ungater that gives each gated pod its node by rank.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from fmctl_sandbox.kube_controllers import admits
from fmctl_sandbox.kube_kueue_model import condition, owner_job, quantity
from fmctl_sandbox.kube_model import EFA, GPU, Cluster

GATE = "kueue.x-k8s.io/topology"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
HOSTNAME = "kubernetes.io/hostname"


def place(
    c: Cluster,
    rf: dict[str, Any],
    pod_spec: dict[str, Any],
    podset: dict[str, Any],
    asked: dict[str, Fraction],
    count: int,
) -> tuple[list[str], list[tuple[str, int]]] | str | None:
    """The topology assignment (levels, [(node, pods)] in rank order), None without
    topology, or why the gang fits nowhere."""
    spec = rf.get("spec") or {}
    topology_name = spec.get("topologyName")
    if not topology_name:
        return None
    topology = c.objects.get(("topologies", "", topology_name))
    if topology is None:
        return f"couldn't assign flavors to pod set main: Topology {topology_name} not found"
    levels = [lv["nodeLabel"] for lv in (topology.get("spec") or {}).get("levels") or []]
    request = podset.get("topologyRequest") or {}
    wanted = request.get("required") or request.get("preferred") or levels[-1]
    if wanted not in levels:
        return (
            f"couldn't assign flavors to pod set main: the topology {topology_name} has no "
            f"level {wanted}"
        )
    probe = {
        **pod_spec,
        "nodeSelector": {**(pod_spec.get("nodeSelector") or {}), **(spec.get("nodeLabels") or {})},
        "tolerations": [*(pod_spec.get("tolerations") or []), *(spec.get("tolerations") or [])],
    }
    room: dict[str, int] = {}
    places: dict[str, tuple[str, ...]] = {}
    taken = reserved(c)
    for (plural, _, name), obj in sorted(c.objects.items()):
        if plural != "nodes" or obj["spec"].get("unschedulable") or not ready(obj):
            continue
        labels = obj["metadata"].get("labels") or {}
        if any(lv not in labels for lv in levels) or not admits(probe, obj):
            continue
        allocatable = (obj.get("status") or {}).get("allocatable") or {}
        fits = count
        for resource in (GPU, EFA):
            if asked.get(resource):
                free = quantity(allocatable.get(resource, 0)) - taken.get((name, resource), 0)
                fits = min(fits, int(free // asked[resource]))
        if fits > 0:
            room[name] = fits
            places[name] = tuple(labels[lv] for lv in levels)
    depth = levels.index(wanted) + 1
    tries = [depth] if "required" in request else list(range(depth, -1, -1))
    for d in tries:
        domains: dict[tuple[str, ...], list[str]] = {}
        for node in room:
            domains.setdefault(places[node][:d], []).append(node)
        fitting = [
            (sum(room[n] for n in nodes), key, nodes)
            for key, nodes in domains.items()
            if sum(room[n] for n in nodes) >= count
        ]
        if not fitting:
            continue
        _, _, nodes = min(fitting)  # best fit: the domain with the least room that holds it
        assignment: list[tuple[str, int]] = []
        left = count
        for node in sorted(nodes, key=lambda n: (places[n], n)):
            take = min(room[node], left)
            if take:
                assignment.append((node, take))
                left -= take
        return [HOSTNAME], assignment
    kind = "required" if "required" in request else "preferred"
    return (
        f"couldn't assign flavors to pod set main: topology \"{topology_name}\" doesn't allow "
        f"to fit any of {count} pod(s) ({kind} {wanted})"
    )


def ready(node: dict[str, Any]) -> bool:
    return any(
        x.get("type") == "Ready" and x.get("status") == "True"
        for x in (node.get("status") or {}).get("conditions") or []
    )


def reserved(c: Cluster) -> dict[tuple[str, str], int]:
    """(node, resource) -> what admitted, unfinished workloads hold there, and live pods of
    anything else."""
    held: dict[tuple[str, str], int] = {}
    queued_pods: set[tuple[str, str]] = set()
    for (plural, ns, _), wl in c.objects.items():
        if plural != "workloads" or condition(wl, "Finished") or not condition(wl, "QuotaReserved"):
            continue
        owner = owner_job(wl)
        for assignment in ((wl.get("status") or {}).get("admission") or {}).get(
            "podSetAssignments"
        ) or []:
            per_pod = {
                r: quantity(v) / max(1, int(assignment.get("count", 1)))
                for r, v in (assignment.get("resourceUsage") or {}).items()
            }
            for node, pods in expand(assignment.get("topologyAssignment")):
                for resource in (GPU, EFA):
                    held[(node, resource)] = held.get((node, resource), 0) + int(
                        per_pod.get(resource, 0) * pods
                    )
        if owner:
            queued_pods.add((ns, owner))
    for (plural, ns, _), pod in c.objects.items():
        if plural != "pods" or not pod["spec"].get("nodeName"):
            continue
        job = (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")
        if (ns, job) in queued_pods or (pod.get("status") or {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            continue
        for container in pod["spec"].get("containers") or []:
            requests = (container.get("resources") or {}).get("requests") or {}
            for resource in (GPU, EFA):
                key = (pod["spec"]["nodeName"], resource)
                held[key] = held.get(key, 0) + int(quantity(requests.get(resource, 0)))
    return held


def expand(assignment: dict[str, Any] | None) -> list[tuple[str, int]]:
    """v1beta2's compact topology assignment as (node, pods) in order."""
    out: list[tuple[str, int]] = []
    for s in (assignment or {}).get("slices") or []:
        values = (s.get("valuesPerLevel") or [{}])[-1]
        if "universal" in values:
            nodes = [values["universal"]] * int(s.get("domainCount", 1))
        else:
            individual = values.get("individual") or {}
            nodes = [
                f"{individual.get('prefix', '')}{root}{individual.get('suffix', '')}"
                for root in individual.get("roots") or []
            ]
        counts = s.get("podCounts") or {}
        pods = counts.get("individual") or [counts.get("universal", 1)] * len(nodes)
        out += list(zip(nodes, (int(p) for p in pods), strict=False))
    return out


def ungate(c: Cluster, jobs: dict[Any, Any]) -> None:
    """Give each gated pod of an admitted job its node by rank, in the assignment's order."""
    by_job: dict[tuple[str, str], list[str]] = {}
    for (plural, ns, _), wl in c.objects.items():
        if plural != "workloads" or not condition(wl, "Admitted"):
            continue
        for assignment in ((wl.get("status") or {}).get("admission") or {}).get(
            "podSetAssignments"
        ) or []:
            ranks = [n for n, k in expand(assignment.get("topologyAssignment")) for _ in range(k)]
            if ranks:
                by_job[(ns, owner_job(wl) or "")] = ranks
    for (plural, ns, _), pod in c.objects.items():
        if plural != "pods":
            continue
        gates = pod["spec"].get("schedulingGates") or []
        if not any(g.get("name") == GATE for g in gates):
            continue
        labels = pod["metadata"].get("labels") or {}
        order = by_job.get((ns, labels.get("batch.kubernetes.io/job-name", ""))) or []
        index = labels.get(INDEX_LABEL)
        if not order or index is None or int(index) >= len(order):
            continue
        pod["spec"]["nodeSelector"] = {
            **(pod["spec"].get("nodeSelector") or {}),
            HOSTNAME: order[int(index)],
        }
        pod["spec"]["schedulingGates"] = [g for g in gates if g.get("name") != GATE]
