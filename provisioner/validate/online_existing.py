"""Online checks of what the spec names and fmctl does not make: the VPC and subnets (they
exist, fit together and sit in the cluster's AZ), an existing FSx file system (its AZ,
deployment type, VPC) and the Lustre ports its security groups open to the nodes. Part of
``provisioner.validate.online``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from provisioner.drivers.aws import Aws
from provisioner.drivers.aws_errors import NotFound
from provisioner.resources.compute import LUSTRE_PORTS
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem


def existing_network(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    """The VPC and subnets the spec names exist in the region, the subnets are in that VPC,
    and each is in the AZ it stands for (the secondary one in another AZ)."""
    net = spec.network
    ec2 = aws.client("ec2")
    region, az = spec.metadata.region, net.availability_zone
    if net.vpc_id is not None:
        try:
            ec2.describe_vpcs(VpcIds=[net.vpc_id])
        except NotFound:
            yield Problem(
                "existing-missing",
                f"{net.vpc_id} does not exist in {region}",
                ("network", "vpcId"),
                hint="check the id and the region (aws ec2 describe-vpcs)",
            )
            return
    for key, field, same_az in (
        ("subnetId", net.subnet_id, True),
        ("publicSubnetId", net.public_subnet_id, True),
        ("secondarySubnetId", net.secondary_subnet_id, False),
    ):
        if field is None:
            continue
        path = ("network", key)
        try:
            (subnet,) = ec2.describe_subnets(SubnetIds=[field])["Subnets"]
        except NotFound:
            yield Problem(
                "existing-missing",
                f"{field} does not exist in {region}",
                path,
                hint="check the id and the region (aws ec2 describe-subnets)",
            )
            continue
        if net.vpc_id is not None and subnet.get("VpcId") != net.vpc_id:
            yield Problem(
                "existing-mismatch",
                f"{field} is in {subnet.get('VpcId')}, not in {net.vpc_id}",
                path,
                hint="name a subnet of network.vpcId",
            )
        where = subnet.get("AvailabilityZone")
        if same_az and where != az:
            yield Problem(
                "existing-mismatch",
                f"{field} is in {where}, not in {az}",
                path,
                hint=f"name a subnet in {az}, or set network.availabilityZone to {where}",
            )
        elif not same_az and where == az:
            yield Problem(
                "existing-mismatch",
                f"{field} is in {az}, the nodes' own AZ; EKS needs a second one",
                path,
                hint="name a subnet of the VPC in another availability zone",
            )


def existing_file_system(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    """The file system the spec names exists, is Lustre and available, and sits in the
    cluster's VPC and AZ (a client mounts it over TCP 988 from there)."""
    fsx = spec.storage.fsx_lustre
    fs_id = fsx.file_system_id if fsx is not None else None
    if fs_id is None:
        return
    path = ("storage", "fsxLustre", "fileSystemId")
    try:
        (fs,) = aws.client("fsx").describe_file_systems(FileSystemIds=[fs_id])["FileSystems"]
    except NotFound:
        yield Problem(
            "existing-missing",
            f"{fs_id} does not exist in {spec.metadata.region}",
            path,
            hint="check the id and the region (aws fsx describe-file-systems)",
        )
        return
    if fs.get("FileSystemType") != "LUSTRE":
        yield Problem(
            "existing-mismatch",
            f"{fs_id} is an FSx for {fs.get('FileSystemType')} file system, not Lustre",
            path,
            hint="name an FSx for Lustre file system",
        )
        return
    if fs.get("Lifecycle") not in ("AVAILABLE", "UPDATING"):
        yield Problem(
            "existing-mismatch",
            f"{fs_id} is {fs.get('Lifecycle')}",
            path,
            hint="only an AVAILABLE file system can be mounted",
        )
    if not (fs.get("LustreConfiguration") or {}).get("MountName"):
        yield Problem(
            "existing-mismatch",
            f"{fs_id} has no Lustre mount name",
            path,
            hint="FSx gives every Lustre file system one; check the id",
        )
    vpc = spec.network.vpc_id
    if vpc is not None and fs.get("VpcId") != vpc:
        yield Problem(
            "existing-mismatch",
            f"{fs_id} is in {fs.get('VpcId')}, not in {vpc}",
            path,
            hint="name a file system in network.vpcId (or peer the VPCs yourself)",
        )
    elif vpc is None:
        yield Problem(
            "existing-mismatch",
            f"{fs_id} is in {fs.get('VpcId')}; fmctl would make the cluster a VPC of its own",
            path,
            hint="set network.vpcId (and subnetId) to the file system's VPC",
            related=(("network",),),
        )
    subnets = fs.get("SubnetIds") or []
    if subnets:
        (subnet,) = aws.client("ec2").describe_subnets(SubnetIds=subnets[:1])["Subnets"]
        if subnet.get("AvailabilityZone") != spec.network.availability_zone:
            yield Problem(
                "existing-mismatch",
                f"{fs_id} is in {subnet.get('AvailabilityZone')}; the nodes are in "
                f"{spec.network.availability_zone}",
                path,
                level="warning",
                hint="traffic across AZs is slower and billed; put the nodes in the file "
                "system's AZ",
            )


def existing_fsx_ports(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    """The file system's security groups let the nodes' subnet reach Lustre's ports (TCP
    988 and 1018-1023: the FSx for Lustre User Guide, "File system access control with
    Amazon VPC"). On EKS and PCS the nodes are in groups fmctl makes, which no rule of the
    file system's can name yet: a CIDR rule over the nodes' subnet must let them in.
    ParallelCluster checks this itself (its FsxNetworkingValidator)."""
    fsx = spec.storage.fsx_lustre
    fs_id = fsx.file_system_id if fsx is not None else None
    subnet_id = spec.network.subnet_id
    if fs_id is None or subnet_id is None:
        return
    if spec.scheduler == "slurm" and spec.slurm.provider != "pcs":
        return
    ec2 = aws.client("ec2")
    try:
        (fs,) = aws.client("fsx").describe_file_systems(FileSystemIds=[fs_id])["FileSystems"]
        (subnet,) = ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"]
    except NotFound:  # said by the checks of the file system and the subnet
        return
    enis = list(fs.get("NetworkInterfaceIds") or [])
    if not enis or fs.get("VpcId") != subnet.get("VpcId"):
        return  # another VPC: said by the file system's own check
    groups = sorted(
        {
            g["GroupId"]
            for eni in ec2.describe_network_interfaces(NetworkInterfaceIds=enis)[
                "NetworkInterfaces"
            ]
            for g in eni.get("Groups", [])
        }
    )
    rules = (
        [
            rule
            for group in ec2.describe_security_groups(GroupIds=groups)["SecurityGroups"]
            for rule in group.get("IpPermissions", [])
        ]
        if groups
        else []
    )
    cidr = str(subnet["CidrBlock"])
    shut = [
        f"{low}" if low == high else f"{low}-{high}"
        for low, high in LUSTRE_PORTS
        if not any(_admits(rule, low, high, cidr) for rule in rules)
    ]
    if shut:
        path = ("storage", "fsxLustre", "fileSystemId")
        ports = " ".join(
            f"IpProtocol=tcp,FromPort={lo},ToPort={hi},IpRanges=[{{CidrIp={cidr}}}]"
            for lo, hi in LUSTRE_PORTS
        )
        yield Problem(
            "existing-fsx-ports",
            f"{fs_id}'s security groups ({', '.join(groups) or 'none'}) let no Lustre "
            f"traffic in from the nodes' subnet {cidr} (TCP {' and '.join(shut)}): every "
            "mount would hang",
            path,
            hint=f"allow it on one of them: aws ec2 authorize-security-group-ingress "
            f"--group-id {groups[0] if groups else 'sg-...'} --ip-permissions {ports}",
            related=(("network", "subnetId"),),
        )


def _admits(rule: Mapping[str, Any], low: int, high: int, cidr: str) -> bool:
    """True when an inbound rule lets TCP ``low``-``high`` in from every address of
    ``cidr`` (all traffic, or TCP over those ports, from a range that holds it)."""
    import ipaddress

    protocol = str(rule.get("IpProtocol"))
    if protocol not in ("-1", "tcp", "6"):
        return False
    if protocol != "-1" and not (rule.get("FromPort", 0) <= low and rule.get("ToPort", 0) >= high):
        return False
    nodes = ipaddress.IPv4Network(cidr)
    for item in rule.get("IpRanges", []):  # IPv4 ranges (IPv6 ones are Ipv6Ranges)
        try:
            allowed = ipaddress.IPv4Network(str(item.get("CidrIp")), strict=False)
        except ValueError:
            continue
        if nodes.subnet_of(allowed):
            return True
    return False
