"""Teardown is proven against what AWS refuses: the sandbox answers DependencyViolation as
EC2 does, and leaves in the VPC what EKS, the VPC CNI, NAT gateways and the load balancer
controller leave, so a `down` that forgets any of it fails here as it would in AWS.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.engine.harness import Sandbox, kube_client, owned, raw_leftovers, region_of, spec_file

REGION = "ap-northeast-1"


def _refused(call: Any) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    return str(caught.value.response["Error"]["Code"])


def test_what_is_in_use_cannot_be_deleted(sandbox: Sandbox) -> None:
    ec2 = sandbox.aws(REGION).client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.88.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.88.1.0/24")["Subnet"]["SubnetId"]
    used = ec2.create_security_group(GroupName="used", Description="d", VpcId=vpc)["GroupId"]
    named = ec2.create_security_group(GroupName="named", Description="d", VpcId=vpc)["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=used,
        IpPermissions=[
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": named}]},
        ],
    )
    eni = ec2.create_network_interface(SubnetId=subnet, Groups=[used])["NetworkInterface"]
    eni_id = eni["NetworkInterfaceId"]
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)

    assert _refused(lambda: ec2.delete_subnet(SubnetId=subnet)) == "DependencyViolation"
    assert _refused(lambda: ec2.delete_security_group(GroupId=used)) == "DependencyViolation"
    # Named in another group's rule.
    assert _refused(lambda: ec2.delete_security_group(GroupId=named)) == "DependencyViolation"
    assert _refused(lambda: ec2.delete_vpc(VpcId=vpc)) == "DependencyViolation"

    ec2.delete_network_interface(NetworkInterfaceId=eni_id)
    ec2.delete_subnet(SubnetId=subnet)
    ec2.delete_security_group(GroupId=used)
    ec2.delete_security_group(GroupId=named)
    # An attached gateway still holds the VPC.
    assert _refused(lambda: ec2.delete_vpc(VpcId=vpc)) == "DependencyViolation"
    ec2.detach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    ec2.delete_internet_gateway(InternetGatewayId=gateway)
    ec2.delete_vpc(VpcId=vpc)


def test_nat_gateways_and_instances_take_their_interfaces_with_them(sandbox: Sandbox) -> None:
    ec2 = sandbox.aws(REGION).client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.89.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.89.1.0/24")["Subnet"]["SubnetId"]
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=subnet, AllocationId=address)["NatGateway"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnet)[
        "Instances"
    ][0]["InstanceId"]
    here = [{"Name": "subnet-id", "Values": [subnet]}]
    assert len(ec2.describe_network_interfaces(Filters=here)["NetworkInterfaces"]) == 2
    assert _refused(lambda: ec2.delete_subnet(SubnetId=subnet)) == "DependencyViolation"
    ec2.delete_nat_gateway(NatGatewayId=nat["NatGatewayId"])
    ec2.terminate_instances(InstanceIds=[instance])
    assert ec2.describe_network_interfaces(Filters=here)["NetworkInterfaces"] == []
    # Terminating again is no error, as in AWS (TerminateInstances is idempotent).
    again = ec2.terminate_instances(InstanceIds=[instance])["TerminatingInstances"]
    assert [i["InstanceId"] for i in again] == [instance]
    ec2.release_address(AllocationId=address)
    ec2.delete_subnet(SubnetId=subnet)
    ec2.delete_vpc(VpcId=vpc)


def _interfaces(sandbox: Sandbox, region: str, vpc: str) -> list[dict[str, Any]]:
    ec2 = sandbox.aws(region).client("ec2")
    found = ec2.describe_network_interfaces(Filters=[{"Name": "vpc-id", "Values": [vpc]}])
    return list(found["NetworkInterfaces"])


def test_down_sweeps_what_eks_its_nodes_and_load_balancers_leave(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    name = f"sweep-{uuid.uuid4().hex[:5]}"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    (vpc,) = [aws_id for kind, _, aws_id in owned(sandbox, name, region) if kind == "vpc"]
    described = {e.get("Description", "") for e in _interfaces(sandbox, region, vpc)}
    assert f"Amazon EKS {name}" in described
    assert any(d.startswith("aws-K8S-i-") for d in described), described

    # A user installs the load balancer controller and exposes a Service through it.
    kube = kube_client(sandbox, name, region)
    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "aws-load-balancer-controller", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"app": "lbc"}},
                "template": {
                    "metadata": {"labels": {"app": "lbc"}},
                    "spec": {"containers": [{"name": "c", "image": "lbc"}]},
                },
            },
        }
    )
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        }
    )
    kube.list("v1", "Service", "default")  # the controller acts as the API is asked
    described = {e.get("Description", "") for e in _interfaces(sandbox, region, vpc)}
    assert "ELB net/k8s-default-web" in described, described
    groups = (
        sandbox.aws(region)
        .client("ec2")
        .describe_security_groups(
            Filters=[{"Name": "tag:elbv2.k8s.aws/cluster", "Values": [name]}]
        )["SecurityGroups"]
    )
    assert len(groups) == 2  # the load balancer's and the shared backend group

    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "(left by the VPC CNI)" in down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
    ec2 = sandbox.aws(region).client("ec2")
    assert ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Vpcs"] == []
    left = ec2.describe_network_interfaces(
        Filters=[{"Name": "tag:cluster.k8s.amazonaws.com/name", "Values": [name]}]
    )["NetworkInterfaces"]
    assert left == []
    assert (
        ec2.describe_security_groups(
            Filters=[{"Name": "tag:elbv2.k8s.aws/cluster", "Values": [name]}]
        )["SecurityGroups"]
        == []
    )
