"""The sandbox's stand-in for Kueue's provisioning admission check: a job for a flavor whose
nodes the Cluster Autoscaler makes is admitted only once a ProvisioningRequest has them.

After Kueue 0.19.2 (``pkg/controller/admissionchecks/provisioning``, ``cmd/kueue/main.go``,
``pkg/cache/scheduler/clusterqueue.go``, the docs' "ProvisioningRequest" and "Topology Aware
Scheduling: ClusterAutoscaler support"):

- The provisioning controller runs only if the ProvisioningRequest API
  (autoscaling.x-k8s.io/v1) was served when Kueue's pods started ("Skipping provisioning
  controller setup"); then it marks each AdmissionCheck of its controller name Active, or not
  (``BadParametersRef``) when its ProvisioningRequestConfig is missing. A ClusterQueue
  naming a missing or inactive check admits nothing ("Can't admit new workloads: references
  inactive AdmissionCheck(s): NAME."), and its workloads wait ("ClusterQueue NAME is
  inactive").
- A workload whose flavor has the check gets its quota reserved first (QuotaReserved, the
  topology assignment delayed: ``delayedTopologyRequest: Pending``), its check Pending; if a
  pod set uses the config's managed resources, a PodTemplate ``ppt-REQUEST-PODSET`` (the pod
  set's template with the flavor's node labels and tolerations) and a ProvisioningRequest
  ``WORKLOAD-CHECK-ATTEMPT`` (class and parameters from the config) are made, owned by the
  workload; otherwise the check is Ready ("ProvisioningRequest not needed").
- The request's conditions drive the check: Provisioned → Ready, with its message; Failed,
  or BookingExpired before admission → Retry (the quota is given back and the workload
  queued again, the next attempt a new request) while attempts are within
  ``retryStrategy.backoffLimitCount``, else Rejected (the workload is deactivated);
  otherwise Pending with the Provisioned condition's message.
- With every check Ready, the second pass places the job by topology on the nodes there
  now; until they are, it keeps its quota and waits.

Left out: the retry backoff's wait (a retry is queued again at once), podSetUpdates,
pod set merging, CapacityRevoked.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from fmctl_sandbox.kube_kueue_model import condition, set_condition
from fmctl_sandbox.kube_model import Cluster

Put = Callable[[str, str, dict[str, Any]], None]
CONTROLLER = "kueue.x-k8s.io/provisioning-request"
REQUEST_API = "autoscaling.x-k8s.io/v1"
NOT_NEEDED = "ProvisioningRequest not needed"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def controller_runs(c: Cluster, kueue: dict[str, Any]) -> bool:
    """Whether Kueue's provisioning controller runs: the ProvisioningRequest API was served
    when the pods of ``kueue`` (its Deployment, as now) started. The first time the sandbox
    sees a pod template is when those pods start."""
    template = (kueue.get("spec") or {}).get("template") or {}
    started = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    if started not in c.kueue_starts:
        c.kueue_starts[started] = "provisioningrequests" in c.crds
    return c.kueue_starts[started]


def activate(c: Cluster, runs: bool) -> None:
    """Each provisioning AdmissionCheck's Active condition, as the controller sets it (none
    while it does not run)."""
    for (plural, _, _), ac in c.objects.items():
        if plural != "admissionchecks" or not runs:
            continue
        spec = ac.get("spec") or {}
        if spec.get("controllerName") != CONTROLLER:
            continue
        ref = spec.get("parameters") or {}
        found = (
            ref.get("kind") == "ProvisioningRequestConfig"
            and (
                "provisioningrequestconfigs",
                "",
                ref.get("name", ""),
            )
            in c.objects
        )
        status, reason, message = (
            ("True", "Active", "The admission check is active")
            if found
            else (
                "False",
                "BadParametersRef",
                f"ProvisioningRequestConfig {ref.get('name')} not found",
            )
        )
        ac.setdefault("status", {})["conditions"] = [
            {
                "type": "Active",
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": _now(),
                "observedGeneration": ac["metadata"].get("generation", 1),
            }
        ]


def _rules(cq: dict[str, Any]) -> list[dict[str, Any]]:
    strategy = (cq.get("spec") or {}).get("admissionChecksStrategy") or {}
    return list(strategy.get("admissionChecks") or [])


def inactive(c: Cluster, cq: dict[str, Any]) -> str | None:
    """Why the ClusterQueue admits nothing (Kueue's ``inactiveReason``), or None."""
    names = sorted({str(rule.get("name", "")) for rule in _rules(cq)})
    missing = [n for n in names if ("admissionchecks", "", n) not in c.objects]
    idle = [
        n
        for n in names
        if n not in missing and not condition(c.objects[("admissionchecks", "", n)], "Active")
    ]
    messages = []
    if missing:
        messages.append(f"references missing AdmissionCheck(s): {','.join(missing)}")
    if idle:
        messages.append(f"references inactive AdmissionCheck(s): {','.join(idle)}")
    return f"Can't admit new workloads: {', '.join(messages)}." if messages else None


def checks_for(cq: dict[str, Any], flavor: str) -> list[str]:
    """The admission checks a workload assigned ``flavor`` goes through."""
    return sorted(
        str(rule["name"])
        for rule in _rules(cq)
        if not rule.get("onFlavors") or flavor in rule["onFlavors"]
    )


def reserve(
    wl: dict[str, Any], queue: str, assignment: dict[str, Any], checks: list[str], tas: bool
) -> None:
    """Quota reserved, the topology assignment delayed until the checks are Ready."""
    if tas:
        assignment["delayedTopologyRequest"] = "Pending"
    wl["status"]["admission"] = {"clusterQueue": queue, "podSetAssignments": [assignment]}
    set_condition(
        wl, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {queue}"
    )
    set_condition(
        wl, "Admitted", "False", "UnsatisfiedChecks", "The workload has not all checks ready"
    )
    retries = {s["name"]: s.get("retryCount", 0) for s in wl["status"].get("admissionChecks") or []}
    wl["status"]["admissionChecks"] = [
        {
            "name": name,
            "state": "Pending",
            "message": "",
            "lastTransitionTime": _now(),
            **({"retryCount": retries[name]} if retries.get(name) else {}),
        }
        for name in checks
    ]


def _uses(pod_spec: dict[str, Any], resources: list[str]) -> bool:
    if not resources:
        return True
    for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        res = container.get("resources") or {}
        asked = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        if any(r in asked for r in resources):
            return True
    return False


def _request_name(wl: dict[str, Any], check: str, attempt: int) -> str:
    return f"{wl['metadata']['name']}-{check}-{attempt}"[:253]


def _made_for(wl: dict[str, Any], name: str) -> dict[str, Any]:
    """The metadata of an object the controller makes for workload ``wl``: its label, and
    the workload as its controlling owner (it goes with the workload)."""
    owner = {
        "apiVersion": wl["apiVersion"],
        "kind": wl["kind"],
        "name": wl["metadata"]["name"],
        "uid": wl["metadata"].get("uid", ""),
        "controller": True,
    }
    return {
        "name": name,
        "namespace": wl["metadata"]["namespace"],
        "labels": {"kueue.x-k8s.io/managed": "true"},
        "ownerReferences": [owner],
    }


def _make_request(
    c: Cluster, put: Put, wl: dict[str, Any], check: str, config: dict[str, Any], name: str
) -> None:
    ns = wl["metadata"]["namespace"]
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    flavor = next(iter((assignment.get("flavors") or {}).values()), "")
    rf = (c.objects.get(("resourceflavors", "", flavor)) or {}).get("spec") or {}
    pod_sets = []
    for ps in wl["spec"]["podSets"]:
        template = json.loads(json.dumps(ps.get("template") or {}))
        spec = template.setdefault("spec", {})
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **(rf.get("nodeLabels") or {})}
        if rf.get("tolerations"):
            spec["tolerations"] = [*(spec.get("tolerations") or []), *rf["tolerations"]]
        pt_name = f"ppt-{name}-{ps['name']}"[:253]
        put(
            "podtemplates",
            ns,
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": _made_for(wl, pt_name),
                "template": template,
            },
        )
        pod_sets.append({"podTemplateRef": {"name": pt_name}, "count": int(ps.get("count", 1))})
    spec_config = config.get("spec") or {}
    put(
        "provisioningrequests",
        ns,
        {
            "apiVersion": REQUEST_API,
            "kind": "ProvisioningRequest",
            "metadata": _made_for(wl, name),
            "spec": {
                "provisioningClassName": spec_config.get("provisioningClassName", ""),
                "parameters": dict(spec_config.get("parameters") or {}),
                "podSets": pod_sets,
            },
        },
    )


def _true(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for x in (obj.get("status") or {}).get("conditions") or []:
        if x.get("type") == kind and x.get("status") == "True":
            return dict(x)
    return None


def progress(c: Cluster, put: Put, wl: dict[str, Any]) -> str:
    """Move a reserved workload's checks on: "ready" (all Ready), "waiting", "retry" (its
    quota given back: queued again) or "rejected" (deactivated)."""
    ns = wl["metadata"]["namespace"]
    verdict = "ready"
    for state in wl["status"].get("admissionChecks") or []:
        if state.get("state") == "Ready":
            continue
        ac = c.objects.get(("admissionchecks", "", state["name"])) or {}
        ref = (ac.get("spec") or {}).get("parameters") or {}
        config = c.objects.get(("provisioningrequestconfigs", "", ref.get("name", ""))) or {}
        managed = list((config.get("spec") or {}).get("managedResources") or [])
        pods = [(ps.get("template") or {}).get("spec") or {} for ps in wl["spec"]["podSets"]]
        if not any(_uses(p, managed) for p in pods):
            state.update(state="Ready", message=NOT_NEEDED, lastTransitionTime=_now())
            continue
        attempt = int(state.get("retryCount", 0)) + 1
        name = _request_name(wl, state["name"], attempt)
        request = c.objects.get(("provisioningrequests", ns, name))
        if request is None:
            _make_request(c, put, wl, state["name"], config, name)
            verdict = "waiting"
            continue
        retry = (config.get("spec") or {}).get("retryStrategy") or {}
        limit = int(retry.get("backoffLimitCount", 3))
        failed = _true(request, "Failed") or _true(request, "BookingExpired")
        provisioned = _true(request, "Provisioned")
        if failed is not None:
            what = "failure" if failed["type"] == "Failed" else "booking expired"
            if attempt <= limit:
                state.update(
                    state="Retry",
                    message=f"Retrying after {what}: {failed.get('message', '')}",
                    retryCount=attempt,
                    lastTransitionTime=_now(),
                )
                verdict = "retry" if verdict != "rejected" else verdict
            else:
                state.update(state="Rejected", message=failed.get("message", ""))
                verdict = "rejected"
        elif provisioned is not None:
            state.update(
                state="Ready", message=provisioned.get("message", ""), lastTransitionTime=_now()
            )
        else:
            said = next(
                (
                    x.get("message", "")
                    for x in (request.get("status") or {}).get("conditions") or []
                    if x.get("type") == "Provisioned"
                ),
                "",
            )
            state.update(state="Pending", message=said)
            verdict = "waiting" if verdict == "ready" else verdict
    return verdict


def release(wl: dict[str, Any], why: str) -> None:
    """A Retry: the quota goes back and the workload waits to be admitted again."""
    wl["status"].pop("admission", None)
    set_condition(wl, "QuotaReserved", "False", "Pending", why)
    set_condition(wl, "Admitted", "False", "NoReservation", "The workload has no reservation")


def reject(wl: dict[str, Any], why: str) -> None:
    """A Rejected check deactivates the workload (Kueue evicts it; it stays inactive)."""
    release(wl, why)
    wl["spec"]["active"] = False
    set_condition(wl, "Evicted", "True", "AdmissionCheck", why)


def unfinished(wl: dict[str, Any]) -> bool:
    """Quota reserved, not admitted yet, not finished: where checks are waited on."""
    return (
        condition(wl, "QuotaReserved")
        and not condition(wl, "Admitted")
        and not condition(wl, "Finished")
    )


def collect(c: Cluster) -> None:
    """The garbage collector: a request or pod template whose workload is gone goes too
    (their owner reference)."""
    workloads = {
        (ns, (wl["metadata"].get("uid") or name))
        for (plural, ns, name), wl in c.objects.items()
        if plural == "workloads"
    }
    for key, obj in list(c.objects.items()):
        if key[0] not in ("provisioningrequests", "podtemplates"):
            continue
        owners = [
            r for r in obj["metadata"].get("ownerReferences") or [] if r.get("kind") == "Workload"
        ]
        if owners and all((key[1], r.get("uid") or r.get("name")) not in workloads for r in owners):
            del c.objects[key]
