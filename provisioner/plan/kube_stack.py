"""The in-cluster stack as the last node of a Kubernetes plan: a kubeconfig for the user,
everything ``render`` put under ``kubernetes/`` applied server-side, the wait until it runs,
and the readiness check of every GPU node.

On `down` it goes first: Services of type LoadBalancer and Ingresses (their load balancers
are made by controllers, outside fmctl's graph), and claims whose volumes were provisioned
dynamically (the CSI driver deletes their file systems and volumes), each waited for, so
nothing billed is orphaned when the nodes and the cluster go.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioner.drivers.aws import AwsError
from provisioner.drivers.kube import KubeApi, KubeClient
from provisioner.plan.context import OWNER_TAG, Engine
from provisioner.plan.eks import EksCluster, placeholder_values
from provisioner.plan.graph import Found, Node, Outputs
from provisioner.render.context import POOL_LABEL
from provisioner.render.placeholders import fill

GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"
MANAGED_BY = "app.kubernetes.io/managed-by"
#: Kinds applied first: what other objects need to exist (CRDs, namespaces, storage).
FIRST = ("CustomResourceDefinition", "Namespace", "StorageClass", "PersistentVolume")


@dataclass(frozen=True)
class PoolCheck:
    """What every node of a pool must advertise."""

    pool: str
    count: int
    gpus: int
    efa: int


def manifests(files: dict[str, str], values: dict[str, str], cluster: str) -> list[dict[str, Any]]:
    """The objects of the rendered ``kubernetes/`` files, placeholders filled, labelled as
    fmctl's, CRDs and namespaces first (then in the files' order)."""
    objects: list[dict[str, Any]] = []
    for path, text in files.items():
        if not path.startswith("kubernetes/") or path.endswith("kustomization.yaml"):
            continue
        for doc in yaml.safe_load_all(fill(text, values)):
            if not doc:
                continue
            labels = doc.setdefault("metadata", {}).setdefault("labels", {})
            labels[MANAGED_BY] = "fmctl"
            labels[OWNER_TAG] = cluster
            objects.append(doc)
    return sorted(objects, key=lambda o: FIRST.index(o["kind"]) if o["kind"] in FIRST else 9)


def connect(engine: Engine, endpoint: str, ca: str) -> KubeApi:
    """The cluster's API, authenticated with a fresh EKS token (never written down)."""
    from provisioner.drivers.eks_auth import token

    return KubeClient.for_eks(endpoint, ca, lambda: token(engine.aws, engine.cluster))


#: Kinds whose readiness `up` waits for.
WATCHED = (("apps/v1", "DaemonSet"), ("apps/v1", "Deployment"), ("v1", "PersistentVolumeClaim"))


def not_ready(api: KubeApi, objects: list[dict[str, Any]], cluster: str) -> list[str]:
    """What of the applied stack does not run yet, as readable lines (one list call per
    kind, across namespaces, by fmctl's label)."""
    wanted = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects
    }
    live: dict[tuple[str, str, str], dict[str, Any]] = {}
    for api_version, kind in WATCHED:
        for obj in api.list(api_version, kind, selector=f"{OWNER_TAG}={cluster}"):
            meta = obj["metadata"]
            live[(kind, meta.get("namespace", ""), meta["name"])] = obj
    waiting = []
    for key in sorted(k for k in wanted if k[0] in {kind for _, kind in WATCHED}):
        kind, namespace, name = key
        where = f"{kind} {namespace}/{name}"
        if key not in live:
            waiting.append(f"{where}: missing")
            continue
        current = live[key]
        status = current.get("status") or {}
        if kind == "DaemonSet":
            want, ready = status.get("desiredNumberScheduled", 0), status.get("numberReady", 0)
            if ready < want:
                waiting.append(f"{where}: {ready}/{want} ready")
        elif kind == "Deployment":
            want = current.get("spec", {}).get("replicas", 1)
            ready = status.get("readyReplicas", 0)
            if ready < want:
                waiting.append(f"{where}: {ready}/{want} ready")
        elif status.get("phase") != "Bound":
            waiting.append(f"{where}: {status.get('phase', 'Pending')}")
    return waiting


def node_problems(api: KubeApi, pools: list[PoolCheck]) -> list[str]:
    """Every GPU node Ready and advertising its type's GPUs and EFA devices, per pool."""
    problems = []
    for pool in pools:
        nodes = api.list("v1", "Node", selector=f"{POOL_LABEL}={pool.pool}")
        if len(nodes) < pool.count:
            problems.append(f"pool {pool.pool}: {len(nodes)} of {pool.count} nodes joined")
        for n in nodes:
            name = n["metadata"]["name"]
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
            alloc = n.get("status", {}).get("allocatable", {})
            gpus, efa = int(alloc.get(GPU, 0)), int(alloc.get(EFA, 0))
            if not ready:
                problems.append(f"node {name} ({pool.pool}) is not Ready")
            if gpus != pool.gpus:
                problems.append(
                    f"node {name} ({pool.pool}) advertises {gpus} {GPU}, expected {pool.gpus}"
                )
            if efa != pool.efa:
                problems.append(
                    f"node {name} ({pool.pool}) advertises {efa} {EFA}, expected {pool.efa}: "
                    "NCCL would fall back to TCP; check the EFA device plugin there, or drain "
                    f"and replace the node (`kubectl drain {name}`)"
                )
    return problems


class KubeStack:
    """Apply, wait for and check the in-cluster stack; clear load balancers and dynamic
    volumes before `down` takes the nodes."""

    name = "kube-stack"
    after: tuple[str, ...] = ("eks-cluster", "eks-nodegroup", "eks-addon", "eks-access-entry")
    create_seconds, delete_seconds = 90.0, 60.0

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        """Applied already when every object is there; `wait` applies again all the same
        (server-side apply changes nothing that matches) and checks the nodes."""
        endpoint, ca = engine.output("eks", "endpoint"), engine.output("eks", "ca")
        objects = manifests(node.params["files"], placeholder_values(engine), engine.cluster)
        api = connect(engine, endpoint, ca)
        try:
            missing = _missing(api, objects, engine.cluster)
        finally:
            _close(api)
        if missing:
            return None
        return {
            "id": f"{len(objects)} objects",
            "kubeconfig": node.params["kubeconfig"],
            "reapply": True,
        }

    def create(self, engine: Engine, node: Node) -> Outputs:
        from provisioner.drivers.eks_auth import kubeconfig_entry, merge_kubeconfig

        endpoint, ca = engine.output("eks", "endpoint"), engine.output("eks", "ca")
        kubeconfig = Path(node.params["kubeconfig"])
        merge_kubeconfig(
            kubeconfig,
            kubeconfig_entry(
                engine.cluster, engine.region, endpoint, ca, node.params.get("sandbox_home")
            ),
        )
        objects = manifests(node.params["files"], placeholder_values(engine), engine.cluster)
        api = connect(engine, endpoint, ca)
        try:
            apply_all(api, objects)
            if any(
                o["kind"] == "Deployment" and o["metadata"]["name"] == "grafana" for o in objects
            ):
                _grafana_secret(api, engine.cluster)
        finally:
            _close(api)
        engine.emit(node.id, "note", f"applied {len(objects)} objects; kubeconfig {kubeconfig}")
        return {"id": f"{len(objects)} objects", "kubeconfig": str(kubeconfig)}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        if outputs.get("reapply"):
            outputs = self.create(engine, node)
        endpoint, ca = engine.output("eks", "endpoint"), engine.output("eks", "ca")
        objects = manifests(node.params["files"], placeholder_values(engine), engine.cluster)
        pools: list[PoolCheck] = node.params["pools"]
        api = connect(engine, endpoint, ca)
        last: list[str] = []

        def probe() -> bool | None:
            nonlocal last
            last = not_ready(api, objects, engine.cluster) + node_problems(api, pools)
            return True if not last else None

        try:
            engine.wait_until(
                "the in-cluster stack and every GPU node",
                probe,
                self.create_seconds,
                900,
                node.id,
            )
        except Exception as exc:
            raise RuntimeError("; ".join(last) or str(exc)) from exc
        finally:
            _close(api)
        return {**outputs, "nodes": sum(p.count for p in pools)}

    def find_all(self, engine: Engine) -> list[Found]:
        if not EksCluster().find_all(engine):
            return []
        return [Found(self.name, "kube-stack", engine.cluster)]

    def delete(self, engine: Engine, found: Found) -> None:
        if engine.skip_kubernetes_cleanup:
            engine.emit("kube-stack", "note", SKIPPED_CLEANUP.format(cluster=engine.cluster))
            return
        cluster = EksCluster()._describe(engine)
        if cluster is None or cluster["status"] != "ACTIVE":
            return
        api = connect(engine, cluster["endpoint"], cluster["certificateAuthority"]["data"])
        unreachable = _connection_errors()
        try:
            _delete_billed(engine, api)
        except unreachable as exc:
            # A private-only endpoint seen from outside the VPC, most often. Stop here, before
            # the node groups: a load balancer left behind costs more than a retry.
            raise AwsError(
                f"cannot reach the Kubernetes API of {engine.cluster} ({cluster['endpoint']}) "
                f"to delete its load balancers and dynamic volumes: {exc}",
                "run `fmctl down` from inside the cluster's VPC (its endpoint may be private "
                "only: network.apiCidrs opens it), or pass --skip-kubernetes-cleanup to go on "
                "without that step: load balancers and volumes the cluster's controllers made "
                "would then be left, tagged with the cluster's name.",
            ) from exc
        finally:
            _close(api)


#: What `down --skip-kubernetes-cleanup` says it did not do.
SKIPPED_CLEANUP = (
    "in-cluster cleanup skipped (--skip-kubernetes-cleanup): load balancers the AWS Load "
    "Balancer Controller made (tag elbv2.k8s.aws/cluster={cluster}) and EBS volumes of dynamic "
    "claims (tag kubernetes.io/cluster/{cluster}) are not deleted by fmctl; check for them"
)


def _connection_errors() -> tuple[type[Exception], ...]:
    """The transport's failures (sockets, and the Kubernetes client's urllib3: imported when
    needed)."""
    from urllib3.exceptions import HTTPError

    return (OSError, HTTPError)


def _delete_billed(engine: Engine, api: KubeApi) -> None:
    """Delete what controllers made that AWS bills, and wait until it is gone."""
    doomed: list[tuple[str, str, str, str]] = []
    for svc in api.list("v1", "Service"):
        if svc.get("spec", {}).get("type") == "LoadBalancer":
            doomed.append(("v1", "Service", svc["metadata"]["name"], svc["metadata"]["namespace"]))
    for ing in api.list("networking.k8s.io/v1", "Ingress"):
        doomed.append(
            (
                "networking.k8s.io/v1",
                "Ingress",
                ing["metadata"]["name"],
                ing["metadata"]["namespace"],
            )
        )
    volumes = {pv["metadata"]["name"]: pv for pv in api.list("v1", "PersistentVolume")}
    for pvc in api.list("v1", "PersistentVolumeClaim"):
        pv = volumes.get(pvc.get("spec", {}).get("volumeName", ""), {})
        dynamic = "pv.kubernetes.io/provisioned-by" in pv.get("metadata", {}).get("annotations", {})
        if dynamic and pv.get("spec", {}).get("persistentVolumeReclaimPolicy") == "Delete":
            doomed.append(
                (
                    "v1",
                    "PersistentVolumeClaim",
                    pvc["metadata"]["name"],
                    pvc["metadata"]["namespace"],
                )
            )
            doomed.append(("v1", "PersistentVolume", pv["metadata"]["name"], ""))
    for api_version, kind, name, namespace in doomed:
        if kind != "PersistentVolume":
            engine.emit("kube-stack", "deleting", f"{kind} {namespace}/{name}")
            api.delete(api_version, kind, name, namespace)
    engine.wait_until(
        f"{len(doomed)} load balancers and dynamic volumes to go",
        lambda: True if all(api.get(v, k, n, ns) is None for v, k, n, ns in doomed) else None,
        60.0,
        1200,
        "kube-stack",
    )


def _missing(api: KubeApi, objects: list[dict[str, Any]], cluster: str) -> list[str]:
    """Objects not in the cluster, by one list per kind (fmctl's label)."""
    kinds = sorted({(o["apiVersion"], o["kind"]) for o in objects})
    there = set()
    for api_version, kind in kinds:
        for live in api.list(api_version, kind, selector=f"{OWNER_TAG}={cluster}"):
            meta = live["metadata"]
            there.add((kind, meta.get("namespace", ""), meta["name"]))
    return [
        f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
        for o in objects
        if (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) not in there
    ]


def apply_all(api: KubeApi, objects: list[dict[str, Any]], parallelism: int = 8) -> None:
    """Apply what others need first (CRDs, namespaces, storage) in order, then the rest in
    parallel: server-side apply of independent objects commutes."""
    from concurrent.futures import ThreadPoolExecutor

    first = [o for o in objects if o["kind"] in FIRST]
    rest = [o for o in objects if o["kind"] not in FIRST]
    for obj in first:
        _apply(api, obj)
    with ThreadPoolExecutor(parallelism, thread_name_prefix="fmctl-apply") as pool:
        list(pool.map(lambda o: _apply(api, o), rest))


def _apply(api: KubeApi, obj: dict[str, Any]) -> None:
    """Apply one object; a field someone else took over is reported, never overwritten."""
    from provisioner.drivers.kube import KubeError

    try:
        api.apply(obj)
    except KubeError as err:
        if err.status != 409:
            raise
        meta = obj["metadata"]
        raise RuntimeError(
            f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']} was changed outside "
            f"fmctl ({err.message}); fmctl does not overwrite it silently: undo the change, or "
            "hand the fields back with `kubectl apply --server-side --force-conflicts "
            "--field-manager fmctl` on the rendered file"
        ) from err


def _grafana_secret(api: KubeApi, cluster: str) -> None:
    """Grafana's admin password: random, made once in the cluster, never on this machine."""
    import secrets

    if api.get("v1", "Secret", "grafana-admin", "monitoring") is not None:
        return
    labels = {MANAGED_BY: "fmctl", OWNER_TAG: cluster}
    api.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "grafana-admin", "namespace": "monitoring", "labels": labels},
            "type": "Opaque",
            "stringData": {"password": secrets.token_urlsafe(24)},
        }
    )


def _close(api: KubeApi) -> None:
    close = getattr(api, "close", None)
    if close is not None:
        close()
