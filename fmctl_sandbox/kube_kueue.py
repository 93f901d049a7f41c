"""The sandbox's stand-in for Kueue's admission: what a queued Job goes through once Kueue's
chart runs in the sandbox cluster (its CRDs served, its controller Deployment available).

What it does, after Kueue 0.19 (``pkg/controller/jobs/job``, ``pkg/scheduler``,
``pkg/cache`` TAS, ``pkg/controller/tas/topology_ungater.go``, ``pkg/dra``):

- A Job labelled ``kueue.x-k8s.io/queue-name`` (with ``batch/job`` among the configuration's
  integrations) gets a Workload ``job-NAME-HASH`` in its namespace: one pod set ``main`` of
  ``parallelism`` pods, its template, and the topology request its pod-template annotation
  makes (required / preferred level, the completion index as the rank label).
- A pending Workload is admitted whole or not at all, in creation order: its LocalQueue and
  ClusterQueue must exist; every resource its pods request must be covered by the
  ClusterQueue ("resource ... unavailable in ClusterQueue"); a ResourceClaimTemplate's
  devices count by the configuration's ``deviceClassMappings`` ("DeviceClass ... is not
  mapped in DRA configuration"); the first flavor whose node labels agree with the pods'
  node selector and whose unused nominal quota holds the whole gang is chosen; with a
  Topology, the gang must fit the free GPUs and EFA devices of the flavor's Ready,
  schedulable nodes whose scheduling taints the pods tolerate
  (``pkg/cache/scheduler/scheduling_simulator_default.go``) within one domain of the
  requested level (required), or of the tightest level that holds it (preferred).
  Otherwise it stays pending, with Kueue's reason.
- Admitted: the Workload's status carries the flavors, usage and the topology assignment
  (v1beta2's compact form), the Job is unsuspended with the flavor's node labels and
  tolerations and Kueue's topology scheduling gate on its template, and each pod, once
  made, is given its node by rank: the domains in the assignment's order, as the ungater
  does, so consecutive ranks share the tightest domain. (The topology part: ``kube_kueue_tas``.)
- A finished Job's Workload is Finished and its quota free; a deleted Job's Workload goes.
  ClusterQueue and LocalQueue status count pending and admitted workloads.

- A flavor with an admission check (the provisioning check, for a pool the Cluster
  Autoscaler sizes) reserves quota first and places by topology once the check has the
  nodes (``kube_kueue_checks``).

Left out: preemption, cohorts and borrowing, fair sharing, priorities, waitForPodsReady's
eviction, admission checks other than the provisioning one, partial admission; topology fit
counts GPUs and EFA devices per node (what the sandbox's scheduler accounts), CPU, memory and
hugepages against quota only;
the domain chosen among those that fit is the one with the least room (best fit).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from fmctl_sandbox import kube_kueue_checks as checks
from fmctl_sandbox.kube_kueue_model import (
    condition,
    is_pending,
    job_finished,
    owner_job,
    pending,
    quantity,
    set_condition,
    show,
)
from fmctl_sandbox.kube_kueue_tas import GATE, INDEX_LABEL, place, ungate
from fmctl_sandbox.kube_model import Cluster

Put = Callable[[str, str, dict[str, Any]], None]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
API = "kueue.x-k8s.io/v1beta2"
TOPOLOGY_ANNOTATIONS = ("required", "preferred", "unconstrained")


def controller(c: Cluster) -> dict[str, Any] | None:
    """Kueue's controller Deployment when it runs (available), else None."""
    if "workloads" not in c.crds:
        return None
    for (plural, _, _), deployment in c.objects.items():
        if plural != "deployments":
            continue
        pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
        images = [ct.get("image", "") for ct in pod.get("containers", [])]
        if not any("/kueue/kueue:" in i or i.startswith("kueue:") for i in images):
            continue
        if int((deployment.get("status") or {}).get("availableReplicas", 0) or 0) < 1:
            return None
        return deployment
    return None


def config(c: Cluster) -> dict[str, Any] | None:
    """Kueue's configuration when Kueue runs in the cluster (its Workload CRD served and its
    controller available), else None."""
    deployment = controller(c)
    if deployment is not None:
        namespace = deployment["metadata"].get("namespace", "")
        for (p, ns, _), cm in c.objects.items():
            text = ((cm.get("data") or {}) if p == "configmaps" and ns == namespace else {}).get(
                "controller_manager_config.yaml"
            )
            if text:
                return copy.deepcopy(_parsed(text))
        return {}
    return None


@functools.lru_cache(maxsize=16)
def _parsed(text: str) -> dict[str, Any]:
    """Kueue's configuration file read, once per text: the cluster asks for it at every
    write, which parsing it anew made a fifth of the emulator's time."""
    import yaml

    loaded = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return loaded if isinstance(loaded, dict) else {}


def reconcile(c: Cluster, put: Put) -> None:
    """Move every queued Job's Workload on as far as it can go now."""
    cfg = config(c)
    if cfg is None:
        return
    frameworks = ((cfg.get("integrations") or {}).get("frameworks")) or ["batch/job"]
    if "batch/job" not in frameworks:
        return
    jobs = {
        (ns, name): job
        for (plural, ns, name), job in sorted(c.objects.items())
        if plural == "jobs" and QUEUE_LABEL in (job["metadata"].get("labels") or {})
    }
    for (ns, name), job in jobs.items():
        _ensure_workload(c, put, ns, name, job)
    for key, wl in list(c.objects.items()):
        if key[0] != "workloads":
            continue
        owner = owner_job(wl)
        mine = jobs.get((key[1], owner)) if owner else None
        if owner and mine is None:
            del c.objects[key]  # the Job is gone: its Workload goes with it (owner reference)
            continue
        if mine is not None and job_finished(mine) and not condition(wl, "Finished"):
            set_condition(wl, "Finished", "True", "Succeeded", "Job finished")
    deployment = controller(c)
    checks.activate(c, deployment is not None and checks.controller_runs(c, deployment))
    checks.collect(c)
    for (plural, _, _), wl in sorted(c.objects.items()):
        if plural == "workloads" and checks.unfinished(wl):
            _checked(c, cfg, put, wl, jobs)
    pending = sorted(
        (
            wl
            for (p, _, _), wl in c.objects.items()
            if p == "workloads" and is_pending(wl) and wl["spec"].get("active", True)
        ),
        key=lambda w: (w["metadata"].get("creationTimestamp", ""), w["metadata"]["name"]),
    )
    for wl in pending:
        _admit(c, cfg, wl, jobs)
    ungate(c, jobs)
    _queue_status(c)


def _ensure_workload(c: Cluster, put: Put, ns: str, name: str, job: dict[str, Any]) -> None:
    uid = str(job["metadata"].get("uid", ""))
    wl_name = f"job-{name}-{hashlib.sha256(f'{name}/{uid}'.encode()).hexdigest()[:5]}"
    if ("workloads", ns, wl_name) in c.objects:
        return
    template = (job.get("spec") or {}).get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    request: dict[str, Any] = {}
    for mode in TOPOLOGY_ANNOTATIONS:
        value = annotations.get(f"kueue.x-k8s.io/podset-{mode}-topology")
        if value is not None:
            request[mode] = value if mode != "unconstrained" else value == "true"
    if request and job["spec"].get("completionMode") == "Indexed":
        request["podIndexLabel"] = INDEX_LABEL
    count = int(job["spec"].get("parallelism", 1) or 1)
    podset: dict[str, Any] = {"name": "main", "count": count, "template": template}
    if request:
        podset["topologyRequest"] = request
    workload = {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {
            "name": wl_name,
            "namespace": ns,
            "labels": {"kueue.x-k8s.io/job-uid": uid},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "queueName": job["metadata"]["labels"][QUEUE_LABEL],
            "podSets": [podset],
            "active": True,
        },
        "status": {},
    }
    put("workloads", ns, workload)


def _requests(c: Cluster, cfg: dict[str, Any], wl: dict[str, Any]) -> dict[str, Fraction] | str:
    """What one pod of the pod set asks for (DRA claims as their mapped resources), or why
    Kueue cannot tell."""
    podset = wl["spec"]["podSets"][0]
    spec = (podset.get("template") or {}).get("spec") or {}
    asked: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        for resource, value in ((container.get("resources") or {}).get("requests") or {}).items():
            asked[resource] = asked.get(resource, Fraction(0)) + quantity(value)
    mappings = {
        cls: m["name"]
        for m in ((cfg.get("resources") or {}).get("deviceClassMappings") or [])
        for cls in m.get("deviceClassNames") or []
    }
    ns = wl["metadata"]["namespace"]
    for claim in spec.get("resourceClaims") or []:
        template_name = claim.get("resourceClaimTemplateName")
        if not template_name:
            continue
        template = c.objects.get(("resourceclaimtemplates", ns, template_name))
        if template is None:
            return (
                f"failed to get claim spec for ResourceClaimTemplate {template_name} in podset "
                f'main: resourceclaimtemplates.resource.k8s.io "{template_name}" not found'
            )
        devices = ((template.get("spec") or {}).get("spec") or {}).get("devices") or {}
        for request in devices.get("requests") or []:
            exactly = request.get("exactly") or {}
            cls = exactly.get("deviceClassName", "")
            if exactly.get("allocationMode") == "All":
                return "AllocationMode 'All' is not supported"
            if cls not in mappings:
                return f"DeviceClass {cls} is not mapped in DRA configuration for podset main"
            count = Fraction(int(exactly.get("count", 1) or 1))
            asked[mappings[cls]] = asked.get(mappings[cls], Fraction(0)) + count
    return {r: v for r, v in asked.items() if v}


def _usage(c: Cluster, queue: str) -> dict[tuple[str, str], Fraction]:
    """(flavor, resource) -> what the queue's admitted, unfinished workloads use."""
    used: dict[tuple[str, str], Fraction] = {}
    for (plural, _, _), wl in c.objects.items():
        if plural != "workloads" or condition(wl, "Finished"):
            continue
        admission = (wl.get("status") or {}).get("admission") or {}
        if admission.get("clusterQueue") != queue:
            continue
        for assignment in admission.get("podSetAssignments") or []:
            flavors = assignment.get("flavors") or {}
            for resource, total in (assignment.get("resourceUsage") or {}).items():
                key = (flavors.get(resource, ""), resource)
                used[key] = used.get(key, Fraction(0)) + quantity(total)
    return used


def _admit(c: Cluster, cfg: dict[str, Any], wl: dict[str, Any], jobs: dict[Any, Any]) -> None:
    ns = wl["metadata"]["namespace"]
    local = c.objects.get(("localqueues", ns, wl["spec"].get("queueName", "")))
    if local is None:
        pending(wl, "Inadmissible", f"LocalQueue {wl['spec'].get('queueName')} doesn't exist")
        return
    cq_name = (local.get("spec") or {}).get("clusterQueue", "")
    cq = c.objects.get(("clusterqueues", "", cq_name))
    if cq is None:
        pending(wl, "Inadmissible", f"ClusterQueue {cq_name} doesn't exist")
        return
    if checks.inactive(c, cq) is not None:
        pending(wl, "Inadmissible", f"ClusterQueue {cq_name} is inactive")
        return
    asked = _requests(c, cfg, wl)
    if isinstance(asked, str):
        pending(wl, "Inadmissible", asked)
        return
    podset = wl["spec"]["podSets"][0]
    count = int(podset.get("count", 1))
    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    covered = {r for g in groups for r in g.get("coveredResources") or []}
    for resource in sorted(asked):
        if resource not in covered:
            pending(
                wl,
                "Pending",
                f"couldn't assign flavors to pod set main: resource {resource} unavailable "
                "in ClusterQueue",
            )
            return
    used = _usage(c, cq_name)
    pod_spec = (podset.get("template") or {}).get("spec") or {}
    why = "couldn't assign flavors to pod set main: no flavor in the ClusterQueue"
    for group in groups:
        for flavor in group.get("flavors") or []:
            rf = c.objects.get(("resourceflavors", "", flavor.get("name", "")))
            if rf is None:
                why = f"couldn't assign flavors to pod set main: no flavor {flavor.get('name')}"
                continue
            labels = (rf.get("spec") or {}).get("nodeLabels") or {}
            selector = pod_spec.get("nodeSelector") or {}
            if any(k in selector and selector[k] != v for k, v in labels.items()):
                why = (
                    f"couldn't assign flavors to pod set main: flavor {rf['metadata']['name']} "
                    "doesn't match node affinity"
                )
                continue
            nominal = {
                r["name"]: quantity(r.get("nominalQuota", 0)) for r in flavor.get("resources") or []
            }
            short = [
                (
                    r,
                    asked[r] * count
                    + used.get((rf["metadata"]["name"], r), Fraction(0))
                    - nominal.get(r, Fraction(0)),
                )
                for r in sorted(asked)
            ]
            short = [(r, more) for r, more in short if more > 0]
            if short:
                r, more = short[0]
                why = (
                    f"couldn't assign flavors to pod set main: insufficient unused quota for {r} "
                    f"in flavor {rf['metadata']['name']}, {show(more)} more needed"
                )
                continue
            wanted = checks.checks_for(cq, rf["metadata"]["name"])
            if wanted:
                # Quota first; placed by topology once the checks have the nodes there.
                tas = bool((rf.get("spec") or {}).get("topologyName"))
                usage = _assignment(rf["metadata"]["name"], asked, count)
                checks.reserve(wl, cq_name, usage, wanted, tas)
                return
            placed = place(c, rf, pod_spec, podset, asked, count)
            if isinstance(placed, str):
                why = placed
                continue
            _admitted(c, wl, cq_name, rf, asked, count, placed, jobs)
            return
    pending(wl, "Pending", why)


def _checked(
    c: Cluster, cfg: dict[str, Any], put: Put, wl: dict[str, Any], jobs: dict[Any, Any]
) -> None:
    """A workload holding quota while its admission checks run: their progress, then the
    second pass (placed by topology on the nodes there now), or its quota back."""
    verdict = checks.progress(c, put, wl)
    if verdict == "retry":
        states = wl["status"].get("admissionChecks") or []
        checks.release(wl, next((s["message"] for s in states if s["state"] == "Retry"), ""))
        return
    if verdict == "rejected":
        states = wl["status"].get("admissionChecks") or []
        checks.reject(wl, next((s["message"] for s in states if s["state"] == "Rejected"), ""))
        return
    if verdict != "ready":
        return
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    flavor = next(iter((assignment.get("flavors") or {}).values()), "")
    rf = c.objects.get(("resourceflavors", "", flavor))
    asked = _requests(c, cfg, wl)
    if rf is None or isinstance(asked, str):
        return
    podset = wl["spec"]["podSets"][0]
    count = int(podset.get("count", 1))
    pod_spec = (podset.get("template") or {}).get("spec") or {}
    placed = place(c, rf, pod_spec, podset, asked, count)
    if isinstance(placed, str):
        set_condition(wl, "Admitted", "False", "UnsatisfiedChecks", placed)
        return
    queue = wl["status"]["admission"]["clusterQueue"]
    _admitted(c, wl, queue, rf, asked, count, placed, jobs)


def _assignment(flavor: str, asked: dict[str, Fraction], count: int) -> dict[str, Any]:
    """A pod set's assignment: its flavor for every resource, what it uses, its count."""
    return {
        "name": "main",
        "flavors": {r: flavor for r in sorted(asked)},
        "resourceUsage": {r: show(v * count) for r, v in sorted(asked.items())},
        "count": count,
    }


def _assignments(wl: dict[str, Any]) -> list[dict[str, Any]]:
    admission = (wl.get("status") or {}).get("admission") or {}
    return list(admission.get("podSetAssignments") or [])


def _admitted(
    c: Cluster,
    wl: dict[str, Any],
    queue: str,
    rf: dict[str, Any],
    asked: dict[str, Fraction],
    count: int,
    placed: tuple[list[str], list[tuple[str, int]]] | None,
    jobs: dict[Any, Any],
) -> None:
    assignment = _assignment(rf["metadata"]["name"], asked, count)
    delayed = _assignments(wl)[:1]
    if delayed and delayed[0].get("delayedTopologyRequest"):
        assignment["delayedTopologyRequest"] = "Ready"
    if placed is not None:
        levels, nodes = placed
        assignment["topologyAssignment"] = {
            "levels": levels,
            "slices": [
                {
                    "domainCount": len(nodes),
                    "valuesPerLevel": [{"individual": {"roots": [n for n, _ in nodes]}}],
                    "podCounts": {"individual": [k for _, k in nodes]},
                }
            ],
        }
    wl["status"]["admission"] = {"clusterQueue": queue, "podSetAssignments": [assignment]}
    set_condition(
        wl, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {queue}"
    )
    set_condition(wl, "Admitted", "True", "Admitted", "The workload is admitted")
    job = jobs.get((wl["metadata"]["namespace"], owner_job(wl)))
    if job is None:
        return
    spec = rf.get("spec") or {}
    template = job["spec"].setdefault("template", {})
    pod = template.setdefault("spec", {})
    pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **(spec.get("nodeLabels") or {})}
    if spec.get("tolerations"):
        pod["tolerations"] = [*(pod.get("tolerations") or []), *spec["tolerations"]]
    if placed is not None:
        gates = [g for g in pod.get("schedulingGates") or [] if g.get("name") != GATE]
        pod["schedulingGates"] = [*gates, {"name": GATE}]
        meta = template.setdefault("metadata", {})
        meta.setdefault("annotations", {})[WORKLOAD_ANNOTATION] = wl["metadata"]["name"]
    job["spec"]["suspend"] = False


def _queue_status(c: Cluster) -> None:
    counts: dict[tuple[str, str, str], list[int]] = {}
    for (plural, ns, _), wl in c.objects.items():
        if plural != "workloads" or condition(wl, "Finished"):
            continue
        admitted = condition(wl, "Admitted")
        local = (ns, str(wl["spec"].get("queueName", "")))
        lq = c.objects.get(("localqueues", *local)) or {}
        cq = str((lq.get("spec") or {}).get("clusterQueue", ""))
        for key in (("local", *local), ("cluster", "", cq)):
            pair = counts.setdefault(key, [0, 0])
            pair[1 if admitted else 0] += 1
    for (plural, ns, name), queue in c.objects.items():
        if plural not in ("clusterqueues", "localqueues"):
            continue
        scope = "cluster" if plural == "clusterqueues" else "local"
        waiting, running = counts.get((scope, ns, name), [0, 0])
        status = queue.setdefault("status", {})
        status.update(
            pendingWorkloads=waiting,
            reservingWorkloads=running,
            admittedWorkloads=running,
        )
        status["conditions"] = [
            {
                "type": "Active",
                "status": "True",
                "reason": "Ready",
                "message": "Can admit new workloads",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ]
