"""Drift by content: the fields fmctl applies, compared with the live object as
server-side apply merges (what others added beside them is not drift)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from provisioner.resources.kube_drift import content_drift, managers_of, quantity

RENDERED = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {
        "name": "dcgm-exporter",
        "namespace": "monitoring",
        "labels": {"app": "dcgm-exporter"},
        "annotations": {"fmctl.dev/applied-digest": "abc"},
    },
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "dcgm",
                        "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3",
                        "resources": {"limits": {"cpu": "0.5", "memory": "1024Mi"}},
                        "ports": [{"containerPort": 9400, "name": "metrics"}],
                        "volumeMounts": [
                            {"name": "conf", "mountPath": "/etc/a.yaml", "subPath": "a.yaml"},
                            {"name": "conf", "mountPath": "/etc/b.yaml", "subPath": "b.yaml"},
                        ],
                    }
                ],
                "tolerations": [{"operator": "Exists"}],
            }
        }
    },
}


def _live() -> dict[str, Any]:
    import copy

    live = copy.deepcopy(RENDERED)
    meta = live["metadata"]
    meta["labels"]["added-by-someone"] = "yes"
    meta["resourceVersion"] = "42"
    container = live["spec"]["template"]["spec"]["containers"][0]
    # What the server fills in or keeps canonically, and what others add beside fmctl's.
    container["resources"]["limits"] = {"cpu": "500m", "memory": "1Gi"}
    container["imagePullPolicy"] = "IfNotPresent"
    container["ports"][0]["protocol"] = "TCP"
    container["volumeMounts"].reverse()
    live["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "x"})
    live["status"] = {"numberReady": 2}
    return live


def test_defaults_canonical_quantities_and_additions_are_not_drift() -> None:
    assert content_drift(RENDERED, _live()) == []


def test_a_changed_field_and_a_removed_one_are() -> None:
    live = _live()
    container = live["spec"]["template"]["spec"]["containers"][0]
    container["image"] = "mine:1"
    del live["metadata"]["labels"]["app"]
    live["spec"]["template"]["spec"]["tolerations"] = []
    found = {d.path: (d.live, d.want) for d in content_drift(RENDERED, live)}
    assert found == {
        "spec.template.spec.containers[dcgm].image": (
            "mine:1",
            "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3",
        ),
        "metadata.labels.app": (None, "dcgm-exporter"),
        "spec.template.spec.tolerations": ([], [{"operator": "Exists"}]),
    }


def test_quantities_by_value() -> None:
    assert quantity("500m") == Decimal("0.5") == quantity("0.5")
    assert quantity("1Gi") == quantity("1024Mi") == Decimal(2**30)
    assert quantity("1e3") == quantity("1k") == Decimal(1000)
    assert quantity("abc") is None and quantity(True) is None


def test_who_changed_it_from_managed_fields() -> None:
    live = {
        "data": {"prometheus.yml": "x"},
        "metadata": {
            "managedFields": [
                {"manager": "fmctl", "fieldsV1": {"f:data": {"f:prometheus.yml": {}}}},
                {"manager": "kubectl", "fieldsV1": {"f:data": {"f:prometheus.yml": {}}}},
                {"manager": "kube-controller-manager", "fieldsV1": {"f:metadata": {}}},
            ]
        },
    }
    (drift,) = content_drift({"data": {"prometheus.yml": "y"}}, live)
    assert drift.path == "data.prometheus.yml"
    assert managers_of(live, drift) == ["kubectl"]
