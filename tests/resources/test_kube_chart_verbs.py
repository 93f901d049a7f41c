"""An upstream chart's verbs (Kueue's, rendered by the real helm from its release copy)
against a Kubernetes API that answers with the objects laid in it (``RecordedKube``) and
recorded EKS answers: read finds the chart's objects by their labels, only through this
cluster's control plane; diff counts what differs, is new or is gone, and says a field
changed in the cluster; a create whose answer was lost is the same server-side apply again
(one set of objects); a chart taken away loses its webhooks first, then its cluster-wide
objects, then its namespace, and in `down` nothing is deleted object by object."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.catalog.charts import KUEUE
from provisioner.drivers.helm import ChartRef
from provisioner.graph.ref import Ref
from provisioner.resources import kube_chart
from provisioner.resources.base import How, Owned, Request
from provisioner.resources.context import Context
from provisioner.resources.eks import EksOut
from provisioner.resources.eks_access import AccessOut
from provisioner.resources.kube_chart import ChartOut, ChartParams, KubeChart
from tests.resources.contract import covers
from tests.resources.recorded import RecordedAws, RecordedKube, example

CLUSTER = "devel"  # AWS's published DescribeCluster example's name
REF = ChartRef(KUEUE.name, KUEUE.version, KUEUE.repository, KUEUE.release, KUEUE.namespace)


@pytest.fixture()
def kube(monkeypatch: pytest.MonkeyPatch) -> RecordedKube:
    api = RecordedKube()
    monkeypatch.setattr(kube_chart, "connect", lambda ctx, endpoint, ca: api)
    return api


def _ctx(aws: RecordedAws, teardown: bool = False) -> Context:
    described = example("eks", "DescribeCluster")
    described["cluster"]["tags"] = {"fmctl.dev/cluster": CLUSTER, "fmctl.dev/resource": "eks"}
    for _ in range(3):  # this cluster's control plane: for the read, and each delete's look
        aws.answer("eks", "DescribeCluster", described, {"name": CLUSTER})
    ctx = Context(
        aws=aws,  # type: ignore[arg-type]
        cluster=CLUSTER,
        region="us-west-2",
        time_scale=0.001,
        teardown=teardown,
    )
    cluster = described["cluster"]
    ctx.record(
        "eks",
        EksOut(
            CLUSTER,
            cluster["arn"],
            cluster["endpoint"],
            cluster["certificateAuthority"]["data"],
            "1.35",
        ),
    )
    ctx.record("access/admin", AccessOut("arn:aws:iam::012345678910:role/Admin"))
    return ctx


def _params(values: str = "") -> ChartParams:
    return ChartParams(
        Ref("eks", EksOut), REF, values, "1.35", "baseline", Ref("access/admin", AccessOut)
    )


def _installed(kube: RecordedKube, ctx: Context, params: ChartParams) -> None:
    """The chart as an earlier `up` left it: every object applied, its controller running."""
    for obj in KubeChart()._objects(ctx, params):
        if obj["kind"] == "Deployment":
            obj["status"] = {"availableReplicas": obj["spec"].get("replicas", 1)}
        kube.put(obj)


@covers("kube-chart", "read", "diff")
def test_a_chart_is_read_by_its_labels_and_a_new_value_or_a_hand_edit_is_a_change(
    kube: RecordedKube,
) -> None:
    ctx = _ctx(RecordedAws("us-west-2"))
    params = _params()
    assert KubeChart().read(Request(ctx, "chart/kueue", params)) is None  # not installed
    _installed(kube, ctx, params)
    req = Request(ctx, "chart/kueue", params)
    observed = KubeChart().read(req)
    assert observed is not None and observed.id == KUEUE.namespace
    assert observed.outputs == ChartOut(f"kueue {KUEUE.version}") and observed.live.ready
    assert KubeChart().diff(req, observed) == []
    # A value that changes what the chart renders: the objects it changes differ.
    two = Request(ctx, "chart/kueue", _params("controllerManager:\n  replicas: 2\n"))
    changes = {c.path: c for c in KubeChart().diff(two, observed)}
    assert set(changes) == {"objects"} and changes["objects"].how == How.UPDATE
    assert "1 differ" in changes["objects"].reason
    # Someone scaled the controller by hand: a change in the cluster, taken back by up.
    deployment = next(
        o for (v, k, _, _), o in kube.objects.items() if k == "Deployment" and v == "apps/v1"
    )
    deployment["spec"]["replicas"] = 3
    edited = KubeChart().read(req)
    assert edited is not None
    (drift,) = [c for c in KubeChart().diff(req, edited) if c.drift]
    assert drift.path.startswith("objects.Deployment/") and "replicas" in str(drift.after)


@covers("kube-chart", "create-adopts")
def test_an_install_whose_answer_was_lost_is_the_same_apply_again(kube: RecordedKube) -> None:
    ctx = _ctx(RecordedAws("us-west-2"))
    params = _params()

    def running() -> None:  # the controller comes up once applied (the cluster's part)
        for obj in kube.objects.values():
            if obj["kind"] == "Deployment":
                obj["status"] = {"availableReplicas": obj["spec"].get("replicas", 1)}

    _ready_on_apply(kube, running)
    KubeChart().create(Request(ctx, "chart/kueue", params))
    first = {k: o["metadata"]["annotations"] for k, o in kube.objects.items()}
    applied = [what for verb, what in kube.calls if verb == "apply"]
    # The answer was lost: the next run applies again (server-side apply: the same objects).
    assert KubeChart().create(Request(ctx, "chart/kueue", params)) == ChartOut(
        f"kueue {KUEUE.version}"
    )
    assert {k: o["metadata"]["annotations"] for k, o in kube.objects.items()} == first
    # The CRDs and the namespace went first: what the rest needs.
    firsts = [a for a in applied if a.startswith(("CustomResourceDefinition/", "Namespace/"))]
    assert applied[: len(firsts)] == firsts


def _ready_on_apply(kube: RecordedKube, running: Any) -> None:
    """Make the Deployment's controller come up as soon as it is applied."""
    apply = kube.apply

    def applied(obj: dict[str, Any], force: bool = False) -> dict[str, Any]:
        live = apply(obj, force)
        with kube.lock:  # as the API server, one change at a time
            running()
        return live

    kube.apply = applied  # type: ignore[method-assign]


@covers("kube-chart", "delete")
def test_a_chart_taken_away_loses_its_webhooks_first_and_in_down_nothing_is_deleted(
    kube: RecordedKube,
) -> None:
    ctx = _ctx(RecordedAws("us-west-2"))
    _installed(kube, ctx, _params())
    KubeChart().delete(
        _ctx(RecordedAws("us-west-2"), teardown=True),
        Owned("kube-chart", "chart/kueue", KUEUE.namespace),
    )
    assert [c for c in kube.calls if c[0] == "delete"] == []  # goes with the cluster
    KubeChart().delete(ctx, Owned("kube-chart", "chart/kueue", KUEUE.namespace))
    deleted = [what for verb, what in kube.calls if verb == "delete"]
    kinds = [d.split("/", 1)[0] for d in deleted]
    webhooks = [k for k in kinds if k.endswith("WebhookConfiguration")]
    assert webhooks and kinds[: len(webhooks)] == webhooks
    assert kinds[-1] == "Namespace" and "CustomResourceDefinition" in kinds
    left = {k for (_, k, ns, _) in kube.objects if not ns}
    assert left == set()  # nothing of the chart's cluster-wide objects is left


@pytest.mark.parametrize(
    ("status", "listed"), [("ACTIVE", True), ("UPDATING", True), ("CREATING", False)]
)
def test_charts_are_found_while_the_cluster_serves_its_api(
    kube: RecordedKube, status: str, listed: bool
) -> None:
    """An update does not hide the charts (the cluster "continues to function during the
    update": UpdateClusterVersion); a cluster still being made has no API to ask."""
    _installed(kube, _ctx(RecordedAws("us-west-2")), _params())
    described = example("eks", "DescribeCluster")
    described["cluster"]["tags"] = {"fmctl.dev/cluster": CLUSTER, "fmctl.dev/resource": "eks"}
    described["cluster"]["status"] = status
    aws = RecordedAws("us-west-2")
    for _ in range(2):  # whose cluster it is, then whether it serves
        aws.answer("eks", "DescribeCluster", described, {"name": CLUSTER})
    ctx = Context(aws=aws, cluster=CLUSTER, region="us-west-2")  # type: ignore[arg-type]
    found = KubeChart().find_owned(ctx)
    assert [(o.resource, o.id) for o in found] == (
        [("chart/kueue", KUEUE.namespace)] if listed else []
    )


def test_an_api_that_does_not_answer_hides_the_charts_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`down` goes on without the charts (they go with the cluster), but the listing says it
    could not look: a caller comparing what it found with what it expects must not take "not
    seen" for "not there"."""
    from urllib3.exceptions import ReadTimeoutError

    class Silent(RecordedKube):
        def list(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            raise ReadTimeoutError(None, "/api/v1/namespaces", "Read timed out. (read timeout=60)")  # type: ignore[arg-type]

    monkeypatch.setattr(kube_chart, "connect", lambda ctx, endpoint, ca: Silent())
    described = example("eks", "DescribeCluster")
    described["cluster"]["tags"] = {"fmctl.dev/cluster": CLUSTER, "fmctl.dev/resource": "eks"}
    aws = RecordedAws("us-west-2")
    for _ in range(2):
        aws.answer("eks", "DescribeCluster", described, {"name": CLUSTER})
    notes: list[tuple[str, str]] = []
    ctx = Context(
        aws=aws,  # type: ignore[arg-type]
        cluster=CLUSTER,
        region="us-west-2",
        on_event=lambda e: notes.append((e.state, e.detail)),
    )
    assert KubeChart().find_owned(ctx) == []
    assert notes == [("note", f"{kube_chart.UNSEEN}: None: Read timed out. (read timeout=60)")]
