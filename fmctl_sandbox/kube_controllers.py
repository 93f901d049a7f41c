"""What controllers and kubelets would report, for the sandbox's Kubernetes API: the
scheduler's admission (node selector, required node affinity, taints and tolerations),
DaemonSet and Deployment readiness, claims bound to their volume, and nodes advertising GPUs
and EFA devices only while a device plugin DaemonSet covers them."""

from __future__ import annotations

from typing import Any

from fmctl_sandbox.kube_model import EFA, GPU, PLUGINS, Cluster, Hardware


def admits(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """Would the scheduler place ``pod`` (a pod spec) on ``node``?"""
    labels = node["metadata"].get("labels", {})
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(_term(t, labels) for t in terms):
        return False
    tolerations = pod.get("tolerations") or []
    return all(
        any(_tolerates(t, taint) for t in tolerations)
        for taint in node["spec"].get("taints") or []
        if taint.get("effect") in ("NoSchedule", "NoExecute", "NO_SCHEDULE", "NO_EXECUTE")
    )


def _term(term: dict[str, Any], labels: dict[str, str]) -> bool:
    for e in term.get("matchExpressions") or []:
        op, key, values = e["operator"], e["key"], e.get("values") or []
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


def _tolerates(t: dict[str, Any], taint: dict[str, Any]) -> bool:
    if t.get("key") not in (None, taint.get("key")):
        return False
    effect = (
        taint.get("effect", "")
        .replace("NO_SCHEDULE", "NoSchedule")
        .replace("NO_EXECUTE", "NoExecute")
    )
    if t.get("effect") not in (None, "", effect):
        return False
    return t.get("operator") == "Exists" or t.get("value") == taint.get("value")


def reconcile(c: Cluster) -> None:
    """Bring status fields to what the controllers would report now."""
    nodes = [o for (p, _, _), o in c.objects.items() if p == "nodes"]
    plugins: dict[str, set[str]] = {n["metadata"]["name"]: set() for n in nodes}
    for (plural, _, _), obj in c.objects.items():
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        fits = [n for n in nodes if admits(pod, n)]
        if plural == "daemonsets":
            images = [ct.get("image", "") for ct in pod.get("containers", [])]
            for n in fits:
                for marker, resource in PLUGINS.items():
                    if any(f"/{marker}:" in i or i.startswith(f"{marker}:") for i in images):
                        plugins[n["metadata"]["name"]].add(resource)
            count = len(fits)
            obj["status"] = {
                "desiredNumberScheduled": count,
                "currentNumberScheduled": count,
                "numberReady": count,
                "numberAvailable": count,
                "updatedNumberScheduled": count,
                "observedGeneration": obj["metadata"].get("generation", 1),
            }
        elif plural in ("deployments", "statefulsets"):
            want = obj["spec"].get("replicas", 1)
            ready = want if fits else 0
            obj["status"] = {
                "replicas": want,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "updatedReplicas": ready,
                "observedGeneration": obj["metadata"].get("generation", 1),
            }
        elif plural == "persistentvolumeclaims":
            volume = obj["spec"].get("volumeName")
            bound = volume and ("persistentvolumes", "", volume) in c.objects
            obj["status"] = {"phase": "Bound" if bound else "Pending"}
    for n in nodes:
        hw = c.hardware.get(n["metadata"]["name"], Hardware(0, 0))
        has = plugins[n["metadata"]["name"]]
        allocatable = {"cpu": "188", "memory": "1900Gi", "pods": "737"}
        if GPU in has and hw.gpus:
            allocatable[GPU] = str(hw.gpus)
        if EFA in has and hw.efa:
            allocatable[EFA] = str(hw.efa)
        n["status"]["allocatable"] = allocatable
        n["status"]["capacity"] = dict(allocatable)
