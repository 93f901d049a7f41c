"""What the sandbox's Cluster Autoscaler (``eks_autoscaler``) reads: the flags of its
Deployment (kube-system/cluster-autoscaler, an image of
``registry.k8s.io/autoscaling/cluster-autoscaler``), and, each scan, the cluster as it weighs
it: the nodes with their free GPUs and EFA devices and whether anything but DaemonSet pods
runs there, the ProvisioningRequests of its class with their PodTemplates, and the pods the
scheduler placed nowhere.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from fmctl_sandbox.kube_kueue_model import quantity
from fmctl_sandbox.kube_model import EFA, GPU, Cluster

NAMESPACE, NAME = "kube-system", "cluster-autoscaler"
IMAGE = "/autoscaling/cluster-autoscaler:"
CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
#: Resources fitted per node: what the sandbox's nodes advertise (it models no hugepages).
FITTED = (GPU, EFA)


@dataclass(frozen=True)
class Flags:
    """What the autoscaler was started with."""

    discovery: dict[str, str]
    unneeded_seconds: float
    gpu_threshold: float
    provisioning: bool
    #: ``--startup-taint`` keys (repeatable).
    startup_taints: tuple[str, ...] = ()

    def startup(self, key: str) -> bool:
        """Is ``key`` a startup taint? Those of ``--startup-taint``, and every key with the
        startup-taint (or the deprecated ignore-taint) prefix (cluster-autoscaler/FAQ.md,
        "How does Cluster Autoscaler treat nodes with status/startup/ignore taints?")."""
        return key in self.startup_taints or key.startswith(STARTUP_PREFIXES)


def _duration(text: str) -> float:
    """A Go duration ("1h30m", "600s") in seconds."""
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    for char in text:
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total, number = total + float(number) * units[char], ""
    return total


def flags(deployment: dict[str, Any]) -> Flags | None:
    """The flags of the Deployment's autoscaler container (None: none on AWS)."""
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod.get("containers") or []:
        if IMAGE not in container.get("image", ""):
            continue
        args = [*(container.get("command") or []), *(container.get("args") or [])]
        given = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
        if given.get("cloud-provider") != "aws":
            return None
        discovery = given.get("node-group-auto-discovery", "").removeprefix("asg:tag=")
        pairs = [part.partition("=") for part in discovery.split(",") if part]
        tags = {key: value for key, _, value in pairs}
        return Flags(
            tags,
            _duration(given.get("scale-down-unneeded-time", "10m")),
            float(given.get("scale-down-gpu-utilization-threshold", "0.5")),
            given.get("enable-provisioning-requests", "false") == "true",
            tuple(a.split("=", 1)[1] for a in args if a.startswith("--startup-taint=")),
        )
    return None


#: Taint key prefixes the autoscaler takes as startup taints.
STARTUP_PREFIXES = (
    "startup-taint.cluster-autoscaler.kubernetes.io/",
    "ignore-taint.cluster-autoscaler.kubernetes.io/",
)


@dataclass(frozen=True)
class Node:
    """A node as the autoscaler weighs it."""

    name: str
    group: str
    obj: dict[str, Any]
    free: dict[str, Fraction]
    gpus: Fraction
    gpus_requested: Fraction
    only_daemons: bool
    ready: bool
    #: It carries a startup taint: Ready to Kubernetes, about to be to the autoscaler.
    starting: bool = False


@dataclass(frozen=True)
class Request:
    """A ProvisioningRequest of the autoscaler's class, its pods resolved."""

    namespace: str
    name: str
    pods: tuple[tuple[dict[str, Any], int], ...]
    conditions: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class View:
    """What one scan reads of the cluster."""

    flags: Flags
    nodes: tuple[Node, ...]
    requests: tuple[Request, ...]
    #: Pods the scheduler placed nowhere (Pending, no node, no scheduling gate), by spec.
    unplaced: tuple[dict[str, Any], ...] = ()


def asks(pod: dict[str, Any]) -> dict[str, Fraction]:
    asked: dict[str, Fraction] = {}
    for container in pod.get("containers") or []:
        for res, value in ((container.get("resources") or {}).get("requests") or {}).items():
            asked[res] = asked.get(res, Fraction(0)) + quantity(value)
    return asked


def read(c: Cluster) -> View | None:

    deployment = c.objects.get(("deployments", NAMESPACE, NAME))
    if deployment is None or not (deployment.get("status") or {}).get("availableReplicas"):
        return None
    found = flags(deployment)
    if found is None:
        return None
    used: dict[str, dict[str, Fraction]] = {}
    workloads: set[str] = set()
    unplaced = []
    for (plural, _, _), pod in c.objects.items():
        spec = pod.get("spec") or {}
        waiting = (pod.get("status") or {}).get("phase") in (None, "Pending")
        if plural == "pods" and waiting and not spec.get("nodeName"):
            if not spec.get("schedulingGates") and not _daemon(pod):
                unplaced.append(copy.deepcopy(spec))
            continue
        node = spec.get("nodeName") if plural == "pods" else None
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        held = used.setdefault(node, {})
        for res, value in asks(pod["spec"]).items():
            held[res] = held.get(res, Fraction(0)) + value
        if not _daemon(pod):
            workloads.add(node)
    nodes = []
    for (plural, _, name), obj in c.objects.items():
        if plural != "nodes":
            continue
        alloc = {
            r: quantity(v) for r, v in ((obj.get("status") or {}).get("allocatable") or {}).items()
        }
        mine = used.get(name, {})
        # As a template for the group, a node without its startup taints: what it offers
        # once they are lifted.
        sanitized = copy.deepcopy(obj)
        taints = (sanitized.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if not found.startup(str(t.get("key", "")))]
        if len(kept) != len(taints):
            sanitized["spec"]["taints"] = kept
        nodes.append(
            Node(
                name,
                obj["metadata"].get("labels", {}).get("eks.amazonaws.com/nodegroup", ""),
                sanitized,
                {r: alloc.get(r, Fraction(0)) - mine.get(r, Fraction(0)) for r in FITTED},
                alloc.get(GPU, Fraction(0)),
                mine.get(GPU, Fraction(0)),
                name not in workloads,
                any(
                    x.get("type") == "Ready" and x.get("status") == "True"
                    for x in (obj.get("status") or {}).get("conditions") or []
                )
                and len(kept) == len(taints),
                len(kept) != len(taints),
            )
        )
    requests = []
    for (plural, ns, name), req in c.objects.items():
        spec = req.get("spec") or {}
        if plural != "provisioningrequests" or spec.get("provisioningClassName") != CLASS:
            continue
        pods = []
        for ps in spec.get("podSets") or []:
            template = c.objects.get(("podtemplates", ns, ps["podTemplateRef"]["name"]))
            if template is not None:
                pods.append(
                    (
                        copy.deepcopy((template.get("template") or {}).get("spec") or {}),
                        int(ps["count"]),
                    )
                )
        conditions = tuple(copy.deepcopy((req.get("status") or {}).get("conditions") or []))
        requests.append(Request(ns, name, tuple(pods), conditions))
    nodes.sort(key=lambda n: n.name)
    return View(found, tuple(nodes), tuple(requests), tuple(unplaced))


def _daemon(pod: dict[str, Any]) -> bool:
    """A DaemonSet's pod (its owner reference)."""
    return any(r.get("kind") == "DaemonSet" for r in pod["metadata"].get("ownerReferences") or [])
