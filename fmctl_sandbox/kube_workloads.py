"""The pods of the sandbox's DaemonSets, Deployments and StatefulSets, so that `kubectl get
pods` shows what runs (device plugins, exporters, Prometheus, Grafana) as in a real cluster.

What the controllers do, simply: a DaemonSet has one pod per node that admits its template
(``kube_controllers.admits``); a Deployment ``replicas`` pods named
``NAME-<template hash>-<suffix>`` and owned by its ReplicaSet ``NAME-<template hash>``; a
StatefulSet pods ``NAME-0`` … ``NAME-(replicas-1)``. A pod is bound to a node that admits it
and is not cordoned (a DaemonSet's: cordoned or not), Running and Ready; with no such node
it is Pending and Unschedulable.
A pod whose node is gone (drained: a node group scaled in, replaced by a version update or
deleted) or that no longer matches its template is deleted, and its controller makes it
again where it fits: what `kubectl drain` and a rolling update do. The pods do not run
anything (the kubelet runs Job pods, ``kube_jobs``, and the sandbox runs a Deployment of a
Python program as a process of its own, ``kube_programs``: its pod's log is the program's).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from fmctl_sandbox.kube_controllers import admits
from fmctl_sandbox.kube_model import Cluster

Put = Callable[[str, str, dict[str, Any]], None]
#: Workload plural -> the kind pods name as their owner (Deployments own theirs through a
#: ReplicaSet).
OWNER_KIND = {"daemonsets": "DaemonSet", "deployments": "ReplicaSet", "statefulsets": "StatefulSet"}
#: Label the sandbox keeps on a workload's pods: plural/namespace/name of the workload.
OWNER_LABEL = "sandbox.fmctl.dev/workload"


def _hash(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _schedulable(c: Cluster, template: dict[str, Any], daemon: bool = False) -> list[str]:
    """The nodes a pod of ``template`` may be placed on. A DaemonSet's pods stay on a
    cordoned node (its controller adds the node.kubernetes.io/unschedulable toleration to
    them: Kubernetes docs, "DaemonSet", taints and tolerations), so a drained node keeps its
    device plugins and exporters while its other pods leave."""
    spec = template.get("spec") or {}
    return sorted(
        name
        for (plural, _, name), node in c.objects.items()
        if plural == "nodes"
        and (daemon or not node["spec"].get("unschedulable"))
        and admits(spec, node)
    )


def _pod(
    workload: dict[str, Any],
    plural: str,
    namespace: str,
    name: str,
    owner: str,
    node: str | None,
    digest: str,
) -> dict[str, Any]:
    template = workload["spec"].get("template") or {}
    labels = {
        **((template.get("metadata") or {}).get("labels") or {}),
        OWNER_LABEL: f"{plural}.{workload['metadata']['name']}",
    }
    if plural == "deployments":
        labels["pod-template-hash"] = digest
    spec = {**(template.get("spec") or {})}
    if node:
        spec["nodeName"] = node
        status = {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
            "containerStatuses": [
                {"name": ct["name"], "ready": True, "image": ct.get("image", "")}
                for ct in spec.get("containers", [])
            ],
        }
    else:
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"sandbox.fmctl.dev/template": digest},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": OWNER_KIND[plural],
                    "name": owner,
                    "uid": str(workload["metadata"].get("uid", "")),
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": status,
    }


def reconcile_pods(c: Cluster, put: Put) -> None:
    """Make every workload's pods what its controller would have now."""
    nodes = {name for (plural, _, name) in c.objects if plural == "nodes"}
    wanted: set[tuple[str, str]] = set()
    for (plural, namespace, name), workload in sorted(c.objects.items()):
        if plural not in OWNER_KIND:
            continue
        template = workload["spec"].get("template") or {}
        digest = _hash(template)
        fits = _schedulable(c, template, daemon=plural == "daemonsets")
        mine = {
            key[2]: pod
            for key, pod in c.objects.items()
            if key[0] == "pods"
            and key[1] == namespace
            and pod["metadata"].get("labels", {}).get(OWNER_LABEL) == f"{plural}.{name}"
        }
        # Drained or outdated pods go first (the node left, or the template changed).
        for pod_name, pod in list(mine.items()):
            gone = pod["spec"].get("nodeName") and pod["spec"]["nodeName"] not in nodes
            stale = pod["metadata"].get("annotations", {}).get("sandbox.fmctl.dev/template")
            if gone or stale != digest or (plural == "daemonsets" and not fits):
                del c.objects[("pods", namespace, pod_name)]
                del mine[pod_name]
        if plural == "daemonsets":
            placed = {pod["spec"].get("nodeName"): n for n, pod in mine.items()}
            for node in fits:
                pod_name = placed.get(node) or f"{name}-{_hash([name, node])[:5]}"
                if pod_name not in mine:
                    put(
                        "pods",
                        namespace,
                        _pod(workload, plural, namespace, pod_name, name, node, digest),
                    )
                wanted.add((namespace, pod_name))
            for node, pod_name in placed.items():
                if node not in fits:
                    c.objects.pop(("pods", namespace, pod_name), None)
            continue
        replicas = int(workload["spec"].get("replicas", 1))
        if plural == "statefulsets":
            names = [f"{name}-{i}" for i in range(replicas)]
            owner = name
        else:
            owner = f"{name}-{digest}"
            keep = sorted(mine)[:replicas]
            names = keep + [f"{owner}-{uuid.uuid4().hex[:5]}" for _ in range(replicas - len(keep))]
        for i, pod_name in enumerate(names):
            wanted.add((namespace, pod_name))
            have = mine.get(pod_name)
            if have is not None and (have["spec"].get("nodeName") or not fits):
                continue
            bind = fits[i % len(fits)] if fits else None
            put("pods", namespace, _pod(workload, plural, namespace, pod_name, owner, bind, digest))
    # Pods of workloads deleted, or scaled in.
    for key, pod in list(c.objects.items()):
        labels = pod["metadata"].get("labels", {})
        if key[0] == "pods" and OWNER_LABEL in labels and (key[1], key[2]) not in wanted:
            del c.objects[key]
