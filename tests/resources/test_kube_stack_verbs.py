"""The in-cluster stack's verbs against a Kubernetes API that answers with the objects laid
in it (``RecordedKube``) and recorded EKS answers: read lists fmctl's objects by label
(never the charts', never what Argo CD or Flux applies) and the Ready nodes of each pool;
diff says what is missing, differs or is no longer rendered, and the nodes; a create whose
answer was lost applies the same objects again and waits for them and the nodes; delete
removes what controllers made that AWS bills (load balancers, dynamic volumes) and waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources import kube_stack
from provisioner.resources.base import How, Owned, Request
from provisioner.resources.eks import EksOut
from provisioner.resources.eks_access import AccessOut
from provisioner.resources.kube_health import PoolCheck
from provisioner.resources.kube_stack import KubeStack, StackOut, StackParams
from provisioner.resources.network import SubnetOut
from tests.resources.contract import covers
from tests.resources.recorded import RecordedAws, RecordedKube
from tests.resources.test_kube_chart_verbs import CLUSTER, _ctx

FILES = (
    (
        "kubernetes/monitoring/namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: monitoring\n",
    ),
    (
        "kubernetes/monitoring/exporter.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: exporter\n"
        "  namespace: monitoring\nspec:\n  replicas: 1\n  template:\n    metadata:\n"
        "      annotations: {subnet: <fmctl:privateSubnetId>}\n",
    ),
    ("kubernetes/kustomization.yaml", "resources: []\n"),
)
POOL = PoolCheck("train", 2, 8, 32)


@pytest.fixture()
def kube(monkeypatch: pytest.MonkeyPatch) -> RecordedKube:
    api = RecordedKube()
    monkeypatch.setattr(kube_stack, "connect", lambda ctx, endpoint, ca: api)
    return api


def _params(tmp_path: Path, files: tuple[tuple[str, str], ...] = FILES) -> StackParams:
    return StackParams(
        Ref("eks", EksOut),
        files,
        (POOL,),
        str(tmp_path / "kubeconfig"),
        Ref("subnet/private", SubnetOut),
        Ref("access/admin", AccessOut),
        (),
        (),
    )


def _wired(aws: RecordedAws, **kw: Any) -> Any:
    ctx = _ctx(aws, **kw)
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-west-2a"))
    return ctx


def _node(name: str, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"fmctl.dev/pool": "train"}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
        },
    }


def _running(kube: RecordedKube) -> None:
    for obj in kube.objects.values():
        if obj["kind"] == "Deployment":
            obj["status"] = {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}


@covers("kube-stack", "read", "diff")
def test_the_stack_is_read_by_fmctls_label_and_what_differs_or_is_gone_is_said(
    kube: RecordedKube, tmp_path: Path
) -> None:
    ctx = _wired(RecordedAws("us-west-2"))
    params = _params(tmp_path)
    assert KubeStack().read(Request(ctx, "kube-stack", params)) is None  # nothing applied
    for obj in KubeStack()._objects(ctx, params):
        kube.put(obj)
    kube.put(_node("ip-10-0-1-1"))
    kube.put(_node("ip-10-0-1-2"))
    # A chart's object and one Argo CD applies: neither is the stack's to diff.
    kube.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "kueue",
                "namespace": "kueue-system",
                "labels": {"fmctl.dev/cluster": CLUSTER, "fmctl.dev/chart": "kueue"},
            },
        }
    )
    argo = {"argocd.argoproj.io/tracking-id": "stack:apps/Deployment:monitoring/grafana"}
    kube.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "grafana",
                "namespace": "monitoring",
                "labels": {"fmctl.dev/cluster": CLUSTER},
                "annotations": argo,
            },
        }
    )
    # The NCCL test's Job, applied by a person from the rendered folder: the cluster's label,
    # no digest (`up` never applied it). Not the stack's to prune.
    kube.put(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "nccl-allreduce",
                "namespace": "training",
                "labels": {"fmctl.dev/cluster": CLUSTER},
            },
        }
    )
    req = Request(ctx, "kube-stack", params)
    observed = KubeStack().read(req)
    assert observed is not None and observed.outputs.id == "2 objects"
    assert dict(observed.live.external) == {"Deployment/monitoring/grafana": "Argo CD (stack)"}
    assert KubeStack().diff(req, observed) == []
    # The exporter no longer rendered, a new object, and a node gone: each said.
    fewer = (
        FILES[0],
        (
            "kubernetes/monitoring/config.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: monitoring\n",
        ),
    )
    kube.delete("v1", "Node", "ip-10-0-1-2")
    later = KubeStack().read(Request(ctx, "kube-stack", _params(tmp_path, fewer)))
    assert later is not None
    changes = {
        c.path: c
        for c in KubeStack().diff(Request(ctx, "kube-stack", _params(tmp_path, fewer)), later)
    }
    assert changes["objects.Deployment/monitoring/exporter"].reason == "no longer rendered: deleted"
    assert changes["objects.ConfigMap/monitoring/cfg"].reason == "missing: applied"
    assert changes["nodes"].how == How.UPDATE


@covers("kube-stack", "create-adopts")
def test_an_apply_whose_answer_was_lost_is_the_same_apply_and_waits_for_the_nodes(
    kube: RecordedKube, tmp_path: Path
) -> None:
    ctx = _wired(RecordedAws("us-west-2"))
    params = _params(tmp_path)
    kube.put(_node("ip-10-0-1-1"))
    kube.put(_node("ip-10-0-1-2"))
    apply = kube.apply

    def applied(obj: dict[str, Any], force: bool = False) -> dict[str, Any]:
        live = apply(obj, force)
        with kube.lock:  # the cluster starts what is applied, one change at a time
            _running(kube)
        return live

    kube.apply = applied  # type: ignore[method-assign]
    for _ in range(2):  # the first run, and the one after its answer was lost
        assert KubeStack().create(Request(ctx, "kube-stack", params)) == StackOut(
            "2 objects", str(tmp_path / "kubeconfig")
        )
    keys = sorted(k for (_, k, _, _) in kube.objects)
    assert keys == ["Deployment", "Namespace", "Node", "Node"]  # one of each, not two
    # The exporter carries the private subnet the placeholder named, and the kubeconfig
    # names the cluster.
    exporter = kube.get("apps/v1", "Deployment", "exporter", "monitoring")
    assert exporter is not None
    assert exporter["spec"]["template"]["metadata"]["annotations"]["subnet"] == "subnet-9d4a7b6c"
    assert CLUSTER in (tmp_path / "kubeconfig").read_text()


def _v1(
    kind: str,
    name: str,
    namespace: str = "",
    annotations: dict[str, str] | None = None,
    **spec: str,
) -> dict[str, Any]:
    """A core (v1) object as the API server keeps it."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": spec}


@covers("kube-stack", "delete")
def test_down_deletes_load_balancers_and_dynamic_volumes_and_nothing_else(
    kube: RecordedKube,
) -> None:
    ctx = _wired(RecordedAws("us-west-2"), teardown=True)
    dynamic = {"pv.kubernetes.io/provisioned-by": "ebs.csi.aws.com"}
    kube.put(_v1("Service", "grafana", "monitoring", type="LoadBalancer"))
    kube.put(_v1("Service", "prometheus", "monitoring", type="ClusterIP"))
    kube.put(_v1("PersistentVolume", "pv-1", "", dynamic, persistentVolumeReclaimPolicy="Delete"))
    kube.put(_v1("PersistentVolume", "fsx", persistentVolumeReclaimPolicy="Retain"))
    kube.put(_v1("PersistentVolumeClaim", "data", "monitoring", volumeName="pv-1"))
    kube.put(_v1("PersistentVolumeClaim", "shared", "train", volumeName="fsx"))
    remove = kube.delete

    def csi(api_version: str, kind: str, name: str, namespace: str = "") -> bool:
        """The EBS CSI driver: a dynamic claim's volume goes once the claim has."""
        gone = remove(api_version, kind, name, namespace)
        if kind == "PersistentVolumeClaim":
            remove("v1", "PersistentVolume", "pv-1")
        return gone

    kube.delete = csi  # type: ignore[method-assign]
    KubeStack().delete(ctx, Owned("kube-stack", "kube-stack", CLUSTER))
    deleted = sorted(
        what for verb, what in kube.calls if verb == "delete" and "PersistentVolume/" not in what
    )
    assert deleted == ["PersistentVolumeClaim/monitoring/data", "Service/monitoring/grafana"]
    # The claim's volume goes with it (the CSI driver deletes it): waited for, not deleted.
    kube.put(_v1("Service", "lb", "x", type="LoadBalancer"))
    skipped = _wired(RecordedAws("us-west-2"), teardown=True)
    skipped.skip_kubernetes_cleanup = True
    KubeStack().delete(skipped, Owned("kube-stack", "kube-stack", CLUSTER))
    assert kube.get("v1", "Service", "lb", "x") is not None
