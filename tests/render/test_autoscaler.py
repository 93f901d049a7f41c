"""cost.idle.action: scale-down on EKS as rendered and planned: the Cluster Autoscaler's
manifests through the official schemas, its flags, its role (only groups tagged for the
cluster), the pool's node group and the tags on its Auto Scaling group, Kueue's admission
check and ProvisioningRequestConfig through Kueue's CRDs, fmctl's ProvisioningRequest CRD
(a real CRD whose schema and immutability rules hold), and the Kueue chart's pods annotated
so that they start after it; and what is not autoscaled (reserved capacity, no Kueue)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from fmctl_sandbox.crd_schema import Crd, validate
from provisioner.blueprint import Where, build
from provisioner.catalog import autoscaler, load_catalog
from provisioner.catalog.charts import KUEUE
from provisioner.drivers import yamlio
from provisioner.render import render
from provisioner.render.context import build_context
from provisioner.resources.base import Planned
from tests.conftest import ROOT, validate_text
from tests.render.helpers import documents
from tests.render.test_kueue import KUEUE_VERSIONS, _check_custom, _template

EXAMPLE = ROOT / "examples/p5en-eks-fsx-s3.yaml"
WHERE = Where(Path("/nonexistent"), Path("/nonexistent/kubeconfig"))
TEMPLATE = autoscaler.TEMPLATE_PREFIX


def _text(after: str = "1h", queueing: str | None = None, capacity: str = "on-demand") -> str:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["cost"] = {"idle": {"after": after, "action": "scale-down"}}
    data["compute"]["gpuPools"][0]["capacity"] = (
        {"type": capacity}
        if capacity != "reservation"
        else {"type": "reservation", "reservationId": "cr-0123456789abcdef0"}
    )
    if queueing:
        data["kubernetes"]["queueing"] = queueing
    return yaml.safe_dump(data, sort_keys=False)


def _files(text: str) -> dict[str, str]:
    validation = validate_text(text)
    assert validation.ok and validation.resolved is not None, validation.problems
    return render(validation.resolved, load_catalog()).files


def _items(text: str) -> dict[str, Planned]:
    validation = validate_text(text)
    assert validation.ok and validation.resolved is not None, validation.problems
    return {i.id: i for i in build(validation.resolved, load_catalog(), WHERE)}


def _one(files: dict[str, str], path: str, kind: str) -> dict[str, Any]:
    (found,) = [d for p, d in documents(files, path) if d["kind"] == kind]
    return found


def test_the_pool_its_tags_and_the_autoscaler() -> None:
    files = _files(_text())
    group = yaml.safe_load(files["aws/nodegroups/gpu.yaml"])
    assert group["scalingConfig"] == {"minSize": 0, "maxSize": 8, "desiredSize": 8}
    assert group["labels"][autoscaler.GPU_LABEL] == "nvidia-h200"
    tags = yaml.safe_load(files["aws/autoscaling/gpu.yaml"])["tags"]
    # What a node of the empty group offers, as the autoscaler reads it from the tags.
    assert tags[autoscaler.DISCOVERY_TAG] == "h200-finetune"
    assert tags[f"{TEMPLATE}label/fmctl.dev/pool"] == "gpu"
    assert tags[f"{TEMPLATE}label/workload"] == "training"
    assert tags[f"{TEMPLATE}taint/nvidia.com/gpu"] == "true:NoSchedule"
    assert tags[f"{TEMPLATE}resources/nvidia.com/gpu"] == "8"
    assert tags[f"{TEMPLATE}resources/vpc.amazonaws.com/efa"] == "16"
    assert tags[f"{TEMPLATE}resources/hugepages-2Mi"] == "40960Mi"
    deployment = _one(files, "kubernetes/cluster-autoscaler/", "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2"
    assert container["command"][1:] == [
        "--cloud-provider=aws",
        "--node-group-auto-discovery=asg:tag=fmctl.dev/autoscaler=h200-finetune",
        "--scale-down-unneeded-time=1h",
        "--scale-down-gpu-utilization-threshold=0.01",
        "--enable-provisioning-requests=true",
        # The verify gate's taint (on by default) is one a new node sheds, not a misfit.
        "--startup-taint=fmctl.dev/unverified",
    ]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    role = _one(files, "kubernetes/cluster-autoscaler/", "ClusterRole")
    groups = {g for rule in role["rules"] for g in rule["apiGroups"]}
    assert "autoscaling.x-k8s.io" in groups and "cluster.x-k8s.io" not in groups
    objects = [
        d
        for p, d in documents(files, "kubernetes/cluster-autoscaler/")
        if not p.endswith("/kustomization.yaml")
    ]
    assert {d["kind"] for d in objects} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "NetworkPolicy",
    }
    for version in KUEUE_VERSIONS:
        for doc in objects:
            kubernetes_validate.validate(doc, f"{version}.0", strict=True)


@pytest.mark.parametrize(
    ("after", "flag"), [("10m", "10m"), ("2h30m", "2h30m"), ("1d", "24h"), ("90m", "1h30m")]
)
def test_the_idle_time_is_a_go_duration(after: str, flag: str) -> None:
    validation = validate_text(_text(after))
    assert validation.resolved is not None
    assert build_context(validation.resolved, load_catalog()).scale_down_unneeded_time == flag


def test_kueue_waits_for_the_nodes_through_a_provisioning_request() -> None:
    files = _files(_text())
    check = _one(files, "kubernetes/kueue/", "AdmissionCheck")
    config = _one(files, "kubernetes/kueue/", "ProvisioningRequestConfig")
    queue = _one(files, "kubernetes/kueue/", "ClusterQueue")
    for obj in (check, config, queue):
        assert _check_custom(obj) == [], obj["kind"]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert config["spec"]["provisioningClassName"] == autoscaler.PROVISIONING_CLASS
    assert queue["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "fmctl-capacity", "onFlavors": ["gpu"]}]
    }
    broken = json.loads(json.dumps(check))
    broken["spec"]["parameters"]["kind"] = "not-a-Kind!"
    assert _check_custom(broken), "Kueue's CRD refuses a kind that is no Kind"


def _kueue_request(template: str = "ppt-job-x-fmctl-capacity-1-main") -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": "job-x-fmctl-capacity-1", "namespace": "training"},
        "spec": {
            "provisioningClassName": autoscaler.PROVISIONING_CLASS,
            "parameters": {},
            "podSets": [{"podTemplateRef": {"name": template}, "count": 2}],
        },
    }


def test_the_provisioning_request_crd_holds_what_the_api_says() -> None:
    files = _files(_text())
    crd = yaml.safe_load(files["charts/provisioningrequest-crd.yaml"])
    kubernetes_validate.validate(crd, "1.35.0", strict=True)
    assert (
        files["gitops/flux/provisioningrequest-crd.yaml"]
        == files["charts/provisioningrequest-crd.yaml"]
    )
    assert "provisioningrequest-crd.yaml" in files["gitops/flux/kustomization.yaml"]
    # Argo CD: an Application of its own for the CRD, a sync wave before the charts'.
    apps = {d["metadata"]["name"]: d for _, d in documents(files, "gitops/argocd-application.yaml")}
    crds, kueue = apps["fmctl-h200-finetune-kueue-crds"], apps["fmctl-h200-finetune-kueue"]
    wave = "argocd.argoproj.io/sync-wave"
    assert int(crds["metadata"]["annotations"][wave]) < int(kueue["metadata"]["annotations"][wave])
    source = crds["spec"]["source"]
    assert source["path"] == "h200-finetune/charts"
    assert source["directory"] == {"include": "{provisioningrequest-crd.yaml}"}
    schema = Crd.from_object(crd).version("v1")
    assert schema is not None
    request = _kueue_request()
    _, errors = validate(schema.schema, request)
    assert errors == []
    changed = _kueue_request("ppt-another")
    _, errors = validate(schema.schema, changed, request)
    assert any("immutable" in str(e) for e in errors), errors
    bad = _kueue_request()
    bad["spec"]["podSets"][0]["count"] = 0
    _, errors = validate(schema.schema, bad)
    assert errors


def test_kueue_starts_after_the_provisioning_api(tmp_path: Path) -> None:
    files = _files(_text())
    values = yaml.safe_load(files["charts/kueue-values.yaml"])
    annotations = values["controllerManager"]["manager"]["podAnnotations"]
    assert annotations == {"fmctl.dev/provisioning-requests": "served"}
    docs = _template(
        tmp_path, KUEUE.folder, files["charts/kueue-values.yaml"], KUEUE.namespace, "1.35"
    )
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert annotations.items() <= deployment["spec"]["template"]["metadata"]["annotations"].items()
    items = _items(_text())
    chart = items["chart/kueue"].params
    (crd,) = [d for d in yamlio.load_all(chart.crds) if d]
    assert crd["metadata"]["name"] == "provisioningrequests.autoscaling.x-k8s.io"


def test_the_plan_gives_the_autoscaler_a_role_for_the_clusters_groups_only() -> None:
    items = _items(_text())
    role = items["iam/cluster-autoscaler"].params
    trust = json.loads(role.trust)["Statement"][0]
    assert trust["Principal"]["Service"] == "pods.eks.amazonaws.com"
    # Only its own pods in this cluster (EKS Pod Identity's session tags).
    assert trust["Condition"] == {
        "StringEquals": {
            "aws:RequestTag/eks-cluster-name": "h200-finetune",
            "aws:RequestTag/kubernetes-namespace": "kube-system",
            "aws:RequestTag/kubernetes-service-account": "cluster-autoscaler",
        }
    }
    statements = json.loads(role.inline)["Statement"]
    read, write = statements
    assert read["Resource"] == "*" and all(
        a.split(":")[1].startswith("Describe") or a.startswith("ec2:Get") for a in read["Action"]
    )
    assert sorted(write["Action"]) == [
        "autoscaling:SetDesiredCapacity",
        "autoscaling:TerminateInstanceInAutoScalingGroup",
    ]
    assert write["Condition"] == {
        "StringEquals": {"autoscaling:ResourceTag/fmctl.dev/autoscaler": "h200-finetune"}
    }
    identity = items["pod-identity/cluster-autoscaler"].params
    assert (identity.namespace, identity.service_account) == ("kube-system", "cluster-autoscaler")
    group = items["nodegroup/gpu"].params
    assert group.autoscaled and dict(group.asg_tags)[autoscaler.DISCOVERY_TAG] == "h200-finetune"
    assert not items["nodegroup/system"].params.autoscaled


def test_reserved_capacity_is_not_autoscaled() -> None:
    files = _files(_text(capacity="reservation"))
    assert not any(p.startswith("kubernetes/cluster-autoscaler/") for p in files)
    # The group's tags are the node agent's controller's only (it may replace a faulty node).
    tags = yaml.safe_load(files["aws/autoscaling/gpu.yaml"])["tags"]
    assert list(tags) == ["fmctl.dev/verify-repair"]
    group = yaml.safe_load(files["aws/nodegroups/gpu.yaml"])
    assert group["scalingConfig"]["minSize"] == group["scalingConfig"]["maxSize"] == 8
    assert "iam/cluster-autoscaler" not in _items(_text(capacity="reservation"))


def test_without_kueue_pending_pods_are_what_it_scales_up_for() -> None:
    files = _files(_text(queueing="none"))
    deployment = _one(files, "kubernetes/cluster-autoscaler/", "Deployment")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--enable-provisioning-requests=true" not in command
    role = _one(files, "kubernetes/cluster-autoscaler/", "ClusterRole")
    assert "autoscaling.x-k8s.io" not in {g for rule in role["rules"] for g in rule["apiGroups"]}
    assert "charts/provisioningrequest-crd.yaml" not in files
