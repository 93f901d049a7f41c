"""The in-cluster stack as one resource: a kubeconfig for the user, everything ``render`` put
under ``kubernetes/`` applied server-side, the wait until it runs, and the readiness check of
every GPU node.

Read is a list per kind (fmctl's label): what is missing, what differs from the rendered
object (each applied object carries the digest of what fmctl sent, and the fields fmctl
sets are compared with their live values: a hand edit is drift, ``kube_drift``), what fmctl
applied and no longer renders, and how many nodes per pool are Ready with their GPUs and
EFA devices.

On `down` it goes first: Services of type LoadBalancer and Ingresses (their load balancers
are made by controllers, outside fmctl's graph), and claims whose volumes were provisioned
dynamically (the CSI driver deletes their file systems and volumes), each waited for, so
nothing billed is orphaned when the nodes and the cluster go.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.drivers import yamlio
from provisioner.drivers.aws import AwsError
from provisioner.drivers.kube import KubeApi, KubeError
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.render.placeholders import fill
from provisioner.resources.base import (
    FieldChange,
    How,
    Kind,
    Observed,
    Owned,
    Policy,
    Request,
    policies,
)
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.eks import EksCluster, EksOut, cluster_ours
from provisioner.resources.eks_access import AccessOut
from provisioner.resources.eks_addons import AddonOut, IdentityOut
from provisioner.resources.eks_nodegroup_model import NodegroupOut
from provisioner.resources.errors import ResourceError
from provisioner.resources.fsx import FsxOut
from provisioner.resources.kube_api import close, connect
from provisioner.resources.kube_chart import CHART_LABEL, ChartOut
from provisioner.resources.kube_health import PoolCheck, node_problems, not_ready, pool_nodes
from provisioner.resources.kube_objects import (
    CHANGED_IN_CLUSTER,
    DIGEST,
    apply_all,
    drifted,
    first_then_rest,
    key_of,
    stamp,
)
from provisioner.resources.kube_ultraserver import label_ultraservers
from provisioner.resources.network import SubnetOut
from provisioner.resources.tags import OWNER_TAG

#: Every kind fmctl's ``kubernetes/`` templates make (tests/render/test_kubernetes.py holds
#: every example's rendering to it). Read lists these as well as what the spec renders now:
#: an object of a kind the spec no longer renders at all is found, and pruned, too.
STACK_KINDS = frozenset(
    {
        ("v1", "Namespace"),
        ("v1", "ConfigMap"),
        ("v1", "Service"),
        ("v1", "ServiceAccount"),
        ("v1", "PersistentVolume"),
        ("v1", "PersistentVolumeClaim"),
        ("apps/v1", "DaemonSet"),
        ("apps/v1", "Deployment"),
        ("batch/v1", "Job"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("storage.k8s.io/v1", "StorageClass"),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
        ("kueue.x-k8s.io/v1beta2", "AdmissionCheck"),
        ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
        ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
        ("kueue.x-k8s.io/v1beta2", "ProvisioningRequestConfig"),
        ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
        ("kueue.x-k8s.io/v1beta2", "Topology"),
        ("resource.nvidia.com/v1beta1", "ComputeDomain"),
    }
)


@dataclass(frozen=True)
class StackOut:
    """The applied stack: how many objects, and the kubeconfig written for it."""

    id: str
    kubeconfig: str


@dataclass(frozen=True)
class StackParams:
    """The rendered ``kubernetes/`` files and what their placeholders are filled from."""

    cluster: Ref[EksOut]
    files: tuple[tuple[str, str], ...]
    pools: tuple[PoolCheck, ...]
    kubeconfig: str
    private_subnet: Ref[SubnetOut]
    admin: Ref[AccessOut]
    nodegroups: tuple[Ref[NodegroupOut], ...]
    addons: tuple[Ref[AddonOut], ...]
    identities: tuple[Ref[IdentityOut], ...] = ()
    #: The upstream charts whose CRDs and webhooks the stack's objects need (Kueue).
    charts: tuple[Ref[ChartOut], ...] = ()
    fsx: Ref[FsxOut] | None = None
    fsx_group: Ref[SgOut] | None = None
    #: Arguments of the kubeconfig's `fmctl token` besides cluster and region (the target's).
    token_args: tuple[str, ...] = ()
    #: False with ``kubernetes.inClusterStack: gitops``: Argo CD or Flux applies the files;
    #: fmctl writes the kubeconfig and reports what runs, and applies or waits for nothing.
    apply: bool = True


@dataclass(frozen=True)
class StackLive:
    """The objects as applied (key -> digest), and Ready nodes per pool with the right
    devices."""

    objects: Any
    nodes: Any
    #: Objects Argo CD or Flux applies (key -> who): reported, never applied over.
    external: Any = frozenset()
    #: The kubeconfig holds the cluster's entry (compared with ``inClusterStack: gitops``).
    kubeconfig: bool = True
    #: The live objects fmctl applied (key -> object): what their fields are compared
    #: with (read, not a setting of its own).
    content: Any = field(default=None, compare=False)


def placeholder_values(ctx: Context, params: StackParams) -> dict[str, str]:
    """Every placeholder the rendered manifests may hold, from the stack's references."""
    values = {"privateSubnetId": str(ctx.resolve(params.private_subnet))}
    if params.fsx is not None:
        values.update(
            fileSystemId=str(ctx.resolve(params.fsx)),
            fsxDnsName=str(ctx.resolve(params.fsx, "dns")),
            fsxMountName=str(ctx.resolve(params.fsx, "mount_name")),
        )
    if params.fsx_group is not None:
        values["fsxSecurityGroupId"] = str(ctx.resolve(params.fsx_group))
    return values


def manifests(files: dict[str, str], values: dict[str, str], cluster: str) -> list[dict[str, Any]]:
    """The objects of the rendered ``kubernetes/`` files, placeholders filled, labelled as
    fmctl's and stamped with their digest, CRDs and namespaces first."""
    objects: list[dict[str, Any]] = []
    for path, text in files.items():
        if not path.startswith("kubernetes/") or path.endswith("kustomization.yaml"):
            continue
        for doc in yamlio.load_all(fill(text, values)):
            if doc:
                stamp(doc, cluster)
                objects.append(doc)
    return first_then_rest(objects)


#: How Argo CD and Flux mark what they apply: Argo CD's resource tracking (the annotation,
#: its default since 3.0, or the app.kubernetes.io/instance label; Argo CD user guide,
#: "Resource Tracking") and Flux's kustomize-controller labels.
ARGO_ANNOTATION = "argocd.argoproj.io/tracking-id"
ARGO_LABEL = "app.kubernetes.io/instance"
FLUX_LABEL = "kustomize.toolkit.fluxcd.io/name"


def gitops_owner(meta: dict[str, Any]) -> str | None:
    """Who of Argo CD or Flux applies this object (None: neither)."""
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    if ARGO_ANNOTATION in annotations:
        return f"Argo CD ({str(annotations[ARGO_ANNOTATION]).split(':', 1)[0]})"
    if FLUX_LABEL in labels:
        namespace = labels.get("kustomize.toolkit.fluxcd.io/namespace", "")
        return f"Flux ({namespace + '/' if namespace else ''}{labels[FLUX_LABEL]})"
    if ARGO_LABEL in labels:  # fmctl's own objects never carry it
        return f"Argo CD ({labels[ARGO_LABEL]})"
    return None


class KubeStack(Kind[StackParams, StackOut, StackLive]):
    """Apply, wait for and check the in-cluster stack; clear load balancers and dynamic
    volumes before `down` takes the nodes."""

    name, params, outputs = "kube-stack", StackParams, StackOut
    create_seconds, update_seconds, delete_seconds = 90.0, 90.0, 60.0
    policy = policies(
        objects=Policy(How.UPDATE, "server-side apply (field manager fmctl)"),
        nodes=Policy(How.UPDATE, "waits for every pool's nodes to be Ready"),
    )

    def _objects(self, ctx: Context, params: StackParams) -> list[dict[str, Any]]:
        return manifests(dict(params.files), placeholder_values(ctx, params), ctx.cluster)

    def read(self, req: Request[StackParams]) -> Observed[StackOut, StackLive] | None:
        if not req.ctx.known(req.params.cluster) or not cluster_ours(req.ctx):
            return None
        cluster = req.ctx.get(req.params.cluster)
        api = connect(req.ctx, cluster.endpoint, cluster.ca)
        try:
            rendered_kinds = self._kinds(req.params)
            kinds = sorted(rendered_kinds | STACK_KINDS)
            applied: dict[str, str] = {}
            content: dict[str, dict[str, Any]] = {}
            external: dict[str, str] = {}
            theirs: dict[str, dict[str, Any]] = {}
            for api_version, kind in kinds:
                # Not the charts' objects (kube_chart applies and reads those).
                selector = f"{OWNER_TAG}={req.ctx.cluster},!{CHART_LABEL}"
                try:
                    found = api.list(api_version, kind, selector=selector)
                except KubeError as err:
                    if err.status != 404:
                        raise
                    continue  # a chart's kind whose CRD is not there yet: none applied
                for obj in found:
                    key = key_of({"kind": kind, "metadata": obj["metadata"]})
                    owner = gitops_owner(obj["metadata"])
                    if owner is not None:
                        external[key] = owner
                        theirs[key] = obj
                        continue
                    digest = (obj["metadata"].get("annotations") or {}).get(DIGEST)
                    if digest is None and (api_version, kind) not in rendered_kinds:
                        # Labelled as the cluster's but never applied by `up` (no digest): a
                        # file of the rendered folder a person applied (the NCCL test's Job).
                        # Not the stack's to prune.
                        continue
                    applied[key] = digest or ""
                    content[key] = obj
            nodes = pool_nodes(api, req.params.pools)
        finally:
            close(api)
        notes = self._out_of_date(req.ctx, req.params, theirs, external)
        if not req.params.apply:
            # Nothing of fmctl's to apply: what is live is Argo CD's or Flux's; the one thing
            # fmctl keeps is the kubeconfig entry.
            live = StackLive(
                frozenset(),
                frozenset(),
                frozenset(external.items()),
                self._has_entry(req.ctx, req.params),
            )
            out = StackOut(f"{len(external)} objects", req.params.kubeconfig)
            return Observed(out, live, req.ctx.cluster, notes=notes)
        if not applied and not external:
            return None
        live = StackLive(
            frozenset(applied.items()), nodes, frozenset(external.items()), content=content
        )
        out = StackOut(f"{len(applied)} objects", req.params.kubeconfig)
        return Observed(out, live, req.ctx.cluster, notes=notes)

    def _out_of_date(
        self,
        ctx: Context,
        params: StackParams,
        theirs: dict[str, dict[str, Any]],
        owners: dict[str, str],
    ) -> tuple[str, ...]:
        """What Argo CD or Flux applies that is not what the spec renders now: the folder
        they read is out of date (fmctl never applies over them; the user re-renders and
        commits). Objects they have not applied yet are not said here (`status` shows the
        GPU nodes left without their devices)."""
        from provisioner.resources.kube_drift import content_drift

        if not theirs:
            return ()
        values = placeholder_values(ctx, params)
        if any(v == repr(UNKNOWN) for v in values.values()):
            return ()
        stale: dict[str, list[str]] = {}
        for obj in self._objects(ctx, params):
            key = key_of(obj)
            if key not in theirs:
                continue
            # The digest is what fmctl stamps when it applies; the committed files lack it.
            obj["metadata"]["annotations"].pop(DIGEST, None)
            drifts = content_drift(obj, theirs[key])
            if drifts:
                fields = ", ".join(d.path for d in drifts[:3])
                more = f" and {len(drifts) - 3} more" if len(drifts) > 3 else ""
                stale.setdefault(owners[key], []).append(f"{key} ({fields}{more})")
        return tuple(
            f"what {owner} applies is out of date with the spec: {'; '.join(keys)}; re-render "
            "(`fmctl render --from-cluster`) and commit the folder it reads"
            for owner, keys in sorted(stale.items())
        )

    def _kinds(self, params: StackParams) -> set[tuple[str, str]]:
        kinds = set()
        for path, text in params.files:
            if not path.startswith("kubernetes/") or path.endswith("kustomization.yaml"):
                continue
            for doc in yamlio.load_all(text):
                if doc:
                    kinds.add((str(doc["apiVersion"]), str(doc["kind"])))
        return kinds

    def desired(
        self, req: Request[StackParams], observed: Observed[StackOut, StackLive]
    ) -> StackLive:
        values = placeholder_values(req.ctx, req.params)
        if any(v == repr(UNKNOWN) for v in values.values()):
            objects: Any = UNKNOWN
        else:
            objects = frozenset(
                (key_of(o), o["metadata"]["annotations"][DIGEST])
                for o in self._objects(req.ctx, req.params)
            )
        if any(req.ctx.resolve(ref) is UNKNOWN for ref in req.params.nodegroups):
            nodes: Any = UNKNOWN  # a node group changes: every node is checked again after
        else:
            nodes = frozenset((p.pool, p.expected, p.gpus, p.efa) for p in req.params.pools)
        return StackLive(objects, nodes)

    def diff(
        self, req: Request[StackParams], observed: Observed[StackOut, StackLive]
    ) -> list[FieldChange]:
        """Per object that is missing, differs from what is rendered, or is no longer
        rendered; and the nodes per pool."""
        if not req.params.apply:
            if observed.live.kubeconfig:
                return []
            return [
                FieldChange(
                    "kubeconfig", False, True, How.UPDATE, "the cluster's entry: written again"
                )
            ]
        want = self.desired(req, observed)
        out = []
        if want.objects is UNKNOWN:
            out.append(FieldChange("objects", "applied", UNKNOWN, How.UPDATE, "filled once made"))
        else:
            have, need = dict(observed.live.objects), dict(want.objects)
            theirs = dict(observed.live.external)
            rendered = {key_of(o): o for o in self._objects(req.ctx, req.params)}
            for key in sorted(set(have) | set(need)):
                if key in theirs:
                    continue  # Argo CD's or Flux's to apply: reported by `up`, not fought
                if have.get(key) == need.get(key):
                    live_obj = (observed.live.content or {}).get(key)
                    if live_obj is not None:
                        out += drifted(key, rendered[key], live_obj)
                elif have.get(key) != need.get(key):
                    why = (
                        "no longer rendered: deleted"
                        if key not in need
                        else "missing: applied"
                        if key not in have
                        else "differs from the rendered object: applied again"
                    )
                    out.append(
                        FieldChange(f"objects.{key}", have.get(key), need.get(key), How.UPDATE, why)
                    )
        if want.nodes is UNKNOWN or want.nodes != observed.live.nodes:
            out.append(
                FieldChange(
                    "nodes",
                    observed.live.nodes,
                    want.nodes,
                    How.UPDATE,
                    "every pool's nodes Ready with their GPUs and EFA devices: up waits for it",
                )
            )
        return out

    def create(self, req: Request[StackParams]) -> StackOut:
        if not req.params.apply:
            return self._handed_over(req.ctx, req.rid, req.params)
        self._apply(req.ctx, req.rid, req.params, ())
        return self._settle(req.ctx, req.rid, req.params)

    def _handed_over(self, ctx: Context, rid: str, params: StackParams) -> StackOut:
        """``inClusterStack: gitops``: the kubeconfig entry only; the files are Argo CD's or
        Flux's to apply (`fmctl status` reports what runs)."""
        self._kubeconfig(ctx, params)
        ctx.emit(rid, "note", "kubernetes/ is left to Argo CD or Flux (inClusterStack: gitops)")
        return StackOut("handed over", params.kubeconfig)

    @staticmethod
    def _has_entry(ctx: Context, params: StackParams) -> bool:
        from provisioner.drivers.eks_auth import has_kubeconfig_entry

        return has_kubeconfig_entry(Path(params.kubeconfig), ctx.cluster, ctx.region)

    def _kubeconfig(self, ctx: Context, params: StackParams) -> None:
        from provisioner.drivers.eks_auth import kubeconfig_entry, merge_kubeconfig

        cluster = ctx.get(params.cluster)
        merge_kubeconfig(
            Path(params.kubeconfig),
            kubeconfig_entry(
                ctx.cluster, ctx.region, cluster.endpoint, cluster.ca, params.token_args
            ),
        )

    def update(
        self,
        req: Request[StackParams],
        observed: Observed[StackOut, StackLive],
        changes: Sequence[FieldChange],
    ) -> StackOut:
        if not req.params.apply:
            return self._handed_over(req.ctx, req.rid, req.params)
        if any(c.path.startswith("objects") for c in changes):
            stale: tuple[str, ...] = ()
            if isinstance(observed.live.objects, frozenset):
                wanted = {key_of(o) for o in self._objects(req.ctx, req.params)}
                stale = tuple(sorted(k for k, _ in observed.live.objects if k not in wanted))
            # The objects the plan showed changed in the cluster: their fields taken back.
            taken = {
                c.path.removeprefix("objects.")
                for c in changes
                if c.reason.startswith(CHANGED_IN_CLUSTER)
            }
            self._apply(req.ctx, req.rid, req.params, stale, dict(observed.live.external), taken)
        # Only the nodes changed (a pool scaled or rolled): nothing to apply, check them.
        return self._settle(req.ctx, req.rid, req.params)

    def _apply(
        self,
        ctx: Context,
        rid: str,
        params: StackParams,
        stale: tuple[str, ...],
        theirs: dict[str, str] | None = None,
        taken: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        cluster = ctx.get(params.cluster)
        kubeconfig = Path(params.kubeconfig)
        self._kubeconfig(ctx, params)
        objects = self._objects(ctx, params)
        for key, owner in sorted((theirs or {}).items()):
            ctx.emit(rid, "note", f"{key} is applied by {owner}: left to it, not applied over")
        objects = [o for o in objects if key_of(o) not in (theirs or {})]
        api = connect(ctx, cluster.endpoint, cluster.ca)
        try:
            apply_all(api, objects, taken=taken)
            kinds = {k: v for v, k in STACK_KINDS} | {o["kind"]: o["apiVersion"] for o in objects}
            for key in stale:  # applied before, no longer rendered: pruned
                kind, namespace, name = key.split("/", 2)
                if kind in kinds:
                    ctx.emit(rid, "deleting", key)
                    api.delete(kinds[kind], kind, name, namespace)
        finally:
            close(api)
        ctx.emit(rid, "note", f"applied {len(objects)} objects; kubeconfig {kubeconfig}")

    def _settle(self, ctx: Context, rid: str, params: StackParams) -> StackOut:
        cluster = ctx.get(params.cluster)
        objects = self._objects(ctx, params)
        api = connect(ctx, cluster.endpoint, cluster.ca)
        last: list[str] = []

        def probe() -> bool | None:
            nonlocal last
            labeled = label_ultraservers(ctx, api, params.pools)
            last = not_ready(api, objects, ctx.cluster) + node_problems(api, params.pools)
            last += [p for p in labeled if p not in last]
            return True if not last else None

        try:
            ctx.wait_until(
                "the in-cluster stack and every GPU node", probe, self.create_seconds, 900, rid
            )
        except Exception as exc:
            raise ResourceError("; ".join(last) or str(exc)) from exc
        finally:
            close(api)
        return StackOut(f"{len(objects)} objects", params.kubeconfig)

    def find_owned(self, ctx: Context) -> list[Owned]:
        if not cluster_ours(ctx):
            return []
        return [self.owned_item("kube-stack", ctx.cluster)]

    def delete(self, ctx: Context, owned: Owned) -> None:
        if ctx.skip_kubernetes_cleanup:
            ctx.emit("kube-stack", "note", SKIPPED_CLEANUP.format(cluster=ctx.cluster))
            return
        cluster = EksCluster().describe(ctx)
        if cluster is None or cluster["status"] != "ACTIVE":
            return
        api = connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])
        unreachable = _connection_errors()
        try:
            _delete_billed(ctx, api)
        except unreachable as exc:
            # A private-only endpoint seen from outside the VPC, most often. Stop here, before
            # the node groups: a load balancer left behind costs more than a retry.
            raise AwsError(
                f"cannot reach the Kubernetes API of {ctx.cluster} ({cluster['endpoint']}) "
                f"to delete its load balancers and dynamic volumes: {exc}",
                "run `fmctl down` from inside the cluster's VPC (its endpoint may be private "
                "only: network.apiCidrs opens it), or pass --skip-kubernetes-cleanup to go on "
                "without that step: load balancers and volumes the cluster's controllers made "
                "would then be left, tagged with the cluster's name.",
            ) from exc
        finally:
            close(api)


#: What `down --skip-kubernetes-cleanup` says it did not do.
SKIPPED_CLEANUP = (
    "in-cluster cleanup skipped (--skip-kubernetes-cleanup): load balancers the AWS Load "
    "Balancer Controller made (tag elbv2.k8s.aws/cluster={cluster}) and EBS volumes of dynamic "
    "claims (tag kubernetes.io/cluster/{cluster}) are not deleted by fmctl; check for them"
)


def _connection_errors() -> tuple[type[Exception], ...]:
    """The transport's failures: sockets', and urllib3's (KubeClient speaks through it;
    imported when needed)."""
    from urllib3.exceptions import HTTPError

    return (OSError, HTTPError)


def _delete_billed(ctx: Context, api: KubeApi) -> None:
    """Delete what controllers made that AWS bills, and wait until it is gone."""
    doomed: list[tuple[str, str, str, str]] = []
    for svc in api.list("v1", "Service"):
        if svc.get("spec", {}).get("type") == "LoadBalancer":
            doomed.append(("v1", "Service", svc["metadata"]["name"], svc["metadata"]["namespace"]))
    for ing in api.list("networking.k8s.io/v1", "Ingress"):
        meta = ing["metadata"]
        doomed.append(("networking.k8s.io/v1", "Ingress", meta["name"], meta["namespace"]))
    volumes = {pv["metadata"]["name"]: pv for pv in api.list("v1", "PersistentVolume")}
    for pvc in api.list("v1", "PersistentVolumeClaim"):
        pv = volumes.get(pvc.get("spec", {}).get("volumeName", ""), {})
        dynamic = "pv.kubernetes.io/provisioned-by" in pv.get("metadata", {}).get("annotations", {})
        if dynamic and pv.get("spec", {}).get("persistentVolumeReclaimPolicy") == "Delete":
            meta = pvc["metadata"]
            doomed.append(("v1", "PersistentVolumeClaim", meta["name"], meta["namespace"]))
            doomed.append(("v1", "PersistentVolume", pv["metadata"]["name"], ""))
    for api_version, kind, name, namespace in doomed:
        if kind != "PersistentVolume":
            ctx.emit("kube-stack", "deleting", f"{kind} {namespace}/{name}")
            api.delete(api_version, kind, name, namespace)
    ctx.wait_until(
        f"{len(doomed)} load balancers and dynamic volumes to go",
        lambda: True if all(api.get(v, k, n, ns) is None for v, k, n, ns in doomed) else None,
        60.0,
        1200,
        "kube-stack",
    )
