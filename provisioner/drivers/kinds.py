"""Every resource kind the engine knows, by name."""

from __future__ import annotations

from provisioner.drivers.compute import PlacementGroup, SecurityGroup
from provisioner.drivers.iam import ManagedPolicy, Role
from provisioner.drivers.network import (
    ElasticIp,
    ExistingSubnet,
    ExistingVpc,
    InternetGateway,
    NatGateway,
    RouteTable,
    S3Endpoint,
    Subnet,
    Vpc,
)
from provisioner.drivers.storage import (
    Artifacts,
    Bucket,
    ExistingFileSystem,
    FileSystem,
    RepositoryLink,
)
from provisioner.plan.graph import Kind


def all_kinds() -> dict[str, Kind]:
    """Kind name -> implementation."""
    kinds: list[Kind] = [
        Vpc(),
        ExistingVpc(),
        ExistingSubnet(),
        Subnet(),
        InternetGateway(),
        ElasticIp(),
        NatGateway(),
        RouteTable(),
        S3Endpoint(),
        SecurityGroup(),
        PlacementGroup(),
        Bucket(),
        Artifacts(),
        FileSystem(),
        ExistingFileSystem(),
        RepositoryLink(),
        Role(),
        ManagedPolicy(),
    ]
    return {k.name: k for k in kinds}
