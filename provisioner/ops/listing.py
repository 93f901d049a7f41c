"""`fmctl list`: every cluster fmctl owns in a region (or in every region fmctl accepts),
from AWS's tags alone: no local state needed, so a teammate's clusters show too.

A cluster is what carries the ``fmctl.dev/cluster`` tag (``gc.find_clusters``). Its
scheduler is told by what it owns: an EKS cluster of that name tagged as fmctl's makes it
Kubernetes; a PCS cluster tagged as fmctl's makes it Slurm on AWS PCS (its status is PCS's);
otherwise it is Slurm on ParallelCluster, whose cluster is the CloudFormation
stack of that name (ParallelCluster's clusterStatus is its stack's status: the
ParallelCluster user guide, "pcluster describe-cluster"). Its state is that cluster's
status, or "infrastructure" when only fmctl's own resources exist yet (a sandbox run, or
an `up` stopped before the scheduler's step).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.aws import Aws
from provisioner.drivers.aws_errors import AccessDenied, NotFound
from provisioner.ops.gc import REGIONS_IN_FLIGHT, ClusterSeen, find_clusters
from provisioner.resources.tags import OWNER_TAG, stamp


@dataclass(frozen=True)
class ClusterRow:
    """One cluster as `list` shows it."""

    name: str
    region: str
    scheduler: str  # "kubernetes" | "slurm"
    provider: str  # "eks" | "pcs" | "parallelcluster"
    state: str
    resources: int
    created_at: float | None
    expires_at: float | None

    def as_data(self, now: float) -> dict[str, Any]:
        """JSON-able, times as ISO 8601 UTC and the age in seconds."""
        return {
            "name": self.name,
            "region": self.region,
            "scheduler": self.scheduler,
            "provider": self.provider,
            "state": self.state,
            "resources": self.resources,
            "createdAt": _iso(self.created_at),
            "ageSeconds": None if self.created_at is None else int(now - self.created_at),
            "expiresAt": _iso(self.expires_at),
            "expired": self.expires_at is not None and self.expires_at <= now,
        }


def _iso(at: float | None) -> str | None:
    return None if at is None else stamp(at)


def eks_state(aws: Aws, name: str) -> str | None:
    """The status of fmctl's EKS cluster ``name``, or None when there is none."""
    try:
        found = aws.client("eks").describe_cluster(name=name)["cluster"]
    except (NotFound, AccessDenied):
        return None  # no such cluster; or a Slurm user whose policy has no EKS at all
    if (found.get("tags") or {}).get(OWNER_TAG) != name:
        return None
    return str(found.get("status", "?"))


def pcs_state(aws: Aws, name: str) -> str | None:
    """The status of fmctl's PCS cluster for ``name``, or None when there is none."""
    from botocore.exceptions import EndpointConnectionError

    pcs = aws.client("pcs")
    try:
        for page in pcs.get_paginator("list_clusters").paginate():
            for found in page["clusters"]:
                try:
                    tags = pcs.list_tags_for_resource(resourceArn=found["arn"])["tags"]
                except NotFound:
                    continue  # deleted between the list and the read
                if tags.get(OWNER_TAG) == name:
                    return str(found["status"])
    except (AccessDenied, EndpointConnectionError):
        return None  # a region without PCS, or a policy without it: not a PCS cluster, then
    return None


def _stack_state(aws: Aws, name: str) -> str | None:
    """The status of ParallelCluster's stack ``name``, or None when there is none."""
    try:
        stacks = aws.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
    except (NotFound, AccessDenied):
        return None  # CloudFormation says "does not exist" with a ValidationError (typed)
    return str(stacks[0]["StackStatus"]) if stacks else None


def _row(aws: Aws, seen: ClusterSeen) -> ClusterRow:
    eks = eks_state(aws, seen.name)
    pcs = None if eks is not None else pcs_state(aws, seen.name)
    if eks is not None:
        scheduler, provider, state = "kubernetes", "eks", eks
    elif pcs is not None:
        scheduler, provider, state = "slurm", "pcs", pcs
    else:
        stack = _stack_state(aws, seen.name)
        scheduler, provider, state = "slurm", "parallelcluster", stack or "infrastructure"
    return ClusterRow(
        seen.name,
        aws.region,
        scheduler,
        provider,
        state,
        seen.resources,
        seen.created_at,
        seen.expires_at,
    )


def list_region(aws: Aws) -> list[ClusterRow]:
    """The clusters in ``aws``'s region, by name."""
    return [_row(aws, seen) for _, seen in sorted(find_clusters(aws).items())]


def list_clusters(aws_for: Callable[[str], Aws], regions: Iterable[str]) -> list[ClusterRow]:
    """The clusters in each of ``regions`` (listed side by side), by region and name."""
    wanted = list(regions)
    with ThreadPoolExecutor(min(REGIONS_IN_FLIGHT, len(wanted) or 1)) as pool:
        found = pool.map(lambda region: list_region(aws_for(region)), wanted)
    return sorted((row for rows in found for row in rows), key=lambda r: (r.region, r.name))
