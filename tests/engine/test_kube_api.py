"""The sandbox's Kubernetes API, reached by fmctl's real client (``KubeClient``) over HTTPS
with an EKS token: the behaviour fmctl relies on, and that a stand-in must get right for
the end-to-end tests to mean anything (server-side apply and field ownership above all)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from provisioner.drivers.eks_auth import token
from provisioner.drivers.kube import KubeClient, KubeError
from tests.engine.harness import Sandbox

REGION = "eu-west-1"


def _cluster(sandbox: Sandbox) -> dict[str, Any]:
    aws = sandbox.aws(REGION)
    ec2 = aws.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i * 16}.0/20", AvailabilityZone=az)[
            "Subnet"
        ]["SubnetId"]
        for i, az in enumerate(("eu-west-1a", "eu-west-1b"))
    ]
    eks = aws.client("eks")
    name = f"kube-{uuid.uuid4().hex[:6]}"
    eks.create_cluster(
        name=name,
        version="1.33",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": subnets},
    )
    while (cluster := eks.describe_cluster(name=name)["cluster"])["status"] != "ACTIVE":
        time.sleep(0.05)
    return cluster


@pytest.fixture(scope="module")
def cluster(sandbox: Sandbox) -> dict[str, Any]:
    return _cluster(sandbox)


def _client(sandbox: Sandbox, cluster: dict[str, Any], manager: str = "fmctl") -> KubeClient:
    aws = sandbox.aws(REGION)
    return KubeClient.for_eks(
        cluster["endpoint"],
        cluster["certificateAuthority"]["data"],
        lambda: token(aws, cluster["name"]),
        manager,
    )


@pytest.fixture
def api(sandbox: Sandbox, cluster: dict[str, Any]) -> Iterator[KubeClient]:
    client = _client(sandbox, cluster)
    yield client
    client.close()


def _ns(api: KubeClient) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def _config_map(ns: str, data: dict[str, str], labels: dict[str, str] | None = None) -> Any:
    meta: dict[str, Any] = {"name": "settings", "namespace": ns}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def test_apply_creates_with_identity_and_ownership(api: KubeClient) -> None:
    ns = _ns(api)
    live = api.apply(_config_map(ns, {"a": "1"}))
    meta = live["metadata"]
    assert meta["uid"] and meta["resourceVersion"] and meta["namespace"] == ns
    fields = meta["managedFields"]
    assert [(f["manager"], f["operation"]) for f in fields] == [("fmctl", "Apply")]
    assert fields[0]["fieldsV1"] == {"f:data": {"f:a": {}}}
    # The same apply again changes nothing, not even the resource version.
    again = api.apply(_config_map(ns, {"a": "1"}))
    assert again["metadata"]["resourceVersion"] == meta["resourceVersion"]
    assert again["metadata"]["uid"] == meta["uid"]


def test_apply_merges_and_drops_what_the_manager_stopped_applying(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient
) -> None:
    ns = _ns(api)
    api.apply(_config_map(ns, {"a": "1", "b": "2"}))
    other = _client(sandbox, cluster, "kubectl-edit")
    try:
        other.apply(_config_map(ns, {"c": "3"}))
    finally:
        other.close()
    live = api.apply(_config_map(ns, {"a": "1"}))  # fmctl no longer applies b
    assert live["data"] == {"a": "1", "c": "3"}  # b removed, the other manager's c kept
    owners = {f["manager"]: f["fieldsV1"] for f in live["metadata"]["managedFields"]}
    assert owners == {"fmctl": {"f:data": {"f:a": {}}}, "kubectl-edit": {"f:data": {"f:c": {}}}}


def test_a_field_another_manager_owns_conflicts_unless_forced(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient
) -> None:
    ns = _ns(api)
    api.apply(_config_map(ns, {"a": "1"}))
    other = _client(sandbox, cluster, "someone")
    try:
        with pytest.raises(KubeError) as err:
            other.apply(_config_map(ns, {"a": "changed"}))
        assert err.value.status == 409 and 'conflict with "fmctl"' in err.value.message
        # The same value is shared ownership, not a conflict.
        other.apply(_config_map(ns, {"a": "1"}))
        forced = other.apply(_config_map(ns, {"a": "changed"}), force=True)
    finally:
        other.close()
    assert forced["data"] == {"a": "changed"}
    owners = {f["manager"] for f in forced["metadata"]["managedFields"]}
    assert owners == {"someone"}


def test_namespaces_scope_objects(api: KubeClient) -> None:
    with pytest.raises(KubeError) as err:
        api.apply(_config_map("no-such-namespace", {"a": "1"}))
    assert err.value.status == 404
    ns = _ns(api)
    api.apply(_config_map(ns, {"a": "1"}, {"team": "ml"}))
    assert [o["metadata"]["name"] for o in api.list("v1", "ConfigMap", ns, "team=ml")] == [
        "settings"
    ]
    assert api.list("v1", "ConfigMap", ns, "team=other") == []
    assert api.delete("v1", "Namespace", ns) is True
    assert api.get("v1", "ConfigMap", "settings", ns) is None
    assert api.delete("v1", "Namespace", ns) is False


def test_requests_without_an_eks_token_are_refused(
    sandbox: Sandbox, cluster: dict[str, Any]
) -> None:
    for bad in ("not-a-token", "k8s-aws-v1.aGVsbG8"):
        client = KubeClient.for_eks(
            cluster["endpoint"], cluster["certificateAuthority"]["data"], lambda b=bad: b
        )
        try:
            with pytest.raises(KubeError) as err:
                client.list("v1", "Namespace")
            assert err.value.status == 401
        finally:
            client.close()


def test_device_plugins_make_nodes_advertise_devices(
    sandbox: Sandbox, cluster: dict[str, Any], api: KubeClient
) -> None:
    """Nodes join bare; a device plugin DaemonSet that tolerates the GPU taint makes them
    advertise GPUs (the AL2023 NVIDIA AMI has no plugin of its own)."""
    aws = sandbox.aws(REGION)
    ec2, eks = aws.client("ec2"), aws.client("eks")
    lt = ec2.create_launch_template(
        LaunchTemplateName=f"lt-{cluster['name']}",
        LaunchTemplateData={
            "InstanceType": "p5.48xlarge",
            "NetworkInterfaces": [
                {"NetworkCardIndex": i, "DeviceIndex": min(i, 1), "InterfaceType": "efa-only"}
                for i in range(4)
            ],
        },
    )["LaunchTemplate"]
    eks.create_nodegroup(
        clusterName=cluster["name"],
        nodegroupName="gpu",
        nodeRole="arn:aws:iam::123456789012:role/node",
        subnets=cluster["resourcesVpcConfig"]["subnetIds"][:1],
        launchTemplate={"id": lt["LaunchTemplateId"]},
        scalingConfig={"minSize": 1, "maxSize": 1, "desiredSize": 1},
        labels={"pool": "gpu"},
        taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
    )
    while not api.list("v1", "Node", selector="pool=gpu"):
        time.sleep(0.05)
    node = api.list("v1", "Node", selector="pool=gpu")[0]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    ns = _ns(api)
    plugin = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "gpu-plugin", "namespace": ns},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}
                    ]
                }
            }
        },
    }
    api.apply(plugin)  # no toleration: the tainted node does not run it
    ds = api.get("apps/v1", "DaemonSet", "gpu-plugin", ns)
    assert ds is not None and ds["status"]["desiredNumberScheduled"] == 0
    plugin["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    api.apply(plugin)
    node = api.list("v1", "Node", selector="pool=gpu")[0]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert "vpc.amazonaws.com/efa" not in node["status"]["allocatable"]  # no EFA plugin
