"""An in-memory Kubernetes API server for the sandbox's EKS clusters.

There is no Docker engine (so no kind) and no kube-apiserver binary to be had here, so the
sandbox serves the part of the Kubernetes REST API fmctl relies on, over the same HTTPS the
emulator speaks, to the real ``kubernetes`` client:

- discovery (``/api``, ``/apis``, ``/api/v1``, ``/apis/GROUP/VERSION``) for the kinds below;
- server-side apply (``PATCH`` with ``application/apply-patch+yaml``, ``fieldManager``,
  ``force``): creates, merges, removes fields the manager stopped applying, and refuses
  (409 Conflict) to take a field another manager owns with a different value unless forced;
  ``metadata.managedFields``, ``uid``, ``resourceVersion``, ``generation``;
- create (``POST``), JSON merge patch and strategic merge patch (``kube_patch``), with the
  field ownership of an ``Update``; discovery with kubectl's short names;
- get, list (``labelSelector`` equality terms), delete, a pod's ``log``; namespaced objects
  need their namespace, and deleting a namespace deletes what is in it;
- authentication as EKS does it: a bearer token ``k8s-aws-v1.`` + base64url of a presigned
  STS GetCallerIdentity URL that signs the ``x-k8s-aws-id`` header with the cluster's name,
  checked by the caller's ``authenticate`` (``sigv4.check_token``); anything else is 401.

It also plays the controllers and kubelets fmctl waits on, simply: nodes join when their
node group becomes ACTIVE (``join``); a node advertises ``nvidia.com/gpu`` and
``vpc.amazonaws.com/efa`` only while a DaemonSet running the NVIDIA or EFA device plugin
covers it (its node selector, affinity and tolerations admit the node), as on EKS, where the
AL2023 NVIDIA AMI has no device plugin; DaemonSets and Deployments report ready from the
nodes that admit them, and have pods (``kube_workloads``), which move when a node is drained;
a claim naming an existing volume is Bound; Jobs get pods, bound to
nodes with devices to spare and run by a kubelet whose output is the pod's log
(``kube_jobs``).

Simplifications, on purpose: lists are atomic in apply (Kubernetes merges some by key), no
admission or schema validation (``kubernetes-validate`` checks the manifests offline), no
watches, and objects go at once on delete (no finalizers).
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote

from fmctl_sandbox import kube_dra as dra
from fmctl_sandbox import kube_kueue as kueue
from fmctl_sandbox.kube_apply import merge, owned, owners_of, record
from fmctl_sandbox.kube_controllers import reconcile
from fmctl_sandbox.kube_crds import checked, define, selects, undefine
from fmctl_sandbox.kube_evict import drain_node, evict
from fmctl_sandbox.kube_jobs import step
from fmctl_sandbox.kube_model import (
    RECONCILED,
    Answer,
    ApiError,
    Cluster,
    Hardware,
)
from fmctl_sandbox.kube_patch import merge_patch, strategic_patch, update_owners
from fmctl_sandbox.kube_policies import Caller, Request, admit
from fmctl_sandbox.kube_programs import Programs
from fmctl_sandbox.kube_protocol import discovery, json_answer, load, target
from fmctl_sandbox.kube_resources import JOBS, QUEUED, Served, served
from fmctl_sandbox.kube_webhooks import refuse_by_webhook
from fmctl_sandbox.kube_workloads import OWNER_KIND, OWNER_LABEL, reconcile_pods

T = TypeVar("T")
#: How a controller puts an object: (plural, namespace, object).
Put = Callable[[str, str, dict[str, Any]], None]
#: Label prefixes EKS and the kubelet set on a node: theirs, never kept from before a sync.
_EKS_LABELS = ("eks.amazonaws.com/", "topology.k8s.aws/", "kubernetes.io/", "node.kubernetes.io/")


def _taints_changed(
    node: list[dict[str, str]], was: list[dict[str, str]], now: list[dict[str, str]]
) -> list[dict[str, str]]:
    """A node's taints after its group's went from ``was`` to ``now``: those the group
    removed go, those it added or changed are set, the node's others stay as they are."""
    gone = {t["key"] for t in was} - {t["key"] for t in now}
    changed = [t for t in now if t not in was]
    keys = {t["key"] for t in changed} | gone
    return [t for t in node if t["key"] not in keys] + changed


@dataclass
class KubeServer:
    """Every sandbox cluster's API; thread-safe."""

    clusters: dict[str, Cluster] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    #: A folder of the tools the nodes' pods run (see ``kube_jobs``); None: pods fail.
    node_tools: str | None = None
    #: The in-cluster programs the sandbox runs for Deployments (``kube_programs``).
    programs: Programs = field(default_factory=Programs)
    #: Who makes the request being answered (set under ``lock``, for admission policies).
    caller: Caller = field(default_factory=Caller)

    # -- what the EKS shim calls -------------------------------------------------------
    def ensure(self, cluster: str, name: str, version: str = "1.33") -> None:
        """Create the API at endpoint ``cluster`` of the EKS cluster ``name`` (Kubernetes
        ``version``), with the namespaces every cluster starts with."""
        with self.lock:
            if cluster in self.clusters:
                return
            c = self.clusters[cluster] = Cluster(name, version=version)
            for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
                self._put(
                    c,
                    "namespaces",
                    "",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                )

    def set_version(self, cluster: str, version: str) -> None:
        """The control plane was upgraded to ``version``."""
        with self.lock:
            c = self.clusters.get(cluster)
            if c is not None:
                c.version = version

    def drop(self, cluster: str) -> None:
        """The cluster was deleted."""
        with self.lock:
            self.clusters.pop(cluster, None)
            self.programs.stop_cluster(cluster)

    def sync(self, cluster: str, nodegroup: str, nodes: list[dict[str, Any]]) -> None:
        """A node group's nodes are these (each {name, labels, taints, gpus, efa,
        instance_type}): new ones register with the group's taints (the kubelet's
        registration taints), ones no longer listed are drained and leave, the rest take the
        group's labels and what changed in its taints since they last took them (EKS's
        UpdateNodegroupConfig sends taints as addOrUpdateTaints and removeTaints): a taint
        someone lifted from a node, as a startup taint is, stays lifted."""
        with self.lock:
            c = self.clusters.get(cluster)
            if c is None:
                return
            wanted = {n["name"] for n in nodes}
            for key, obj in list(c.objects.items()):
                labels = obj["metadata"].get("labels", {})
                mine = labels.get("eks.amazonaws.com/nodegroup") == nodegroup
                if key[0] == "nodes" and mine and key[2] not in wanted:
                    drain_node(c, key[2])
            for n in nodes:
                labels = {
                    **n["labels"],
                    "eks.amazonaws.com/nodegroup": nodegroup,
                    "kubernetes.io/hostname": n["name"],
                    "node.kubernetes.io/instance-type": n["instance_type"],
                }
                existing = c.objects.get(("nodes", "", n["name"]))
                # Labels others put on the node (`kubectl label`, fmctl's UltraServer label)
                # stay: the node group manages its own labels, not the node's every label.
                added = {
                    k: v
                    for k, v in ((existing or {}).get("metadata", {}).get("labels") or {}).items()
                    if k not in labels and not k.startswith(_EKS_LABELS)
                }
                labels = {**added, **labels}
                status = (existing or {}).get("status") or {
                    "conditions": [{"type": "Ready", "status": "True"}]
                }
                taints = n["taints"]
                if existing is not None:
                    taints = _taints_changed(
                        (existing.get("spec") or {}).get("taints") or [],
                        c.group_taints.get(nodegroup, []),
                        n["taints"],
                    )
                spec = {"taints": taints, "providerID": n.get("provider_id", "")}
                if ((existing or {}).get("spec") or {}).get("unschedulable"):
                    spec["unschedulable"] = True  # a cordon outlives the group's changes
                meta: dict[str, Any] = {"name": n["name"], "labels": labels}
                notes = (existing or {}).get("metadata", {}).get("annotations")
                if notes:
                    meta["annotations"] = notes  # others' annotations stay, as labels do
                node = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": meta,
                    "spec": spec,
                    "status": status,
                }
                self._put(c, "nodes", "", node, existing)
                c.hardware[n["name"]] = Hardware(
                    n["gpus"],
                    n["efa"],
                    n.get("clique", ""),
                    n.get("network_gbps", 0.0),
                    n.get("gpu_model", ("", 0)),
                )
            if nodes:
                c.group_taints[nodegroup] = list(nodes[0]["taints"])
            # A DaemonSet's programs follow the nodes (one a node: kube_programs).
            self.programs.node_tools = self.node_tools
            self.programs.sync(cluster, c)

    def cordon(self, cluster: str, nodegroup: str) -> None:
        """A node group's nodes take no new pods (EKS cordons them as it deletes the group,
        then drains them)."""
        with self.lock:
            c = self.clusters.get(cluster)
            if c is None:
                return
            for key, obj in c.objects.items():
                labels = obj["metadata"].get("labels", {})
                if key[0] == "nodes" and labels.get("eks.amazonaws.com/nodegroup") == nodegroup:
                    obj.setdefault("spec", {})["unschedulable"] = True

    def leave(self, cluster: str, nodegroup: str) -> None:
        """A node group's nodes are gone."""
        with self.lock:
            c = self.clusters.get(cluster)
            if c is None:
                return
            for key, obj in list(c.objects.items()):
                labels = obj["metadata"].get("labels", {})
                if key[0] == "nodes" and labels.get("eks.amazonaws.com/nodegroup") == nodegroup:
                    drain_node(c, key[2])
            self.programs.sync(cluster, c)

    def kernel_line(self, cluster: str, node: str, text: str) -> None:
        """A line in the node's kernel log (its /dev/kmsg, which fmctl's node agent reads:
        ``kube_programs``)."""
        with self.lock:
            self.programs.kernel_line(cluster, node, text)

    def efa_down(self, cluster: str, node: str, count: int) -> int:
        """EFA devices gone from the node's /sys, where fmctl's node agent counts them
        (``kube_programs``); how many went."""
        with self.lock:
            return self.programs.efa_down(cluster, node, count)

    def gpus_off(self, cluster: str, node: str, count: int) -> int:
        """GPUs gone from the node's driver, where fmctl's node agent counts them with
        nvidia-smi (``node_gpus``); how many went."""
        with self.lock:
            return self.programs.gpus_off(cluster, node, count)

    def nodes(self, cluster: str, nodegroup: str) -> list[dict[str, Any]]:
        """Copies of a node group's Node objects in the API at endpoint ``cluster``."""
        with self.lock:
            c = self.clusters.get(cluster)
            if c is None:
                return []
            return [
                copy.deepcopy(obj)
                for key, obj in c.objects.items()
                if key[0] == "nodes"
                and obj["metadata"].get("labels", {}).get("eks.amazonaws.com/nodegroup")
                == nodegroup
            ]

    def change_node(
        self, cluster: str, node: str, change: Callable[[dict[str, Any]], None]
    ) -> bool:
        """Apply ``change`` to the stored Node (what the kubelet or an agent on the node
        writes: its status, a cordon); False when there is no such node."""
        with self.lock:
            c = self.clusters.get(cluster)
            obj = None if c is None else c.objects.get(("nodes", "", node))
            if obj is None:
                return False
            change(obj)
            return True

    def read(self, cluster: str, read: Callable[[Cluster], T]) -> T | None:
        """What ``read`` makes of the API at ``cluster`` (None: no such API), under the
        lock: an in-cluster controller's view (it copies what it keeps)."""
        with self.lock:
            c = self.clusters.get(cluster)
            return None if c is None else read(c)

    def write(
        self, cluster: str, write: Callable[[Cluster, Put], None], settle: str = "pods"
    ) -> None:
        """An in-cluster controller's writes (``write`` puts objects as a client would),
        then what they move on settles as after the API's own writes."""
        with self.lock:
            c = self.clusters.get(cluster)
            if c is None:
                return
            write(c, lambda plural, ns, obj: self._put(c, plural, ns, obj))
            self._settle(c, settle)

    def has(self, cluster: str, plural: str, namespace: str, name: str) -> bool:
        """Whether the object exists in the API at endpoint ``cluster``."""
        with self.lock:
            c = self.clusters.get(cluster)
            return c is not None and (plural, namespace, name) in c.objects

    def load_balancers(self, cluster: str) -> set[tuple[str, str, str]]:
        """(namespace, kind, name) of what asks for a load balancer: Services of type
        LoadBalancer and Ingresses."""
        with self.lock:
            c = self.clusters.get(cluster)
            if c is None:
                return set()
            return {
                (ns, "Ingress" if plural == "ingresses" else "Service", name)
                for (plural, ns, name), obj in c.objects.items()
                if plural == "ingresses"
                or (plural == "services" and (obj.get("spec") or {}).get("type") == "LoadBalancer")
            }

    # -- HTTP ------------------------------------------------------------------------------
    def handle(
        self,
        cluster: str,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        body: bytes,
        authenticate: Callable[[str], str | None],
    ) -> Answer:
        """Answer one request to the API at endpoint ``cluster`` (``path`` below it);
        ``authenticate`` is given the cluster's name and says why the caller is refused."""
        try:
            with self.lock:
                c = self.clusters.get(cluster)
                # A program the sandbox runs in the cluster (kube_programs) comes with its
                # service account's token; anyone else with an EKS token.
                caller = self.programs.caller(cluster, headers.get("authorization", ""))
                if caller is None:
                    refused = authenticate(c.name if c is not None else "")
                    if refused is not None:
                        raise ApiError(401, "Unauthorized", refused)
                # Admission policies see who asks: a program's service account, else a
                # user the sandbox cannot name (an EKS token's IAM mapping).
                self.caller = caller or Caller()
                if c is None:
                    raise ApiError(503, "ServiceUnavailable", f"cluster {cluster} has no API")
                answer = self._route(c, method, path.rstrip("/"), parse_qs(query), headers, body)
                if method != "GET":
                    self.programs.node_tools = self.node_tools
                    self.programs.sync(cluster, c)
                if isinstance(answer, str):  # a pod's log
                    return 200, {"Content-Type": "text/plain"}, answer.encode()
                return json_answer(201 if method == "POST" else 200, answer)
        except ApiError as err:
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": err.message,
                "reason": err.reason,
                "code": err.code,
            }
            return json_answer(err.code, status)

    def _route(
        self,
        c: Cluster,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: bytes,
    ) -> Any:
        parts = [unquote(p) for p in path.split("/") if p]
        document = discovery(parts, served(c.version, c.crds), c.version)
        if document is not None:
            return document
        if method == "GET" and len(parts) == 7 and parts[4] == "pods" and parts[6] == "log":
            return self._log(c, parts[3], parts[5], query.get("container", [""])[0])
        if method == "POST" and len(parts) == 7 and parts[4] == "pods" and parts[6] == "eviction":
            evict(c, parts[3], parts[5])
            self._settle(c, "pods")  # a workload's pod is made again where it fits
            return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        if method == "PATCH" and parts[:3] == ["api", "v1", "nodes"] and parts[4:] == ["status"]:
            # The status subresource (how a node agent reports a condition): the patch's
            # status only; the rest of it is not applied (as the API server does).
            res, version, _, name = target(parts[:4], served(c.version, c.crds))
            only = {"status": (load(body) or {}).get("status") or {}}
            manager = query.get("fieldManager", ["kubectl-patch"])[0]
            ctype = headers.get("content-type", "")
            return self._patch(c, res, version, "", name, ctype, only, manager, "status")
        res, version, namespace, name = target(parts, served(c.version, c.crds))
        plural = res.plural
        if method == "GET" and name:
            return self._get(c, plural, namespace, name)
        if method == "GET":
            selector = query.get("labelSelector", [""])[0]
            return self._list(c, res, version, namespace, selector)
        ctype = headers.get("content-type", "")
        strict = query.get("fieldValidation", [""])[0] == "Strict"
        if method in ("PATCH", "POST"):
            operation = (
                "CREATE"
                if method == "POST" or (plural, namespace, name) not in (c.objects)
                else "UPDATE"
            )
            refuse_by_webhook(c, res, namespace, operation, lambda: self._settle(c, "deployments"))
        if method == "PATCH" and name and "apply-patch" in ctype:
            manager = query.get("fieldManager", [""])[0]
            if not manager:
                raise ApiError(422, "Invalid", "fieldManager is required for apply patch")
            force = query.get("force", ["false"])[0] == "true"
            return self._apply(
                c, res, version, namespace, name, load(body), manager, force, strict=strict
            )
        if method == "PATCH" and name:
            manager = query.get("fieldManager", ["kubectl-patch"])[0]
            return self._patch(c, res, version, namespace, name, ctype, load(body), manager)
        if method == "POST" and not name:
            manager = query.get("fieldManager", ["kubectl-create"])[0]
            created = load(body)
            self._admit(c, res, version, namespace, "CREATE", created, None)
            return self._create(c, res, version, namespace, created, manager, strict)
        if method == "DELETE" and name:
            return self._delete(c, plural, namespace, name)
        raise ApiError(405, "MethodNotAllowed", f"{method} {path} is not served by the sandbox")

    # -- operations ----------------------------------------------------------------------
    def _settle(self, c: Cluster, plural: str) -> None:
        """Bring what ``plural``'s objects report up to now."""
        put = lambda p, ns, obj: self._put(c, p, ns, obj)  # noqa: E731
        queued = plural in JOBS or plural in QUEUED
        if plural in RECONCILED or queued:
            reconcile(c)
        if queued or plural in OWNER_KIND:
            reconcile_pods(c, put)
        if queued:
            endpoint = next(e for e, known in self.clusters.items() if known is c)
            self.programs.node_tools = self.node_tools

            def node_env(node: str) -> dict[str, str]:
                return self.programs.node_env(endpoint, node, c.hardware.get(node))

            # Kueue admits and lifts its gates, the Job controller makes and binds pods, and
            # again: what one pass made (a gated pod) the next moves on.
            for _ in range(2):
                kueue.reconcile(c, put)
                dra.reconcile(c, put)
                step(c, put, node_env)
            kueue.reconcile(c, put)
            dra.reconcile(c, put)

    def _log(self, c: Cluster, namespace: str, name: str, container: str) -> str:
        """A container's log; with more than one container the API server wants it named."""
        self._settle(c, "pods")
        pod = c.objects.get(("pods", namespace, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        names = [k["name"] for k in pod["spec"].get("containers", [])]
        if not container and len(names) > 1:
            raise ApiError(
                400,
                "BadRequest",
                f"a container name must be specified for pod {name}, choose one of: "
                f"[{' '.join(names)}]",
            )
        container = container or names[0]
        if container not in names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        owner = (pod["metadata"].get("labels") or {}).get(OWNER_LABEL, "")
        if owner.startswith("deployments."):
            # A Deployment's pod the sandbox runs as a program: what the program printed.
            endpoint = next((k for k, v in self.clusters.items() if v is c), "")
            return self.programs.log(endpoint, namespace, owner.removeprefix("deployments."))
        return c.logs.get((namespace, name), {}).get(container, "")

    def _get(self, c: Cluster, plural: str, namespace: str, name: str) -> dict[str, Any]:
        self._settle(c, plural)
        obj = c.objects.get((plural, namespace, name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        return copy.deepcopy(obj)

    def _list(
        self, c: Cluster, res: Served, version: str, namespace: str, selector: str
    ) -> dict[str, Any]:
        self._settle(c, res.plural)
        match = selects(selector)
        items = [
            copy.deepcopy(obj)
            for (p, ns, _), obj in sorted(c.objects.items())
            if p == res.plural
            and (not namespace or ns == namespace)
            and match(obj["metadata"].get("labels") or {})
        ]
        return {
            "apiVersion": res.api_version(version),
            "kind": f"{res.kind}List",
            "metadata": {"resourceVersion": str(next(self.versions))},
            "items": items,
        }

    def _apply(
        self,
        c: Cluster,
        res: Served,
        version: str,
        namespace: str,
        name: str,
        applied: dict[str, Any],
        manager: str,
        force: bool,
        operation: str = "Apply",
        strict: bool = False,
    ) -> dict[str, Any]:
        plural = res.plural
        want = res.api_version(version)
        if applied.get("apiVersion") != want or applied.get("kind") != res.kind:
            raise ApiError(
                400,
                "BadRequest",
                f"body is {applied.get('apiVersion')} "
                f"{applied.get('kind')}, the URL is {want} {res.kind}",
            )
        meta = applied.get("metadata") or {}
        if meta.get("name") != name:
            raise ApiError(400, "BadRequest", "the name in the body differs from the URL's")
        if res.namespaced and ("namespaces", "", namespace) not in c.objects:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        body = copy.deepcopy(applied)
        body["metadata"].pop("managedFields", None)
        if res.namespaced:
            body["metadata"]["namespace"] = namespace
        else:
            # The API server clears a cluster-scoped object's namespace (apiserver's
            # rest.BeforeCreate): charts' templates often set one on their webhook
            # configurations and RBAC.
            body["metadata"].pop("namespace", None)
        live = c.objects.get((plural, namespace, name))
        if live is None:
            obj = body
            owners = {manager: set(owned(body))}
        else:
            obj, owners = merge(live, body, manager, force)
            if obj == live:
                return copy.deepcopy(live)
        obj = checked(res, version, obj, live, strict)
        record(obj, live, owners, {manager: operation}, want)
        self._put(c, plural, namespace, obj, live)
        if plural == "customresourcedefinitions":
            define(c, obj)
        return copy.deepcopy(c.objects[(plural, namespace, name)])

    def _patch(
        self,
        c: Cluster,
        res: Served,
        version: str,
        namespace: str,
        name: str,
        ctype: str,
        patch: dict[str, Any],
        manager: str,
        subresource: str = "",
    ) -> dict[str, Any]:
        """A JSON merge or strategic merge patch of an existing object (``kube_patch``), or of
        its ``subresource``."""
        plural = res.plural
        live = c.objects.get((plural, namespace, name))
        if live is None:
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and str(wanted) != live["metadata"].get("resourceVersion"):
            # A resourceVersion in a patch is a precondition: the server stores the patched
            # object only at that version (kubernetes/kubernetes#63104), else Conflict.
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {plural} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        if "strategic-merge-patch" in ctype:
            obj = strategic_patch(live, patch)
        elif "merge-patch" in ctype:
            obj = merge_patch(live, patch)
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format ({ctype}); accepted: "
                "application/apply-patch+yaml, application/merge-patch+json, "
                "application/strategic-merge-patch+json",
            )
        meta = obj["metadata"]
        if (meta.get("name"), meta.get("namespace", "")) != (
            name,
            live["metadata"].get("namespace", ""),
        ):
            raise ApiError(400, "BadRequest", "a patch may not change the name or namespace")
        # Admission comes before the store finds nothing changed: a patch that changes
        # nothing is still one its caller may not have been allowed to make.
        self._admit(c, res, version, namespace, "UPDATE", obj, live, subresource)
        if obj == live:
            return copy.deepcopy(live)
        obj = checked(res, version, obj, live, strict=False)
        owners = update_owners(live, obj, owners_of(live), manager)
        record(obj, live, owners, {manager: "Update"}, res.api_version(version))
        self._put(c, plural, namespace, obj, live)
        return copy.deepcopy(c.objects[(plural, namespace, name)])

    def _admit(
        self,
        c: Cluster,
        res: Served,
        version: str,
        namespace: str,
        operation: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        subresource: str = "",
    ) -> None:
        """The cluster's admission policies on this request's write (``kube_policies``)."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        request = Request(
            res.group, version, res.plural, subresource, operation, namespace, name, self.caller
        )
        admit(c, request, obj, old)

    def _create(
        self,
        c: Cluster,
        res: Served,
        version: str,
        namespace: str,
        body: dict[str, Any],
        manager: str,
        strict: bool = False,
    ) -> dict[str, Any]:
        """POST to a collection: a new object, or AlreadyExists."""
        name = (body.get("metadata") or {}).get("name", "")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if (res.plural, namespace, name) in c.objects:
            raise ApiError(409, "AlreadyExists", f'{res.plural} "{name}" already exists')
        return self._apply(c, res, version, namespace, name, body, manager, False, "Update", strict)

    def _delete(self, c: Cluster, plural: str, namespace: str, name: str) -> dict[str, Any]:
        obj = c.objects.pop((plural, namespace, name), None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        if plural == "namespaces":
            for key in [k for k in c.objects if k[1] == name]:
                del c.objects[key]
        if plural == "customresourcedefinitions":
            undefine(c, obj)
        if plural == "jobs":  # background propagation: the Job's pods go with it
            for key, pod in list(c.objects.items()):
                labels = pod["metadata"].get("labels", {})
                if (
                    key[:2] == ("pods", namespace)
                    and labels.get("batch.kubernetes.io/job-name") == name
                ):
                    del c.objects[key]
        volume = c.objects.get(("persistentvolumes", "", obj.get("spec", {}).get("volumeName", "")))
        if plural == "persistentvolumeclaims" and volume is not None:
            # The CSI driver deletes a dynamically provisioned volume with its claim.
            dynamic = "pv.kubernetes.io/provisioned-by" in volume["metadata"].get("annotations", {})
            if dynamic and volume["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
                del c.objects[("persistentvolumes", "", volume["metadata"]["name"])]
        return {"kind": "Status", "apiVersion": "v1", "status": "Success"}

    def _put(
        self,
        c: Cluster,
        plural: str,
        namespace: str,
        obj: dict[str, Any],
        live: dict[str, Any] | None = None,
    ) -> None:
        meta = obj["metadata"]
        old = (live or {}).get("metadata", {})
        meta["uid"] = old.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = old.get("creationTimestamp") or time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
        )
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self.versions))
        if plural == "pods" and live is None and not (obj.get("status") or {}).get("phase"):
            # The API server creates every pod Pending (kubernetes pkg/registry/core/pod/
            # strategy.go, PrepareForCreate: Status = PodStatus{Phase: PodPending}).
            obj["status"] = {**(obj.get("status") or {}), "phase": "Pending"}
        c.objects[(plural, namespace, meta["name"])] = obj
