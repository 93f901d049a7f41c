"""Kubernetes output: official schemas (kubernetes-validate --strict), eksctl's schema, and
the facts that matter (EFA layouts, tolerations, FSx volume, IMDSv2, labels)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.drivers import yamlio
from provisioner.render.efa import efa_interfaces
from tests.conftest import shared_file
from tests.render.helpers import CASE_IDS, CASES, documents, fill_all, rendered

ROOT = Path(__file__).resolve().parents[2]
K8S_CASES = [(e, s) for e, s in CASES if s == "kubernetes"]
K8S_IDS = [i for i in CASE_IDS if i.endswith(":kubernetes")]
#: Objects whose kinds come from CRDs (no official schema): checked by shape only.
CRD_KINDS = {
    ("argoproj.io/v1alpha1", "Application"),
    ("source.toolkit.fluxcd.io/v1", "GitRepository"),
    ("source.toolkit.fluxcd.io/v1", "OCIRepository"),
    ("source.toolkit.fluxcd.io/v1", "HelmRepository"),
    ("helm.toolkit.fluxcd.io/v2", "HelmRelease"),
    ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
}
#: Groups of the CRDs the charts install (Kueue, the DRA driver): their objects are checked
#: against those CRDs' schemas and CEL rules in test_kueue.
CHART_CRD_GROUPS = ("kueue.x-k8s.io", "resource.nvidia.com")
CATALOG = load_catalog()


def _version(example: Path) -> str:
    spec = yaml.safe_load(example.read_text())
    return spec.get("kubernetes", {}).get("version", "1.33") + ".0"


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_manifests_pass_official_schemas(example: Path, scheduler: str) -> None:
    files = rendered(example, scheduler).files
    checked = 0
    for _path, doc in documents(files, "kubernetes/"):
        if doc["apiVersion"].startswith("kustomize.config.k8s.io"):
            continue  # kustomize's own file, not an API object
        if doc["apiVersion"].split("/")[0] in CHART_CRD_GROUPS:
            continue
        kubernetes_validate.validate(doc, _version(example), strict=True)
        checked += 1
    assert checked >= 20
    for path, doc in documents(files, "gitops/"):
        if path.endswith("/kustomization.yaml"):
            continue  # gitops/flux/: kustomize's own file
        assert (doc["apiVersion"], doc["kind"]) in CRD_KINDS, path


def test_the_schema_check_can_fail() -> None:
    bad = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "x"},
        "spec": {
            "selector": {},
            "template": {"spec": {"containers": [{"name": "a", "image": "b", "tolerationz": []}]}},
        },
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.33.0", strict=True)


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_every_object_is_labelled(example: Path, scheduler: str) -> None:
    name = yaml.safe_load(example.read_text())["metadata"]["name"]
    for path, doc in documents(rendered(example, scheduler).files, "kubernetes/"):
        if doc["kind"] == "Kustomization":
            continue
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "fmctl", path
        assert labels["fmctl.dev/cluster"] == name, path


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_eksctl_config_matches_eksctl_schema(example: Path, scheduler: str) -> None:
    schema = json.loads(shared_file("schemas/eksctl-v1alpha5.schema.json").read_text())
    config = yaml.safe_load(rendered(example, scheduler).files["aws/eksctl-cluster.yaml"])
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(config)]
    assert errors == []
    spec = yaml.safe_load(example.read_text())
    pool = spec["compute"]["gpuPools"][0]
    group = next(g for g in config["managedNodeGroups"] if g["name"] == pool["name"])
    if "reservationId" in pool.get("capacity", {}):
        target = group["capacityReservation"]["capacityReservationTarget"]
        assert target == {"capacityReservationID": pool["capacity"]["reservationId"]}


def test_eksctl_schema_rejects_the_wrong_case() -> None:
    schema = json.loads(shared_file("schemas/eksctl-v1alpha5.schema.json").read_text())
    config = {
        "apiVersion": "eksctl.io/v1alpha5",
        "kind": "ClusterConfig",
        "metadata": {"name": "x", "region": "us-east-1"},
        "managedNodeGroups": [
            {
                "name": "g",
                "capacityReservation": {
                    "capacityReservationTarget": {"capacityReservationId": "cr-1"}
                },
            }
        ],
    }
    assert list(jsonschema.Draft7Validator(schema).iter_errors(config))


def _launch_templates(example: Path) -> list[tuple[str, dict[str, Any]]]:
    files = rendered(example, "kubernetes").files
    return [
        (p, yaml.safe_load(t)) for p, t in files.items() if p.startswith("aws/launch-templates/")
    ]


@pytest.mark.parametrize(
    ("itype", "efa", "ena_only_card0"),
    [
        ("p5.48xlarge", 32, False),
        ("p5e.48xlarge", 32, False),
        ("p5en.48xlarge", 16, False),
        ("p6-b200.48xlarge", 8, False),
        ("p6-b300.48xlarge", 16, True),
        ("p6e-gb200.36xlarge", 16, True),
        ("p4d.24xlarge", 4, False),
    ],
)
def test_efa_layout_per_type(itype: str, efa: int, ena_only_card0: bool) -> None:
    interfaces = efa_interfaces(CATALOG[itype], True)
    assert interfaces[0].network_card_index == 0 and interfaces[0].device_index == 0
    assert interfaces[0].interface_type == "interface"
    efa_ifaces = [i for i in interfaces if i.is_efa]
    assert len(efa_ifaces) == efa == CATALOG[itype].network.efa_interfaces
    assert {i.interface_type for i in efa_ifaces} == {"efa-only"}
    cards = [i.network_card_index for i in efa_ifaces]
    assert len(set(cards)) == len(cards), "one EFA device per card"
    assert (0 not in cards) == ena_only_card0
    assert efa_interfaces(CATALOG[itype], False) == [interfaces[0]]


@pytest.mark.parametrize("example", [e for e, _ in K8S_CASES], ids=lambda e: e.stem)
def test_rendered_launch_templates(example: Path) -> None:
    spec = yaml.safe_load(example.read_text())
    pools = {p["name"]: p for p in spec["compute"]["gpuPools"]}
    for path, lt in _launch_templates(example):
        data = lt["LaunchTemplateData"]
        pool = pools[Path(path).stem]
        itype = CATALOG[pool["instanceType"]]
        assert data["MetadataOptions"]["HttpTokens"] == "required"
        assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
        assert all(b["Ebs"]["Encrypted"] for b in data["BlockDeviceMappings"])
        nics = data["NetworkInterfaces"]
        assert all(n["DeleteOnTermination"] for n in nics)
        assert not any("SubnetId" in n for n in nics)
        efa_nics = [n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]
        assert len(efa_nics) == itype.network.efa_interfaces
        assert sorted(n["NetworkCardIndex"] for n in efa_nics) == sorted(itype.network.efa_cards)
        assert data["InstanceType"] == itype.name
        if pool.get("capacity", {}).get("type") == "capacity-block":
            assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
            target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
            assert target["CapacityReservationId"] == pool["capacity"]["reservationId"]
        if itype.local_nvme and spec.get("storage", {}).get("localNvme") is not None:
            assert "strategy: RAID0" in data["UserData"]
        assert "vm.nr_hugepages" in data["UserData"]


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_node_groups(example: Path, scheduler: str) -> None:
    spec = yaml.safe_load(example.read_text())
    files = rendered(example, scheduler).files
    for pool in spec["compute"]["gpuPools"]:
        group = yaml.safe_load(files[f"aws/nodegroups/{pool['name']}.yaml"])
        kind = pool.get("capacity", {}).get("type", "on-demand")
        expected = {"capacity-block": "CAPACITY_BLOCK", "spot": "SPOT"}.get(kind, "ON_DEMAND")
        assert group["capacityType"] == expected
        assert group["amiType"].startswith("AL2023_") and group["amiType"].endswith("_NVIDIA")
        assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in group[
            "taints"
        ]
        assert "instanceTypes" not in group  # the launch template names the type


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_device_plugins_and_exporters(example: Path, scheduler: str) -> None:
    objects = {
        (d["kind"], d["metadata"]["name"]): d
        for _, d in documents(rendered(example, scheduler).files, "kubernetes/")
        if "metadata" in d
    }
    gpu_taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    nvidia = _pod_spec(objects[("DaemonSet", "nvidia-device-plugin")])
    assert gpu_taint in nvidia["tolerations"]
    assert nvidia["containers"][0]["image"].endswith(":v0.20.0")
    efa = _pod_spec(objects[("DaemonSet", "efa-device-plugin")])
    assert efa["nodeSelector"] == {"fmctl.dev/efa": "true"}
    assert gpu_taint in efa["tolerations"]
    assert {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"} in efa[
        "tolerations"
    ]
    version = efa["containers"][0]["image"].rsplit(":v", 1)[1]
    assert tuple(int(x) for x in version.split(".")) >= (0, 5, 10)
    assert gpu_taint in _pod_spec(objects[("DaemonSet", "dcgm-exporter")])["tolerations"]
    for (kind, name), doc in objects.items():
        if kind in ("DaemonSet", "Deployment", "Job"):
            for container in _pod_spec(doc)["containers"]:
                assert not container["image"].endswith(":latest"), name
        if kind == "Service":
            assert doc["spec"].get("type", "ClusterIP") == "ClusterIP", name


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_fsx_volume(example: Path, scheduler: str) -> None:
    spec = yaml.safe_load(example.read_text())
    files = rendered(example, scheduler).files
    objects = {d["kind"]: d for _, d in documents(files, "kubernetes/fsx/") if "metadata" in d}
    pv = objects["PersistentVolume"]["spec"]
    assert pv["csi"]["driver"] == "fsx.csi.aws.com"
    fs_id = spec["storage"]["fsxLustre"].get("fileSystemId", "<fmctl:fileSystemId>")
    assert pv["csi"]["volumeHandle"] == fs_id
    assert set(pv["csi"]["volumeAttributes"]) == {"dnsname", "mountname"}
    assert pv["accessModes"] == ["ReadWriteMany"]
    assert pv["persistentVolumeReclaimPolicy"] == "Retain"
    pvc = objects["PersistentVolumeClaim"]
    assert pvc["spec"]["volumeName"] == objects["PersistentVolume"]["metadata"]["name"]
    assert objects["StorageClass"]["provisioner"] == "fsx.csi.aws.com"
    # Filled with real-looking ids, the volume still passes the official schema.
    filled = yamlio.load_all(fill_all(files["kubernetes/fsx/volume.yaml"]))
    for doc in filled:
        kubernetes_validate.validate(doc, "1.33.0", strict=True)


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_nothing_open_to_the_world(example: Path, scheduler: str) -> None:
    files = rendered(example, scheduler).files
    assert not any("0.0.0.0/0" in text for text in files.values())
    cluster = yaml.safe_load(files["aws/eks-cluster.yaml"])
    vpc = cluster["resourcesVpcConfig"]
    assert vpc["endpointPrivateAccess"] is True
    if vpc["endpointPublicAccess"]:
        assert vpc["publicAccessCidrs"] and "0.0.0.0/0" not in vpc["publicAccessCidrs"]
    assert cluster["encryptionConfig"][0]["resources"] == ["secrets"]
    assert cluster["accessConfig"]["authenticationMode"] == "API"


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_grafana_is_provisioned(example: Path, scheduler: str) -> None:
    files = rendered(example, scheduler).files
    maps = {
        d["metadata"]["name"]: d["data"]
        for _, d in documents(files, "kubernetes/grafana/")
        if d["kind"] == "ConfigMap"
    }
    datasource = yaml.safe_load(maps["grafana-provisioning"]["datasources.yaml"])
    uid = datasource["datasources"][0]["uid"]
    boards = maps["grafana-dashboards"]
    # The storage board on both schedulers; the Slurm queue board only on Slurm, the pods and
    # nodes board only on Kubernetes.
    assert {"fmctl-storage.json", "fmctl-kubernetes.json"} <= set(boards)
    assert "fmctl-slurm.json" not in boards
    for name, text in boards.items():
        board = json.loads(text)
        assert board["uid"] and board["panels"], name
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == uid, (name, panel["title"])
            assert all(t["expr"] for t in panel["targets"])


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_prometheus_config_and_remote_write(example: Path, scheduler: str) -> None:
    """With a workspace in the spec Prometheus remote-writes there, signed for the
    workspace's region; kube-state-metrics' own labels are kept. (Debian's promtool is built
    without Kubernetes discovery, so it cannot check this config; the Slurm one it checks
    shares the remote-write block.)"""
    files = rendered(example, scheduler).files
    (config,) = [
        d for _, d in documents(files, "kubernetes/prometheus/") if d["kind"] == "ConfigMap"
    ]
    prometheus = yaml.safe_load(config["data"]["prometheus.yml"])
    workspace = (yaml.safe_load(example.read_text()).get("observability") or {}).get(
        "ampWorkspaceArn"
    )
    if workspace:
        (write,) = prometheus["remote_write"]
        assert write["sigv4"] == {"region": workspace.split(":")[3]}
        suffix = f"/workspaces/{workspace.rsplit('/', 1)[1]}/api/v1/remote_write"
        assert write["url"].endswith(suffix)
    else:
        assert "remote_write" not in prometheus
    jobs = {j["job_name"]: j for j in prometheus["scrape_configs"]}
    assert jobs["kube-state-metrics"]["honor_labels"] is True


def test_node_groups_do_not_set_the_kubelets_labels() -> None:
    """node.kubernetes.io/instance-type is the kubelet's (reserved kubernetes.io prefix): a
    managed node group that sets it is refused or overridden; fmctl leaves it out."""
    for example, scheduler in CASES:
        for path, text in rendered(example, scheduler).files.items():
            if path.startswith("aws/") and "nodegroup" in path:
                assert "node.kubernetes.io/instance-type" not in text, path


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_the_stack_reads_every_kind_it_may_have_applied(example: Path, scheduler: str) -> None:
    """`up` reads the in-cluster stack by kind; a kind no template makes any more would not
    be read, and its objects never pruned, unless STACK_KINDS lists it."""
    from provisioner.resources.kube_stack import STACK_KINDS

    for path, doc in documents(rendered(example, scheduler).files, "kubernetes/"):
        if path.endswith("kustomization.yaml"):
            continue
        assert (doc["apiVersion"], doc["kind"]) in STACK_KINDS, path
