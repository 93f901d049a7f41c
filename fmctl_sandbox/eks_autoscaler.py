"""The sandbox's stand-in for the Kubernetes Cluster Autoscaler on AWS, in a sandbox EKS
cluster where fmctl's Deployment of it (kube-system/cluster-autoscaler, an image of
``registry.k8s.io/autoscaling/cluster-autoscaler``) is available.

What it does, after kubernetes/autoscaler at cluster-autoscaler-1.34.5
(``cloudprovider/aws``: README.md, ``aws_manager.go``; ``simulator/utilization/info.go``;
``provisioningrequest/besteffortatomic``, ``processors/provreq``; ``config/flags``):

- It acts with the role its service account's EKS Pod Identity association names; every
  Auto Scaling call is judged against that role's policies (``iam_eval``): a call refused
  changes nothing and is reported in its status ConfigMap (``cluster-autoscaler-status``).
- Node groups: the Auto Scaling groups of the cluster's managed node groups whose tags
  match ``--node-group-auto-discovery=asg:tag=KEY=VALUE,...``; each is sized within its
  minimum and maximum only.
- A group's node, to fit pods to: one of its nodes; with none, the group's
  ``k8s.io/cluster-autoscaler/node-template/`` tags (labels, taints ``VALUE:EFFECT``,
  resources). Without either it fits nothing.
- With ``--enable-provisioning-requests``, one request of class
  ``best-effort-atomic-scale-up.autoscaling.x-k8s.io`` a scan: its pods (its PodTemplates
  times their counts) that fit the free GPUs and EFA devices of Ready nodes need nothing
  (Provisioned, ``CapacityIsFound``); the rest are all added in one group that fits them,
  within its maximum (SetDesiredCapacity; Provisioned, ``CapacityIsProvisioned``, at once:
  the nodes join as they boot), or none (Provisioned False, ``CapacityIsNotFound``). A
  Provisioned request is booked for 10 minutes, then BookingExpired.
- Scale-down, every scan unless a scale-up happened within ``--scale-down-delay-after-add``
  (10 minutes): a Ready node of a group whose pods request fewer of its GPUs than
  ``--scale-down-gpu-utilization-threshold`` (GPU nodes are judged by GPUs alone; DaemonSet
  pods count as the real one counts them) and run nothing but DaemonSet pods, for
  ``--scale-down-unneeded-time``, is tainted ``ToBeDeletedByClusterAutoscaler`` and its
  instance terminated with the desired capacity decremented; never below the group's
  minimum, and none while a request's capacity is booked (the real one keeps the booked
  pods' room, as if they ran).

- Without provisioning requests: pods the scheduler placed nowhere (Pending, no node, no
  scheduling gate) get nodes in the first group that fits them, as many as they need
  beyond those still booting, within its maximum.
- Startup taints (``--startup-taint`` keys, and keys prefixed
  ``startup-taint.cluster-autoscaler.kubernetes.io/``; FAQ.md, "startup taints"): a node
  carrying one is unready to it but counted as capacity about to come (booting), and as a
  group's template it offers what it will once they are lifted; it is not scaled down
  (the real one would after ``--scale-down-unready-time``, 20 minutes).

Left out: expanders (the first group that fits), balancing, pods that block removal other
than workloads', node info from ``eks:DescribeNodegroup``. Times are in the sandbox's
scale; it scans every 10 seconds (its ``--scan-interval``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fmctl_sandbox import eks_asg, iam_eval
from fmctl_sandbox.eks_autoscaler_view import (
    FITTED,
    NAME,
    NAMESPACE,
    Flags,
    Node,
    Request,
    View,
    asks,
    read,
)
from fmctl_sandbox.kube_controllers import admits
from fmctl_sandbox.kube_kueue_model import quantity
from fmctl_sandbox.kube_model import Cluster

PRINCIPAL = "pods.eks.amazonaws.com"
TEMPLATE = "k8s.io/cluster-autoscaler/node-template/"
TAINT = "ToBeDeletedByClusterAutoscaler"
SCAN_SECONDS = 10.0
DELAY_AFTER_ADD_SECONDS = 600.0
RESERVATION_SECONDS = 600.0


@dataclass
class Memory:
    """What one cluster's autoscaler keeps between scans."""

    scanned: float = -math.inf
    added: float = -math.inf
    unneeded_since: dict[str, float] = field(default_factory=dict)
    #: When each request it provisioned was booked from.
    booked_since: dict[tuple[str, str], float] = field(default_factory=dict)


def autoscale(eks: Any, now: float) -> None:
    """One scan of every sandbox cluster's autoscaler that is due (``eks``: the sandbox's
    EKS, ``sandbox.eks.Eks``)."""
    eks_asg.join_booted(eks, now)
    for (region, cluster), item in list(eks.clusters.items()):
        endpoint = eks.endpoints.get((region, cluster), "")
        if item.data.get("status") != "ACTIVE" or not endpoint:
            continue
        if not eks.kube.has(endpoint, "deployments", NAMESPACE, NAME):
            continue
        memory = eks.autoscalers.setdefault((region, cluster), Memory())
        if now - memory.scanned < SCAN_SECONDS * eks.scale:
            continue
        memory.scanned = now
        view = eks.kube.read(endpoint, read)
        if view is not None:
            _scan(eks, region, cluster, endpoint, view, memory, now)


@dataclass
class _Scan:
    """One scan's context: who it acts as, and what it says in its status."""

    eks: Any
    region: str
    cluster: str
    documents: list[Any]
    role: str
    said: list[str] = field(default_factory=list)

    def allowed(self, action: str, group: str = "", tags: dict[str, str] | None = None) -> bool:
        """Whether its role may make the Auto Scaling call (said when not)."""
        params = {"AutoScalingGroupName": group, "_tags": tags or {}}
        refused = iam_eval.refused(
            self.documents,
            self.role,
            "autoscaling",
            action,
            self.region,
            self.eks.account,
            params,
        )
        if refused is not None:
            self.said.append(f"AccessDenied: {refused}")
        return refused is None


def _credentials(eks: Any, region: str, cluster: str) -> tuple[str, list[Any] | str]:
    """The role its pods assume (EKS Pod Identity) and its policies, or why none."""
    for (r, c, _), item in eks.identities.items():
        if (r, c) == (region, cluster) and (item["namespace"], item["serviceAccount"]) == (
            NAMESPACE,
            NAME,
        ):
            role = str(item["roleArn"])
            # The session tags EKS Pod Identity adds (the EKS User Guide's list), which a
            # trust policy may require.
            tags = {
                "eks-cluster-arn": f"arn:aws:eks:{region}:{eks.account}:cluster/{cluster}",
                "eks-cluster-name": cluster,
                "kubernetes-namespace": NAMESPACE,
                "kubernetes-service-account": NAME,
                "kubernetes-pod-name": f"{NAME}-0",
                "kubernetes-pod-uid": "00000000-0000-0000-0000-000000000000",
            }
            return role, iam_eval.role_documents(eks.account, role, PRINCIPAL, None, tags)
    return "", f"no Pod Identity association for {NAMESPACE}/{NAME}: no AWS credentials"


def _scan(
    eks: Any, region: str, cluster: str, endpoint: str, view: View, memory: Memory, now: float
) -> None:
    role, documents = _credentials(eks, region, cluster)
    if isinstance(documents, str):
        _status(eks, endpoint, [documents])
        return
    scan = _Scan(eks, region, cluster, documents, role)
    if not scan.allowed("describeAutoScalingGroups"):
        _status(eks, endpoint, scan.said)
        return
    groups = _groups(eks, region, cluster, view.flags)
    updates: dict[tuple[str, str], list[dict[str, Any]]] = {}
    booked: set[str] = set()
    if view.flags.provisioning:
        booked = _provision(scan, view, groups, memory, now, updates)
    if view.unplaced and _scale_up(scan, view, groups):
        memory.added = now
    _scale_down(scan, endpoint, view, groups, booked, memory, now)
    eks.kube.write(endpoint, lambda c, put: _answer(c, updates), "provisioningrequests")
    _status(eks, endpoint, scan.said or ["Healthy"])


@dataclass(frozen=True)
class Group:
    """A discovered node group's Auto Scaling group."""

    name: str
    nodegroup: str
    minimum: int
    maximum: int
    desired: int
    tags: dict[str, str]


def _groups(eks: Any, region: str, cluster: str, found: Flags) -> list[Group]:
    out = []
    for (r, c, ng_name), item in sorted(eks.nodegroups.items()):
        if (r, c) != (region, cluster) or item.gone_at is not None:
            continue
        tags = eks_asg.tags_of(item)
        if any(k not in tags or (v and tags[k] != v) for k, v in found.discovery.items()):
            continue
        for asg in (item.data.get("resources") or {}).get("autoScalingGroups") or []:
            scaling = item.data["scalingConfig"]
            out.append(
                Group(
                    str(asg["name"]),
                    ng_name,
                    int(scaling["minSize"]),
                    int(scaling["maxSize"]),
                    int(scaling["desiredSize"]),
                    tags,
                )
            )
    return out


def _template(group: Group, nodes: tuple[Node, ...]) -> tuple[dict[str, Any], dict[str, Fraction]]:
    """A node of the group to fit pods to, and what it offers: one of its nodes, else its
    node-template tags."""
    for real in nodes:
        if real.group == group.nodegroup:
            alloc = (real.obj.get("status") or {}).get("allocatable") or {}
            return real.obj, {r: quantity(alloc.get(r, 0)) for r in FITTED}
    labels: dict[str, str] = {}
    taints: list[dict[str, str]] = []
    offers: dict[str, Fraction] = {}
    for key, value in group.tags.items():
        if not key.startswith(TEMPLATE):
            continue
        kind, _, name = key[len(TEMPLATE) :].partition("/")
        if kind == "label":
            labels[name] = value
        elif kind == "taint":
            taint_value, _, effect = value.rpartition(":")
            taints.append({"key": name, "value": taint_value, "effect": effect})
        elif kind == "resources":
            offers[name] = quantity(value)
    made = {"metadata": {"labels": labels}, "spec": {"taints": taints}}
    return made, {r: offers.get(r, Fraction(0)) for r in FITTED}


def _per_node(pod: dict[str, Any], node: dict[str, Any], offers: dict[str, Fraction]) -> int:
    """How many of ``pod`` a node like ``node`` holds."""
    if not admits(pod, node):
        return 0
    asked = asks(pod)
    fits = [int(offers[r] // asked[r]) for r in FITTED if asked.get(r)]
    return min(fits) if fits else 1


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _true(conditions: tuple[dict[str, Any], ...], kind: str) -> dict[str, Any] | None:
    return next((x for x in conditions if x["type"] == kind and x["status"] == "True"), None)


def _provision(
    scan: _Scan,
    view: View,
    groups: list[Group],
    memory: Memory,
    now: float,
    updates: dict[tuple[str, str], list[dict[str, Any]]],
) -> set[str]:
    """Answer the requests (one scale-up a scan); the node groups whose capacity is booked."""
    booked: set[str] = set()
    tried = False
    for req in view.requests:
        key = (req.namespace, req.name)
        if _true(req.conditions, "Failed") or _true(req.conditions, "BookingExpired"):
            continue
        provisioned = _true(req.conditions, "Provisioned")
        if provisioned is not None:
            since = memory.booked_since.setdefault(key, now)
            if now - since >= RESERVATION_SECONDS * scan.eks.scale:
                updates[key] = [
                    _condition(
                        "BookingExpired",
                        "True",
                        "CapacityReservationTimeExpired",
                        "Capacity reservation time is expired",
                    )
                ]
            else:
                booked |= {g.nodegroup for g in groups}
            continue
        if tried:
            continue
        tried = True
        accepted = _condition(
            "Accepted", "True", "Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler"
        )
        left = _unfit(req, view.nodes)
        if not left:
            updates[key] = [
                accepted,
                _condition(
                    "Provisioned", "True", "CapacityIsFound", "Capacity is found in the cluster"
                ),
            ]
            continue
        for group in groups:
            node, offers = _template(group, view.nodes)
            needed = 0
            for pod, count in left:
                per = _per_node(pod, node, offers)
                needed = -1 if per == 0 or needed < 0 else needed + math.ceil(count / per)
            if needed <= 0 or group.desired + needed > group.maximum:
                continue
            if not scan.allowed("setDesiredCapacity", group.name, group.tags):
                break
            refused = eks_asg.set_desired(scan.eks, scan.region, group.name, group.desired + needed)
            if refused:
                scan.said.append(f"ValidationError: {refused}")
                break
            memory.added = now
            scan.said.append(f"scaled up {group.name} by {needed} for {req.namespace}/{req.name}")
            updates[key] = [
                accepted,
                _condition(
                    "Provisioned",
                    "True",
                    "CapacityIsProvisioned",
                    "Capacity is found in the cluster",
                ),
            ]
            booked.add(group.nodegroup)
            break
        if key not in updates:
            updates[key] = [
                accepted,
                _condition(
                    "Provisioned",
                    "False",
                    "CapacityIsNotFound",
                    "Capacity is not found, CA will try to find it later.",
                ),
            ]
    return booked


def _scale_up(scan: _Scan, view: View, groups: list[Group]) -> bool:
    """Nodes for the pods placed nowhere: in the first group whose nodes fit them, as many
    as they need beyond the group's nodes still booting, within its maximum. True when it
    asked for some."""
    asked = False
    for group in groups:
        node, offers = _template(group, view.nodes)
        fitting = [pod for pod in view.unplaced if _per_node(pod, node, offers) > 0]
        if not fitting:
            continue
        per = min(_per_node(pod, node, offers) for pod in fitting)
        # A node with a startup taint is one still to come, as one booting is.
        booting = group.desired - sum(
            1 for n in view.nodes if n.group == group.nodegroup and not n.starting
        )
        needed = math.ceil(len(fitting) / per) - max(booting, 0)
        wanted = min(group.desired + needed, group.maximum)
        if needed <= 0 or wanted <= group.desired:
            continue
        if not scan.allowed("setDesiredCapacity", group.name, group.tags):
            break
        refused = eks_asg.set_desired(scan.eks, scan.region, group.name, wanted)
        if refused:
            scan.said.append(f"ValidationError: {refused}")
            break
        scan.said.append(
            f"scaled up {group.name} by {wanted - group.desired} for {len(fitting)} pending pod(s)"
        )
        asked = True
        break  # one group a scan: the rest wait for what it adds
    return asked


def _unfit(req: Request, nodes: tuple[Node, ...]) -> list[tuple[dict[str, Any], int]]:
    """The request's pods that the free room of Ready, schedulable nodes does not hold."""
    free = {
        n.name: dict(n.free) for n in nodes if n.ready and not n.obj["spec"].get("unschedulable")
    }
    left = []
    for pod, count in req.pods:
        asked = asks(pod)
        remaining = count
        for node in nodes:
            room = free.get(node.name)
            if room is None or remaining == 0 or not admits(pod, node.obj):
                continue
            fits = [int(room[r] // asked[r]) for r in FITTED if asked.get(r)]
            take = min(min(fits) if fits else remaining, remaining)
            for r in FITTED:
                room[r] -= asked.get(r, Fraction(0)) * take
            remaining -= take
        if remaining:
            left.append((pod, remaining))
    return left


def _scale_down(
    scan: _Scan,
    endpoint: str,
    view: View,
    groups: list[Group],
    booked: set[str],
    memory: Memory,
    now: float,
) -> None:
    """Remove the nodes unneeded for long enough (see the module's docstring)."""
    by_group = {g.nodegroup: g for g in groups}
    cooling = now - memory.added < DELAY_AFTER_ADD_SECONDS * scan.eks.scale
    seen = set()
    for node in view.nodes:
        group = by_group.get(node.group)
        if group is None or not node.ready:
            continue
        share = node.gpus_requested / node.gpus if node.gpus else Fraction(0)
        if not node.only_daemons or share >= Fraction(str(view.flags.gpu_threshold)):
            continue
        if cooling or node.group in booked:
            continue
        seen.add(node.name)
        since = memory.unneeded_since.setdefault(node.name, now)
        if now - since < view.flags.unneeded_seconds * scan.eks.scale:
            continue
        if group.desired - 1 < group.minimum:
            continue
        if not scan.allowed("terminateInstanceInAutoScalingGroup", group.name, group.tags):
            continue
        instance = str(node.obj["spec"].get("providerID", "")).rsplit("/", 1)[-1]
        scan.eks.kube.change_node(endpoint, node.name, _taint)
        code, said = eks_asg.terminate(scan.eks, scan.region, instance, decrement=True)
        if code:
            scan.said.append(f"{code}: {said}")
            continue
        group = Group(
            group.name, group.nodegroup, group.minimum, group.maximum, group.desired - 1, group.tags
        )
        by_group[node.group] = group
        memory.unneeded_since.pop(node.name, None)
        scan.said.append(f"removed {node.name} ({instance}) of {group.name}: unneeded")
    for name in [n for n in memory.unneeded_since if n not in seen]:
        memory.unneeded_since.pop(name)


def _taint(node: dict[str, Any]) -> None:
    taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != TAINT]
    stamp = str(int(time.time()))
    node["spec"]["taints"] = [*taints, {"key": TAINT, "value": stamp, "effect": "NoSchedule"}]


def _answer(c: Cluster, updates: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    """Write the requests' new conditions (merged by type, as the real one applies them)."""
    for (ns, name), conditions in updates.items():
        req = c.objects.get(("provisioningrequests", ns, name))
        if req is None:
            continue
        status = req.setdefault("status", {})
        kept = {x["type"]: x for x in status.get("conditions") or []}
        for new in conditions:
            old = kept.get(new["type"])
            if old is not None and old.get("status") == new["status"]:
                new = {**new, "lastTransitionTime": old["lastTransitionTime"]}
            kept[new["type"]] = new
        status["conditions"] = list(kept.values())


def _status(eks: Any, endpoint: str, lines: list[str]) -> None:
    """Its status ConfigMap (kube-system/cluster-autoscaler-status, as the real one keeps
    with --write-status-configmap, its default)."""
    text = f"Cluster-autoscaler status at {time.strftime('%Y-%m-%d %H:%M:%S')}:\n" + "\n".join(
        lines
    )

    def write(c: Cluster, put: Any) -> None:
        key = ("configmaps", NAMESPACE, "cluster-autoscaler-status")
        live = c.objects.get(key)
        if live is not None:
            history = (live.get("data") or {}).get("events", "").splitlines()[-50:]
            live["data"] = {
                "status": text,
                "events": "\n".join([*history, *(x for x in lines if x != "Healthy")]),
            }
            return
        put(
            "configmaps",
            NAMESPACE,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cluster-autoscaler-status", "namespace": NAMESPACE},
                "data": {"status": text, "events": "\n".join(x for x in lines if x != "Healthy")},
            },
        )

    eks.kube.write(endpoint, write, "configmaps")
