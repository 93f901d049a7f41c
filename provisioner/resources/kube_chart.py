"""An upstream Helm chart (Kueue, NVIDIA's DRA driver) installed in an EKS cluster: the
objects ``helm template`` makes of it with the values ``render`` wrote, applied server-side
(field manager fmctl, as Argo CD applies a Helm source), and the wait until its controllers
run (their webhooks answer only then: the in-cluster stack's Kueue objects are applied
after).

Every object carries ``fmctl.dev/chart`` (the in-cluster stack leaves those alone). The
chart's namespace is made here, with its Pod Security level, as `helm install
--create-namespace` would; it also records the kinds of cluster-wide objects the chart made,
so that removing the chart (`up` after ``kubernetes.queueing: none``) deletes them too. On
`down` nothing is deleted object by object: they go with the cluster.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioner.drivers import yamlio
from provisioner.drivers.helm import ChartRef, template
from provisioner.drivers.kube import KubeApi, KubeError
from provisioner.graph.ref import Ref
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
from provisioner.resources.context import Context
from provisioner.resources.eks import EksCluster, EksOut, cluster_ours
from provisioner.resources.eks_access import AccessOut
from provisioner.resources.eks_nodegroup_model import NodegroupOut
from provisioner.resources.errors import ResourceError
from provisioner.resources.kube_api import close, connect
from provisioner.resources.kube_objects import (
    CHANGED_IN_CLUSTER,
    DIGEST,
    apply_all,
    drifted,
    first_then_rest,
    key_of,
    stamp,
)
from provisioner.resources.tags import OWNER_TAG

CHART_LABEL = "fmctl.dev/chart"
#: The EKS cluster states whose Kubernetes API answers: ACTIVE, and UPDATING (the cluster
#: "continues to function during the update": UpdateClusterVersion, the EKS API reference).
SERVING = ("ACTIVE", "UPDATING")
VERSION_ANNOTATION = "fmctl.dev/chart-version"
#: What ``find_owned`` says when the cluster's API does not answer (its charts go with it).
UNSEEN = "the cluster's Kubernetes API did not answer, its charts are not listed"
#: On the chart's namespace: the cluster-wide kinds it made (apiVersion kind, comma-separated).
KINDS_ANNOTATION = "fmctl.dev/chart-cluster-kinds"
#: Deleted first when a chart goes: webhooks whose service is about to go would refuse
#: every later request they match.
WEBHOOKS = (
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
)


@dataclass(frozen=True)
class ChartOut:
    """The installed chart: name and version."""

    id: str


@dataclass(frozen=True)
class ChartParams:
    """The chart, its values, and what it needs (the cluster, admin access, system nodes)."""

    cluster: Ref[EksOut]
    chart: ChartRef
    values: str
    kube_version: str
    pod_security: str
    admin: Ref[AccessOut]
    nodegroups: tuple[Ref[NodegroupOut], ...] = ()
    #: CRDs (YAML documents) applied with the chart's objects, before them: APIs its
    #: controllers use only if served as they start (Kueue's ProvisioningRequests).
    crds: str = ""


@dataclass(frozen=True)
class ChartLive:
    """What is applied (key -> digest), the version it came from, and whether its
    controllers run."""

    version: Any
    objects: Any
    ready: Any
    #: The live objects (key -> object), to tell a hand edit (not a setting).
    content: Any = field(default=None, compare=False)


def _namespace(params: ChartParams, kinds: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": params.chart.namespace,
            "labels": {"pod-security.kubernetes.io/enforce": params.pod_security},
            "annotations": {KINDS_ANNOTATION: ",".join(kinds)},
        },
    }


def _cluster_kinds(objects: list[dict[str, Any]]) -> list[str]:
    kinds = {
        f"{o['apiVersion']} {o['kind']}"
        for o in objects
        if not _namespaced(o) and o["kind"] != "Namespace"
    }
    return sorted(kinds)


class KubeChart(Kind[ChartParams, ChartOut, ChartLive]):
    """Install, upgrade, mend and remove an upstream chart."""

    name, params, outputs = "kube-chart", ChartParams, ChartOut
    create_seconds, update_seconds, delete_seconds = 60.0, 60.0, 30.0
    policy = policies(
        version=Policy(How.UPDATE, "the chart's objects applied at the new version"),
        objects=Policy(How.UPDATE, "server-side apply (field manager fmctl)"),
        ready=Policy(How.UPDATE, "up waits for its controllers"),
    )

    def _objects(self, ctx: Context, params: ChartParams) -> list[dict[str, Any]]:
        """The chart's objects as fmctl applies them, made once per run (read, desired, diff
        and the apply each ask; a copy of Kueue's rendering and its digests cost a tenth of
        a second each time). They depend on the params alone; callers only read them."""
        what = repr((params.chart, params.values, params.kube_version, params.crds))
        key = f"kube-chart:{hashlib.sha256(what.encode()).hexdigest()}"
        return ctx.cached(key, lambda: self._render(ctx, params))

    def _render(self, ctx: Context, params: ChartParams) -> list[dict[str, Any]]:
        docs = template(params.chart, params.values, params.kube_version)
        docs += [d for d in yamlio.load_all(params.crds) if d] if params.crds else []
        for doc in docs:
            if not _namespaced(doc):
                # Charts' templates set one on cluster-wide objects too (Kueue's webhook
                # configurations); the API server drops it, and so does fmctl, as kubectl does,
                # so that what it keys and prunes by is what the server keeps.
                doc["metadata"].pop("namespace", None)
            elif doc["metadata"].get("namespace") is None:
                doc["metadata"]["namespace"] = params.chart.namespace
        docs.append(_namespace(params, _cluster_kinds(docs)))
        labels = {CHART_LABEL: params.chart.name}
        for doc in docs:
            stamp(doc, ctx.cluster, labels)
            doc["metadata"]["annotations"][VERSION_ANNOTATION] = params.chart.version
        return first_then_rest(docs)

    def read(self, req: Request[ChartParams]) -> Observed[ChartOut, ChartLive] | None:
        if not req.ctx.known(req.params.cluster) or not cluster_ours(req.ctx):
            return None
        rendered = self._objects(req.ctx, req.params)
        cluster = req.ctx.get(req.params.cluster)
        api = connect(req.ctx, cluster.endpoint, cluster.ca)
        try:
            live = _live(api, req.ctx.cluster, req.params.chart.name, _kinds(rendered))
            ready = not _not_ready(api, rendered)
        finally:
            close(api)
        if not live:
            return None
        versions = {
            (o["metadata"].get("annotations") or {}).get(VERSION_ANNOTATION, "")
            for o in live.values()
        }
        applied = frozenset(
            (k, (o["metadata"].get("annotations") or {}).get(DIGEST, "")) for k, o in live.items()
        )
        state = ChartLive(",".join(sorted(versions)), applied, ready, content=live)
        # The chart's id is its namespace (what find_owned finds it by).
        out = ChartOut(f"{req.params.chart.name} {req.params.chart.version}")
        return Observed(out, state, req.params.chart.namespace)

    def desired(
        self, req: Request[ChartParams], observed: Observed[ChartOut, ChartLive]
    ) -> ChartLive:
        objects = frozenset(
            (key_of(o), o["metadata"]["annotations"][DIGEST])
            for o in self._objects(req.ctx, req.params)
        )
        return ChartLive(req.params.chart.version, objects, True)

    def diff(
        self, req: Request[ChartParams], observed: Observed[ChartOut, ChartLive]
    ) -> list[FieldChange]:
        """The version, the objects that are missing, differ or are no longer made (one
        line, with counts: a chart has dozens), each hand-edited object, and readiness."""
        want = self.desired(req, observed)
        have = observed.live
        out: list[FieldChange] = []
        if want.version != have.version:
            out.append(FieldChange("version", have.version, want.version, *self.rule("version")))
        need, got = dict(want.objects), dict(have.objects)
        new = sorted(set(need) - set(got))
        gone = sorted(set(got) - set(need))
        changed = sorted(k for k in set(need) & set(got) if need[k] != got[k])
        if new or gone or changed:
            said = [
                f"{len(x)} {w}" for x, w in ((changed, "differ"), (new, "new"), (gone, "gone")) if x
            ]
            out.append(
                FieldChange(
                    "objects",
                    f"{len(got)} applied",
                    f"{len(need)} rendered",
                    How.UPDATE,
                    f"{', '.join(said)}: applied server-side, what is gone deleted",
                )
            )
        rendered = {key_of(o): o for o in self._objects(req.ctx, req.params)}
        for key in sorted(set(need) & set(got)):
            if need[key] == got[key] and have.content and key in have.content:
                out += drifted(key, rendered[key], have.content[key])
        if want.ready != have.ready:
            out.append(FieldChange("ready", have.ready, want.ready, *self.rule("ready")))
        return out

    def create(self, req: Request[ChartParams]) -> ChartOut:
        return self._install(req.ctx, req.rid, req.params, frozenset(), frozenset())

    def update(
        self,
        req: Request[ChartParams],
        observed: Observed[ChartOut, ChartLive],
        changes: Sequence[FieldChange],
    ) -> ChartOut:
        taken = {
            c.path.removeprefix("objects.")
            for c in changes
            if c.reason.startswith(CHANGED_IN_CLUSTER)
        }
        applied = (
            frozenset(k for k, _ in observed.live.objects)
            if isinstance(observed.live.objects, frozenset)
            else frozenset()
        )
        return self._install(req.ctx, req.rid, req.params, applied, frozenset(taken))

    def _install(
        self,
        ctx: Context,
        rid: str,
        params: ChartParams,
        applied: frozenset[str],
        taken: frozenset[str],
    ) -> ChartOut:
        objects = self._objects(ctx, params)
        cluster = ctx.get(params.cluster)
        api = connect(ctx, cluster.endpoint, cluster.ca)
        try:
            apply_all(api, objects, taken=taken)
            wanted = {key_of(o) for o in objects}
            kinds = {f"{o['kind']}": o["apiVersion"] for o in objects}
            for key in sorted(applied - wanted):  # made by an older version, no longer
                kind, namespace, name = key.split("/", 2)
                if kind in kinds:
                    ctx.emit(rid, "deleting", key)
                    api.delete(kinds[kind], kind, name, namespace)
            ctx.emit(
                rid,
                "note",
                f"applied {len(objects)} objects of {params.chart.name} {params.chart.version}",
            )
            last: list[str] = []

            def probe() -> bool | None:
                nonlocal last
                last = _not_ready(api, objects)
                return True if not last else None

            try:
                ctx.wait_until(f"{params.chart.name}'s controllers", probe, 30.0, 600, rid)
            except Exception as exc:
                raise ResourceError("; ".join(last) or str(exc)) from exc
        finally:
            close(api)
        return ChartOut(f"{params.chart.name} {params.chart.version}")

    def find_owned(self, ctx: Context) -> list[Owned]:
        """The charts fmctl installed (their namespaces, by label). Found in `down` too, so
        that what it lists is what it reports gone (they go with the cluster); an API that
        cannot be reached from here hides them (nothing of theirs is billed). A cluster being
        updated still serves its API ("Your cluster continues to function during the
        update", UpdateClusterVersion in the EKS API reference), so UPDATING lists them too."""
        if ctx.skip_kubernetes_cleanup or not cluster_ours(ctx):
            return []
        cluster = EksCluster().describe(ctx)
        if cluster is None or cluster["status"] not in SERVING:
            return []
        from urllib3.exceptions import HTTPError

        try:
            api = connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])
            try:
                selector = f"{OWNER_TAG}={ctx.cluster},{CHART_LABEL}"
                found = api.list("v1", "Namespace", selector=selector)
            finally:
                close(api)
        except (OSError, HTTPError, KubeError) as exc:
            # Said, not hidden: a caller comparing what it found with what it expects (the
            # crash campaign) must tell "not there" from "not seen".
            ctx.emit("charts", "note", f"{UNSEEN}: {exc}")
            return []
        return [
            self.owned_item(f"chart/{n['metadata']['labels'][CHART_LABEL]}", n["metadata"]["name"])
            for n in found
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        """Its webhooks first, then its cluster-wide objects, then its namespace (and what
        is in it). In `down`, nothing: it goes with the cluster."""
        if ctx.teardown:
            ctx.emit(owned.resource, "note", "goes with the EKS cluster")
            return
        cluster = EksCluster().describe(ctx)
        if cluster is None or cluster["status"] != "ACTIVE":
            return
        chart = owned.resource.removeprefix("chart/")
        api = connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])
        try:
            namespace = api.get("v1", "Namespace", owned.id)
            recorded = ((namespace or {}).get("metadata", {}).get("annotations") or {}).get(
                KINDS_ANNOTATION, ""
            )
            kinds = [tuple(k.split(" ", 1)) for k in recorded.split(",") if " " in k]
            ordered = [k for k in WEBHOOKS if k in kinds] + [k for k in kinds if k not in WEBHOOKS]
            selector = f"{OWNER_TAG}={ctx.cluster},{CHART_LABEL}={chart}"
            for api_version, kind in ordered:
                for obj in api.list(api_version, kind, selector=selector):
                    ctx.emit(owned.resource, "deleting", f"{kind} {obj['metadata']['name']}")
                    api.delete(api_version, kind, obj["metadata"]["name"])
            if namespace is not None:
                api.delete("v1", "Namespace", owned.id)
        finally:
            close(api)


def _namespaced(doc: dict[str, Any]) -> bool:
    """Kinds a chart makes that live in a namespace (the rest are cluster-wide)."""
    return doc["kind"] not in CLUSTER_SCOPED


#: The cluster-wide kinds the charts fmctl installs make (Kubernetes' API reference).
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "APIService",
        "DeviceClass",
        "PriorityClass",
        "StorageClass",
        "FlowSchema",
        "PriorityLevelConfiguration",
    }
)


def _kinds(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted({(o["apiVersion"], o["kind"]) for o in objects})


def _live(
    api: KubeApi, cluster: str, chart: str, kinds: list[tuple[str, str]]
) -> dict[str, dict[str, Any]]:
    """The chart's objects in the cluster, by key."""
    from provisioner.drivers.kube import KubeError

    found: dict[str, dict[str, Any]] = {}
    for api_version, kind in kinds:
        try:
            items = api.list(
                api_version, kind, selector=f"{OWNER_TAG}={cluster},{CHART_LABEL}={chart}"
            )
        except KubeError as err:
            if err.status == 404:  # a CRD's kind before the CRD is there
                continue
            raise
        for obj in items:
            found[key_of({"kind": kind, "metadata": obj["metadata"]})] = obj
    return found


def _not_ready(api: KubeApi, objects: list[dict[str, Any]]) -> list[str]:
    """What of the chart does not run yet: its Deployments not all available, its
    DaemonSets not ready where they are scheduled."""
    out = []
    for obj in objects:
        kind, meta = obj["kind"], obj["metadata"]
        if kind not in ("Deployment", "DaemonSet"):
            continue
        live = api.get(obj["apiVersion"], kind, meta["name"], meta.get("namespace", ""))
        status = (live or {}).get("status") or {}
        if kind == "Deployment":
            want = int((live or {}).get("spec", {}).get("replicas", 1) or 0)
            if live is None or int(status.get("availableReplicas", 0) or 0) < want:
                out.append(
                    f"Deployment {meta.get('namespace')}/{meta['name']}: "
                    f"{status.get('availableReplicas', 0) or 0}/{want} available"
                )
        else:
            ready = int(status.get("numberReady", 0) or 0)
            wanted = int(status.get("desiredNumberScheduled", 0) or 0)
            if live is None or ready < wanted:
                where = f"{meta.get('namespace')}/{meta['name']}"
                out.append(f"DaemonSet {where}: {ready}/{wanted} ready")
    return out
