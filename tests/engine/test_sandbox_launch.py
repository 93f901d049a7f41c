"""RunInstances in the sandbox lands where AWS would put the instance: a launch template's
primary network interface gives its subnet and security groups, and the instance's private
address comes from that subnet's range (fmctl_sandbox/ec2_mend.py; moto 5.2 launched such an
instance into the default VPC with a random 10.x address, so a test of what a launcher
does with the address, ParallelCluster's clustermgtd's, proved nothing)."""

from __future__ import annotations

import ipaddress

from tests.engine.harness import Sandbox

REGION = "ap-south-1"


def test_a_launch_template_places_the_instance(sandbox: Sandbox) -> None:
    ec2 = sandbox.aws(REGION).client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.91.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.91.32.0/20")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="nodes", Description="d", VpcId=vpc)["GroupId"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName="placed",
        LaunchTemplateData={
            "ImageId": image,
            "InstanceType": "m5.large",
            "NetworkInterfaces": [{"DeviceIndex": 0, "SubnetId": subnet, "Groups": [group]}],
        },
    )
    launched = ec2.run_instances(
        MinCount=2, MaxCount=2, LaunchTemplate={"LaunchTemplateName": "placed"}
    )["Instances"]
    addresses = set()
    for instance in launched:
        assert instance["SubnetId"] == subnet and instance["VpcId"] == vpc
        assert [g["GroupId"] for g in instance["SecurityGroups"]] == [group]
        address = ipaddress.ip_address(instance["PrivateIpAddress"])
        assert address in ipaddress.ip_network("10.91.32.0/20")
        addresses.add(address)
    assert len(addresses) == 2

    # A request that names its own subnet still wins over the template's.
    other = ec2.create_subnet(VpcId=vpc, CidrBlock="10.91.64.0/20")["Subnet"]["SubnetId"]
    mine = ec2.run_instances(
        MinCount=1, MaxCount=1, SubnetId=other, LaunchTemplate={"LaunchTemplateName": "placed"}
    )["Instances"][0]
    assert mine["SubnetId"] == other
    assert ipaddress.ip_address(mine["PrivateIpAddress"]) in ipaddress.ip_network("10.91.64.0/20")
    ec2.terminate_instances(InstanceIds=[i["InstanceId"] for i in [*launched, mine]])
