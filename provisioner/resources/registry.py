"""Every resource kind, by name, and the order between kinds that follows from their
parameters' references (what orders a teardown found by tags alone)."""

from __future__ import annotations

import functools
from typing import Any

from provisioner.graph.graph import Graph
from provisioner.graph.ref import ref_types
from provisioner.resources.base import Kind, Owned
from provisioner.resources.block_ends import BlockSchedule, BlockWarning
from provisioner.resources.budgets import Budget
from provisioner.resources.compute import PlacementGroup, SecurityGroup
from provisioner.resources.eks import EksCluster
from provisioner.resources.eks_access import AccessEntry
from provisioner.resources.eks_addons import Addon, PodIdentity
from provisioner.resources.eks_nodes import Nodegroup
from provisioner.resources.fsx import ExistingFileSystem, FileSystem
from provisioner.resources.fsx_dra import RepositoryLink
from provisioner.resources.functions import Function
from provisioner.resources.gateways import ElasticIp, InternetGateway, NatGateway
from provisioner.resources.iam import ManagedPolicy, Role
from provisioner.resources.kms import KmsKey
from provisioner.resources.kube_chart import KubeChart
from provisioner.resources.kube_stack import KubeStack
from provisioner.resources.launch_template import LaunchTemplate
from provisioner.resources.logs import LogGroup
from provisioner.resources.network import ExistingSubnet, ExistingVpc, Subnet, Vpc
from provisioner.resources.parallelcluster import ParallelClusterKind
from provisioner.resources.pcluster_check import ParallelClusterCheck
from provisioner.resources.pcs import PcsCluster, PcsSampleAmi
from provisioner.resources.pcs_nodes import PcsNodeGroup
from provisioner.resources.pcs_queues import PcsQueue
from provisioner.resources.routes import RouteTable, S3Endpoint
from provisioner.resources.schedules import Expiry
from provisioner.resources.storage import Artifacts, Bucket
from provisioner.resources.topics import Topic

AnyKind = Kind[Any, Any, Any]


@functools.cache
def kinds() -> dict[str, AnyKind]:
    """Kind name -> implementation."""
    every: list[AnyKind] = [
        Vpc(),
        ExistingVpc(),
        Subnet(),
        ExistingSubnet(),
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
        KmsKey(),
        LogGroup(),
        EksCluster(),
        AccessEntry(),
        LaunchTemplate(),
        Nodegroup(),
        Addon(),
        PodIdentity(),
        KubeChart(),
        KubeStack(),
        ParallelClusterCheck(),
        ParallelClusterKind(),
        PcsSampleAmi(),
        PcsCluster(),
        PcsNodeGroup(),
        PcsQueue(),
        Expiry(),
        BlockSchedule(),
        BlockWarning(),
        Topic(),
        Function(),
        Budget(),
    ]
    return {k.name: k for k in every}


@functools.cache
def kind_deletion_order() -> Graph:
    """Kind -> the kinds whose resources must be gone before one of it is deleted.

    Read off the params' annotations: a kind whose params refer (``Ref``) to another kind's
    outputs is deleted first; one that is ``After`` another is deleted after it. A kind's
    references to its own kind (one security group naming another) are left to the deletes
    themselves, which empty a group's rules first."""
    producers: dict[type, set[str]] = {}
    for name, kind in kinds().items():
        producers.setdefault(kind.outputs, set()).add(name)
    waits: dict[str, set[str]] = {name: set() for name in kinds()}
    for name, kind in kinds().items():
        refs, afters = ref_types(kind.params)
        for out in refs:
            for target in producers.get(out, set()) - {name}:
                waits[target].add(name)  # the target waits for its referrers to go
        for out in afters:
            for target in producers.get(out, set()) - {name}:
                waits[name].add(target)  # this one waits for its target to go
    return Graph.of(waits)


def deletion_graph(found: list[Owned]) -> Graph:
    """The order to delete ``found`` in: each waits for everything of the kinds its kind
    waits for (``kind_deletion_order``), so dependents go first."""
    order = kind_deletion_order()
    ids = {f"{o.kind}:{o.id}": o for o in found}
    deps: dict[str, set[str]] = {}
    for key, item in ids.items():
        blockers = waits_for(order, item.kind)
        deps[key] = {k for k, o in ids.items() if o.kind in blockers and k != key}
    return Graph.of(deps)


def waits_for(order: Graph, kind: str) -> set[str]:
    """Every kind ``kind`` waits for, directly or through others (a kind with nothing found
    in between still orders what is)."""
    seen: set[str] = set()
    todo = list(order.deps.get(kind, frozenset()))
    while todo:
        k = todo.pop()
        if k not in seen:
            seen.add(k)
            todo.extend(order.deps.get(k, frozenset()))
    return seen
