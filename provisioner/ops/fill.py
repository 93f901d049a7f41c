"""`fmctl render --from-cluster`: the live cluster's values for every placeholder, read-only.

Each placeholder names one output of one resource of the desired graph (``SOURCES``). The
plan reads them all with read-only clients (nothing is written, not even the state), so the
values are what AWS holds now, found by the cluster's tags. A value that does not exist yet
(a resource `up` has still to create, or will replace) is an error naming what is missing:
a folder with a wrong or missing id is worse than none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.aws import AwsError
from provisioner.ops.planner import Action, Plan
from provisioner.ops.target import Target
from provisioner.render import Filled
from provisioner.spec.model import ClusterSpec

#: Placeholder -> (logical id in the desired graph, output field). ``launchTemplate.POOL``
#: and ``placementGroup.POOL`` take the pool's own resource.
SOURCES: dict[str, tuple[str, str]] = {
    "vpcCidr": ("vpc", "cidr"),
    "privateSubnetId": ("subnet/private", "id"),
    "secondarySubnetId": ("subnet/secondary", "id"),
    "publicSubnetId": ("subnet/public", "id"),
    "efaSecurityGroupId": ("sg/efa", "id"),
    "fsxSecurityGroupId": ("sg/fsx", "id"),
    "fileSystemId": ("fsx", "id"),
    "fsxDnsName": ("fsx", "dns"),
    "fsxMountName": ("fsx", "mount_name"),
    "artifactBucket": ("bucket", "id"),
    "clusterRoleArn": ("iam/eks-cluster", "arn"),
    "nodeRoleArn": ("iam/eks-node", "arn"),
    "ampWritePolicyArn": ("iam/amp-write", "arn"),
}

#: What `up` has not made yet: the value would be wrong or missing.
NOT_YET = {Action.CREATE, Action.REPLACE, Action.WAIT, Action.UNREADABLE}


class NotFilled(AwsError):
    """A placeholder has no live value: the cluster is missing, or not made up to it yet."""


@dataclass(frozen=True)
class FromCluster:
    """The values, and what a user should know about them."""

    filled: Filled
    #: Resources whose live settings differ from the spec (their ids are still right).
    pending: tuple[str, ...]


def source_of(name: str, spec: ClusterSpec | None = None) -> tuple[str, str] | None:
    """Where a placeholder's value comes from (None: not from a resource); on AWS PCS, the
    builder's own table (``blueprint.pcs.source``)."""
    if spec is not None and spec.scheduler == "slurm" and spec.slurm.provider == "pcs":
        from provisioner.blueprint.pcs import source

        found = source(name)
        if found is not None:
            return found[0], found[2]
    if name in SOURCES:
        return SOURCES[name]
    kind, _, pool = name.partition(".")
    if kind == "launchTemplate" and pool:
        return f"launch-template/{pool}", "id"
    if kind == "placementGroup" and pool:
        return f"placement-group/{pool}", "id"
    return None


def values_from(plan: Plan, spec: ClusterSpec, names: Iterable[str], account: str) -> FromCluster:
    """The live value of each placeholder in ``names`` from a plan's reads."""
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    missing: list[str] = []
    for name in sorted(set(names)):
        if name == "gitRepoUrl":
            # Only reached without gitops.repoUrl: a rendered file holds the URL otherwise.
            missing.append("gitRepoUrl: set gitops.repoUrl in the spec (where you commit it)")
            continue
        if name == "accountId":
            values[name], sources[name] = account, "sts:GetCallerIdentity"
            continue
        where = source_of(name, spec)
        if where is None:
            raise KeyError(f"no source for placeholder {name!r}")  # a bug: SOURCES lacks it
        rid, attr = where
        observed = plan.observed.get(rid)
        action = plan.change(rid).action if rid in plan.blueprint else None
        if observed is None or action in NOT_YET:
            missing.append(f"{name}: {rid} is {'not made yet' if observed is None else action}")
            continue
        value: Any = getattr(observed.outputs, attr)
        values[name] = str(value)
        sources[name] = f"`{rid}` {attr}"
    if missing:
        raise NotFilled(
            "cannot fill the folder from cluster "
            f"{plan.cluster} in {plan.region}: " + "; ".join(missing),
            hint=_hint(plan, spec, missing),
        )
    pending = tuple(c.resource for c in plan.changes if c.action in (Action.UPDATE, Action.DRIFT))
    return FromCluster(
        Filled(tuple(sorted(values.items())), tuple(sorted(sources.items()))), pending
    )


def _hint(plan: Plan, spec: ClusterSpec, missing: list[str]) -> str:
    """What to do: name the repository, make the cluster, or finish making it."""
    if all(m.startswith("gitRepoUrl") for m in missing):
        return "add gitops: {repoUrl: ...} to the spec and render again"
    if not plan.observed:
        return (
            f"no cluster {spec.metadata.name} exists in {plan.region}: `fmctl up` makes it; "
            "render without --from-cluster writes placeholders"
        )
    return "run `fmctl up -f SPEC` first (`fmctl plan` shows what it would make)"


def from_cluster(spec: ClusterSpec, target: Target, names: Iterable[str]) -> FromCluster:
    """Plan read-only against the live cluster and take each placeholder's value."""
    from provisioner.ops.engine import plan_cluster
    from provisioner.ops.target import make_context

    ctx = make_context(target, spec.metadata.name, read_only=True)
    names = set(names)
    account = ""
    if "accountId" in names:
        account = str(ctx.aws.client("sts").get_caller_identity()["Account"])
    return values_from(plan_cluster(spec, target, ctx), spec, names, account)
