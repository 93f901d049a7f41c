"""Every resource kind a plan may hold: the drivers' infrastructure kinds and the
schedulers' clusters (which render configs, so they live above the drivers)."""

from __future__ import annotations

from provisioner.drivers.kinds import all_kinds as infra_kinds
from provisioner.plan.eks import AccessEntry, EksCluster, KmsKey, Sweep
from provisioner.plan.eks_identity import PodIdentity
from provisioner.plan.eks_nodes import Addon, Nodegroup
from provisioner.plan.eks_nodes import LaunchTemplate as EksLaunchTemplate
from provisioner.plan.graph import Kind
from provisioner.plan.kube_stack import KubeStack
from provisioner.plan.slurm_cluster import ParallelClusterCheckKind, ParallelClusterKind


def all_kinds() -> dict[str, Kind]:
    """Kind name -> implementation."""
    kinds = infra_kinds()
    clusters: list[Kind] = [
        ParallelClusterCheckKind(),
        ParallelClusterKind(),
        KmsKey(),
        EksCluster(),
        AccessEntry(),
        EksLaunchTemplate(),
        Nodegroup(),
        Addon(),
        PodIdentity(),
        KubeStack(),
        Sweep(),
    ]
    for kind in clusters:
        kinds[kind.name] = kind
    return kinds
