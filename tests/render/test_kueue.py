"""Kueue and NVIDIA's DRA driver as rendered, against the real things: every Kueue object
against Kueue 0.19.2's CRDs (openAPIV3Schema and their CEL rules), every ComputeDomain
against the DRA driver's CRD, both upstream charts through a real `helm template` with the
values fmctl writes and the result through the official schemas, and the GitOps folder's
order (charts before the objects that need their CRDs)."""

from __future__ import annotations

import os
import subprocess
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from fmctl_sandbox.crd_schema import Crd, validate
from provisioner.catalog import load_catalog
from provisioner.catalog.charts import DRA_DRIVER, KUEUE, minor
from provisioner.catalog.eks_versions import CALENDAR
from provisioner.drivers import yamlio
from provisioner.render import Rendered, render
from provisioner.render.queueing import CHANNEL_CLASS, CHANNEL_RESOURCE, HOSTNAME, ULTRASERVER_LABEL
from provisioner.spec import defaults
from provisioner.spec.source import load_source
from provisioner.validate import validate_document
from tests.conftest import ROOT, SHARED, fetched_tool, shared_file
from tests.render.helpers import documents

B300 = ROOT / "examples/p6-b300-eks-capacity-block.yaml"
GB200 = ROOT / "tests/data/specs/gb200-eks.yaml"
SPECS = [B300, GB200]
IDS = ["p6-b300", "gb200"]
TRAINING_CHART = ROOT / "charts/fmctl-training"


@cache
def _render(spec: Path, version: str | None = None, queueing: str | None = None) -> Rendered:
    doc, problems = load_source(str(spec))
    assert not problems
    if version is not None:
        doc.data.setdefault("kubernetes", {})["version"] = version
    if queueing is not None:
        doc.data.setdefault("kubernetes", {})["queueing"] = queueing
    result = validate_document(doc, "kubernetes")
    assert result.ok and result.resolved is not None, result.problems
    return render(result.resolved, load_catalog())


@cache
def _crds() -> dict[tuple[str, str], Crd]:
    """(group, kind) -> CRD, from Kueue's generated CRDs and the DRA driver's chart."""
    shared_file("schemas/kueue-v0.19.2/kueue.x-k8s.io_clusterqueues.yaml")
    files = sorted((SHARED / "schemas/kueue-v0.19.2").glob("*.yaml"))
    files += sorted((SHARED / "charts" / DRA_DRIVER.folder / "crds").glob("*.yaml"))
    out = {}
    for path in files:
        crd = Crd.from_object(yaml.safe_load(path.read_text()))
        out[(crd.group, crd.kind)] = crd
    return out


def _check_custom(obj: dict[str, Any]) -> list[str]:
    group, _, version = obj["apiVersion"].rpartition("/")
    crd = _crds()[(group, obj["kind"])]
    served = crd.version(version)
    assert served is not None, f"{obj['apiVersion']} {obj['kind']} is not served"
    _, errors = validate(served.schema, obj)
    return [str(e) for e in errors]


CUSTOM_GROUPS = ("kueue.x-k8s.io", "resource.nvidia.com")


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_kueue_and_compute_domain_objects_pass_their_crds(spec: Path) -> None:
    files = _render(spec).files
    checked: dict[str, int] = {}
    for path, doc in documents(files, "kubernetes/"):
        if doc["apiVersion"].split("/")[0] in CUSTOM_GROUPS:
            assert _check_custom(doc) == [], (path, doc["kind"], doc["metadata"]["name"])
            checked[doc["kind"]] = checked.get(doc["kind"], 0) + 1
    assert {"Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue"} <= set(checked)
    if spec == GB200:
        assert checked["ComputeDomain"] == 1  # the NCCL test's
    # v1beta2: what Kueue 0.19 serves and stores (v1beta1 is deprecated).
    for _, doc in documents(files, "kubernetes/kueue/queues"):
        assert doc["apiVersion"] == "kueue.x-k8s.io/v1beta2"


def test_the_crd_check_fails_on_what_kueue_refuses() -> None:
    """The schema and CEL rules really run: each break is one Kueue's API server refuses."""
    files = _render(B300).files
    objects = {d["kind"]: d for _, d in documents(files, "kubernetes/kueue/queues")}
    flavor = yaml.safe_load(yaml.safe_dump(objects["ResourceFlavor"]))
    flavor["spec"]["nodeLabels"] = {}
    assert any("at least one nodeLabel" in e for e in _check_custom(flavor))
    queue = yaml.safe_load(yaml.safe_dump(objects["ClusterQueue"]))
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    assert any("coveredResources" in e or "flavors" in e for e in _check_custom(queue))
    topology = yaml.safe_load(yaml.safe_dump(objects["Topology"]))
    topology["spec"]["levels"].reverse()  # the host must be the last level
    assert _check_custom(topology)
    domain = next(
        d for _, d in documents(_render(GB200).files, "kubernetes/") if d["kind"] == "ComputeDomain"
    )
    domain = yaml.safe_load(yaml.safe_dump(domain))
    del domain["spec"]["numNodes"]
    assert "spec.numNodes: Required value" in _check_custom(domain)
    local = yaml.safe_load(yaml.safe_dump(objects["LocalQueue"]))
    local["spec"]["clusterQueu"] = local["spec"].pop("clusterQueue")
    assert any('unknown field "spec.clusterQueu"' in e for e in _check_custom(local))


def test_topology_levels_follow_the_instance_types_depth() -> None:
    b300 = {d["kind"]: d for _, d in documents(_render(B300).files, "kubernetes/kueue/queues")}
    levels = [lv["nodeLabel"] for lv in b300["Topology"]["spec"]["levels"]]
    assert levels == [f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3, 4)] + [HOSTNAME]
    gb = {d["kind"]: d for _, d in documents(_render(GB200).files, "kubernetes/kueue/queues")}
    levels = [lv["nodeLabel"] for lv in gb["Topology"]["spec"]["levels"]]
    assert levels[-2:] == [ULTRASERVER_LABEL, HOSTNAME] and len(levels) == 5
    covered = gb["ClusterQueue"]["spec"]["resourceGroups"][0]["coveredResources"]
    assert CHANNEL_RESOURCE in covered and "hugepages-2Mi" in covered


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_resource_the_jobs_ask_for_is_covered(spec: Path) -> None:
    """Kueue leaves a job inadmissible when its pods request a resource the ClusterQueue does
    not cover: the NCCL test's and the training chart's requests are all covered."""
    files = _render(spec).files
    queue = next(
        d for _, d in documents(files, "kubernetes/kueue/queues") if d["kind"] == "ClusterQueue"
    )
    covered = set(queue["spec"]["resourceGroups"][0]["coveredResources"])
    job = next(d for _, d in documents(files, "kubernetes/nccl-test/") if d["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    asked = {r for c in pod["containers"] for r in c["resources"].get("requests", {})}
    assert asked <= covered, asked - covered
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert job["spec"]["suspend"] is True
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    (key,) = annotations
    assert key == "kueue.x-k8s.io/podset-required-topology"
    if spec == GB200:
        assert annotations[key] == ULTRASERVER_LABEL
        assert pod["resourceClaims"] == [
            {
                "name": "compute-domain-channel",
                "resourceClaimTemplateName": "nccl-allreduce-channel",
            }
        ]
        config = yaml.safe_load(
            yaml.safe_load(files["charts/kueue-values.yaml"])["managerConfig"][
                "controllerManagerConfigYaml"
            ]
        )
        mapping = config["resources"]["deviceClassMappings"]
        assert mapping == [{"name": CHANNEL_RESOURCE, "deviceClassNames": [CHANNEL_CLASS]}]


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [fetched_tool("helm"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **os.environ,
            "HELM_CACHE_HOME": "/tmp/fmctl-helm",
            "HELM_CONFIG_HOME": "/tmp/fmctl-helm",
        },
    )


def _chart_folder(name: str) -> Path:
    folder = SHARED / "charts" / name
    shared_file(f"charts/{name}/Chart.yaml")
    return folder


def _template(
    tmp_path: Path, chart: str, values_text: str, namespace: str, version: str
) -> list[dict[str, Any]]:
    values = tmp_path / f"{chart}-{version}.yaml"
    values.write_text(values_text)
    out = _helm(
        "template",
        chart.rsplit("-", 1)[0],
        str(_chart_folder(chart)),
        "--namespace",
        namespace,
        "--include-crds",
        "--kube-version",
        f"{version}.0",
        "-f",
        str(values),
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yamlio.load_all(out.stdout) if d]


#: The versions fmctl installs each chart on: Kueue on every supported version EKS still
#: creates clusters on; the DRA driver where EKS runs GB200 with DRA (1.33+).
LIVE = [
    v
    for v in defaults.KUBERNETES_VERSIONS
    if v not in CALENDAR or CALENDAR[v].support(date.today()) != "ended"
]
KUEUE_VERSIONS = [v for v in LIVE if minor(v) >= minor(KUEUE.min_kubernetes)]
DRA_VERSIONS = [v for v in LIVE if minor(v) >= (1, 33)]


@pytest.mark.parametrize("version", KUEUE_VERSIONS)
def test_kueue_chart_templates_with_fmctls_values(tmp_path: Path, version: str) -> None:
    files = _render(B300, version).files
    docs = _template(
        tmp_path, KUEUE.folder, files["charts/kueue-values.yaml"], KUEUE.namespace, version
    )
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Deployment", "MutatingWebhookConfiguration"} <= kinds
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == KUEUE.image  # the published chart's, not staging
    assert pod["nodeSelector"] == {"fmctl.dev/role": "system"}
    for doc in docs:
        kubernetes_validate.validate(doc, f"{version}.0", strict=True)
    # What the chart puts in the controller's ConfigMap is fmctl's configuration.
    config_map = next(
        d
        for d in docs
        if d["kind"] == "ConfigMap" and "controller_manager_config.yaml" in d.get("data", {})
    )
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    assert config["waitForPodsReady"]["timeout"] == "10m"


@pytest.mark.parametrize("version", DRA_VERSIONS)
def test_dra_chart_templates_with_fmctls_values(tmp_path: Path, version: str) -> None:
    # Kueue on GB200 needs 1.34 (rule queueing-kubernetes-version): on 1.33 the driver alone.
    files = _render(GB200, version, None if minor(version) >= (1, 34) else "none").files
    docs = _template(
        tmp_path,
        DRA_DRIVER.folder,
        files["charts/nvidia-dra-driver-gpu-values.yaml"],
        DRA_DRIVER.namespace,
        version,
    )
    classes = {d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass"}
    # ComputeDomains only: the GPUs stay the device plugin's (nvidia.com/gpu).
    assert classes == {"compute-domain-daemon.nvidia.com", CHANNEL_CLASS}
    api = {d["apiVersion"] for d in docs if d["kind"] == "DeviceClass"}
    assert api == {"resource.k8s.io/v1" if minor(version) >= (1, 34) else "resource.k8s.io/v1beta2"}
    plugin = next(d for d in docs if d["kind"] == "DaemonSet")
    terms = plugin["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "fmctl.dev/pool", "operator": "In", "values": ["nvl72"]}]}
    ]
    controller = next(d for d in docs if d["kind"] == "Deployment")
    assert "affinity" not in controller["spec"]["template"]["spec"]  # no control-plane nodes on EKS
    for doc in docs:
        kubernetes_validate.validate(doc, f"{version}.0", strict=True)


def test_the_dra_chart_refuses_its_own_default_gpu_part(tmp_path: Path) -> None:
    """Why fmctl turns the DRA driver's GPU part off: the chart refuses to run beside the
    device plugin with it on."""
    out = _helm(
        "template",
        "x",
        str(_chart_folder(DRA_DRIVER.folder)),
        "--namespace",
        "x",
        "--kube-version",
        "1.35.0",
    )
    assert out.returncode != 0 and "resources.gpus.enabled" in out.stderr


def test_training_chart_on_gb200_queues_and_claims_a_domain(tmp_path: Path) -> None:
    files = _render(GB200).files
    values = tmp_path / "values.yaml"
    values.write_text(files["charts/values-nvl72-train.yaml"])
    out = _helm(
        "template", "run1", str(TRAINING_CHART), "-f", str(values), "--namespace", "training"
    )
    assert out.returncode == 0, out.stderr
    docs = {d["kind"]: d for d in yamlio.load_all(out.stdout) if d}
    assert _check_custom(docs["ComputeDomain"]) == []
    job = docs["Job"]
    kubernetes_validate.validate(job, "1.35.0", strict=True)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert job["spec"]["suspend"] is True
    template = job["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": ULTRASERVER_LABEL
    }
    claims = template["spec"]["resourceClaims"]
    assert claims == [
        {"name": "compute-domain-channel", "resourceClaimTemplateName": "run1-channel"}
    ]
    assert (
        docs["ComputeDomain"]["spec"]["channel"]["resourceClaimTemplate"]["name"] == "run1-channel"
    )


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_gitops_syncs_charts_before_the_stack(spec: Path) -> None:
    files = _render(spec).files
    apps = list(yamlio.load_all(files["gitops/argocd-application.yaml"]))
    waves = {
        a["metadata"]["name"]: int(a["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
        for a in apps
    }
    stack = waves.pop("fmctl-" + apps[-1]["metadata"]["name"].removeprefix("fmctl-"))
    assert waves and all(w < stack for w in waves.values())
    for app in apps[:-1]:
        chart = app["metadata"]["name"].rsplit("-", 1)[-1]
        source = app["spec"]["source"]
        name = next(c for c in (KUEUE, DRA_DRIVER) if app["metadata"]["name"].endswith(c.name))
        assert source["targetRevision"] == name.version and chart
        values = yaml.safe_load(files[f"charts/{name.name}-values.yaml"])
        assert source["helm"]["valuesObject"] == values
    flux = list(yamlio.load_all(files["gitops/flux-kustomization.yaml"]))
    stack_ks = next(
        d
        for d in flux
        if d["kind"] == "Kustomization" and not d["metadata"]["name"].endswith("-charts")
    )
    charts_ks = next(d for d in flux if d["metadata"]["name"].endswith("-charts"))
    assert stack_ks["spec"]["dependsOn"] == [{"name": charts_ks["metadata"]["name"]}]
    assert charts_ks["spec"]["wait"] is True
    assert charts_ks["spec"]["path"].endswith("gitops/flux")
    listed = yaml.safe_load(files["gitops/flux/kustomization.yaml"])["resources"]
    for entry in listed:
        docs = list(yamlio.load_all(files[f"gitops/flux/{entry}"]))
        release = next(d for d in docs if d["kind"] == "HelmRelease")
        chart = next(c for c in (KUEUE, DRA_DRIVER) if c.name == entry.removesuffix(".yaml"))
        assert release["spec"]["values"] == yaml.safe_load(
            files[f"charts/{chart.name}-values.yaml"]
        )
        assert release["spec"]["install"]["crds"] == "CreateReplace"
        assert release["spec"]["targetNamespace"] == chart.namespace
