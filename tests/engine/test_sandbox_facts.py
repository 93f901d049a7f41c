"""The sandbox's facts are its own: what it offers comes from its own tables and sources, not
from fmctl's catalog, so a mistake in fmctl's shows against it."""

from __future__ import annotations

import ast
from datetime import date
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from fmctl_sandbox.eks_model import END_OF_EXTENDED, gpus_of, offered
from tests.engine.harness import ROOT, Sandbox, subnets

REGION = "sa-east-1"


def test_the_sandbox_imports_nothing_of_fmctl() -> None:
    """fmctl_sandbox is a package of its own: nothing of the product (not even under
    TYPE_CHECKING), and the product names it only where sandbox_link type-checks it."""
    paths = sorted((ROOT / "fmctl_sandbox").glob("*.py"))
    assert len(paths) > 40, "the walk found the sandbox's modules"
    for path in paths:
        assert not set(_imported(path)) & {"provisioner"}, path.name
    naming = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "provisioner").rglob("*.py")
        if "fmctl_sandbox" in _imported(path)
    )
    assert naming == ["provisioner/ops/sandbox_link.py"]


def _imported(path: Path) -> list[str]:
    """The top-level packages ``path`` imports (absolute imports)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found += [a.name.split(".")[0] for a in node.names]
    return found


def test_versions_past_extended_support_are_not_offered() -> None:
    assert "1.31" in offered(date(2026, 11, 25)) and "1.31" not in offered(date(2026, 11, 26))
    assert set(END_OF_EXTENDED) <= set(offered(date(2024, 1, 1)))
    assert "1.36" in offered(date(2030, 1, 1))  # no end recorded for it yet


def test_pcs_versions_end_by_the_sandboxs_day(monkeypatch: pytest.MonkeyPatch) -> None:
    """CreateCluster refuses a version past its end of life, judged on the sandbox's day
    (FMCTL_SANDBOX_TODAY moves it); creation is allowed through the end date itself; an
    update takes only a newer version."""
    from fmctl_sandbox.pcs_model import (
        PcsError,
        check_create_version,
        check_update_version,
        today,
    )

    check_create_version("25.05", date(2026, 11, 30))
    with pytest.raises(PcsError, match="2026-11-30"):
        check_create_version("25.05", date(2026, 12, 1))
    with pytest.raises(PcsError, match="isn't supported"):
        check_create_version("23.11", date(2024, 1, 1))
    check_create_version("26.05", date(2030, 1, 1))  # no end published for it yet
    check_update_version("24.11", "25.11")
    for older in ("24.11", "25.05"):
        with pytest.raises(PcsError, match="newer version"):
            check_update_version("25.05", older)
    monkeypatch.setenv("FMCTL_SANDBOX_TODAY", "2026-05-31")
    assert today() == date(2026, 5, 31)
    check_create_version("24.11", today())


def test_gpus_come_from_motos_instance_data() -> None:
    assert gpus_of("p5.48xlarge") == 8 and gpus_of("m7i.2xlarge") == 0


def test_eks_refuses_a_version_it_no_longer_offers(sandbox: Sandbox) -> None:
    aws = sandbox.aws(REGION)
    gone = [v for v in END_OF_EXTENDED if v not in offered()]
    assert gone, "the sandbox's table should have a retired version today"
    with pytest.raises(ClientError) as caught:
        aws.client("eks").create_cluster(
            name="too-old",
            version=gone[-1],
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": subnets(sandbox, REGION, 91)},
        )
    assert caught.value.response["Error"]["Code"] == "InvalidParameterException"


def test_a_body_cut_short_is_never_handled() -> None:
    """A request whose body stops before its Content-Length (a killed client's upload) is
    dropped as S3 drops it (IncompleteBody: nothing stored), not handed on part-read."""
    from io import BytesIO

    import pytest

    from fmctl_sandbox.server import ClientGone, read_body

    whole = {"CONTENT_LENGTH": "5", "wsgi.input": BytesIO(b"abcde")}
    assert read_body(whole) == b"abcde"
    cut = {"CONTENT_LENGTH": "10", "wsgi.input": BytesIO(b'{"Vers')}
    with pytest.raises(ClientGone):
        read_body(cut)


def test_two_clusters_node_groups_of_one_name_have_instances_of_their_own() -> None:
    """EC2's instance ids are unique in an account: node groups named alike in two clusters
    (every spec's "gpu") must not share one, or a terminate of one cluster's node reaches
    the other's group (the sandbox once derived ids from the region and group name only)."""
    from fmctl_sandbox.eks_model import node_slots

    def group(cluster: str) -> dict[str, object]:
        return {"clusterName": cluster, "nodegroupName": "gpu", "scalingConfig": {"desiredSize": 3}}

    first = [i for _, i in node_slots("us-west-2", group("a"))]
    second = [i for _, i in node_slots("us-west-2", group("b"))]
    assert len(set(first)) == 3 and not set(first) & set(second)
    assert first == [i for _, i in node_slots("us-west-2", group("a"))]  # stable
    assert all(len(i) == 19 and i.startswith("i-") for i in first)  # i- and 17 hex digits


def test_a_placement_group_with_instances_in_it_is_not_deleted(sandbox: Sandbox) -> None:
    """DeletePlacementGroup (the EC2 API reference): every instance in the group must be
    terminated first; until then EC2 answers InvalidPlacementGroup.InUse (fmctl's typed
    InUse, which its teardown waits out). An instance is in the group its launch template
    names."""
    from provisioner.drivers.aws_errors import InUse, NotFound

    ec2 = sandbox.aws(REGION).client("ec2")
    name = "facts-pg-in-use"
    ec2.create_placement_group(GroupName=name, Strategy="cluster")
    template = ec2.create_launch_template(
        LaunchTemplateName=f"{name}-lt",
        LaunchTemplateData={
            "ImageId": "ami-12c6146b",
            "InstanceType": "m5.large",
            "Placement": {"GroupName": name},
        },
    )["LaunchTemplate"]["LaunchTemplateId"]
    (instance,) = ec2.run_instances(
        MinCount=1,
        MaxCount=1,
        LaunchTemplate={"LaunchTemplateId": template},
        SubnetId=subnets(sandbox, REGION, 93)[0],
    )["Instances"]
    with pytest.raises(InUse) as caught:
        ec2.delete_placement_group(GroupName=name)
    assert caught.value.code == "InvalidPlacementGroup.InUse"
    assert instance["InstanceId"] in str(caught.value)
    ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
    ec2.delete_placement_group(GroupName=name)
    with pytest.raises(NotFound):
        ec2.describe_placement_groups(GroupNames=[name])
