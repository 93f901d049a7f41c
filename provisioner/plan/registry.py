"""Every resource kind a plan may hold: the drivers' infrastructure kinds and the
schedulers' clusters (which render configs, so they live above the drivers)."""

from __future__ import annotations

from provisioner.drivers.kinds import all_kinds as infra_kinds
from provisioner.plan.graph import Kind
from provisioner.plan.slurm_cluster import ParallelClusterCheckKind, ParallelClusterKind


def all_kinds() -> dict[str, Kind]:
    """Kind name -> implementation."""
    kinds = infra_kinds()
    clusters: list[Kind] = [ParallelClusterCheckKind(), ParallelClusterKind()]
    for kind in clusters:
        kinds[kind.name] = kind
    return kinds
