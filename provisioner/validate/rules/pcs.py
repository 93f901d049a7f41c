"""Rules for Slurm on AWS Parallel Computing Service (``slurm.provider: pcs``).

The limits are AWS's, from botocore's ``pcs`` model (names, sizes) and the AWS PCS User
Guide (Slurm versions, regions, what fmctl's own settings leave to the user): refused here,
on the spec's line, rather than by CreateCluster halfway through `up`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from provisioner.catalog.pcs import (
    CLUSTER_NAME_RE,
    FMCTL_SETTINGS,
    NODE_GROUP_NAME_RE,
    PCS_REGIONS,
    SIZE_NODES,
    SLURM_VERSIONS,
)
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem
from provisioner.validate.rules.registry import RuleContext, rule

AMI_RE = re.compile(r"^ami-[a-z0-9]+$")
SETTING_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
LOGIN_GROUP = "login"


def _pcs(spec: ClusterSpec, ctx: RuleContext) -> bool:
    return ctx.scheduler == "slurm" and spec.slurm.provider == "pcs"


@rule("pcs-settings")
def pcs_only(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """PCS-only settings on ParallelCluster, and ParallelCluster-only ones on PCS, are said
    rather than silently ignored."""
    if ctx.scheduler != "slurm":
        return
    s = spec.slurm
    if s.provider == "parallelcluster":
        if s.ami_id is not None:
            yield Problem(
                "pcs-settings",
                "slurm.amiId is the PCS nodes' AMI; ParallelCluster takes its own image",
                ("slurm", "amiId"),
                hint="set slurm.provider: pcs, or remove slurm.amiId",
            )
        return
    if s.topology_aware:
        yield Problem(
            "pcs-settings",
            "slurm.topologyAware needs a topology.conf on the controller, and PCS runs the "
            "controller itself (its slurm.conf is generated from the queues and node groups)",
            ("slurm", "topologyAware"),
            hint="remove slurm.topologyAware, or use slurm.provider: parallelcluster",
        )
    if s.gpu_health_checks:
        yield Problem(
            "pcs-settings",
            "slurm.gpuHealthChecks is ParallelCluster's DCGM check; PCS has none of that name "
            "(fmctl's prolog checks every GPU and EFA device on PCS too)",
            ("slurm", "gpuHealthChecks"),
            hint="remove slurm.gpuHealthChecks",
        )
    if s.ami_id is not None and not AMI_RE.fullmatch(s.ami_id):
        yield Problem(
            "pcs-settings",
            f"slurm.amiId {s.ami_id!r} is not an AMI id",
            ("slurm", "amiId"),
            hint="ami- and its hex digits, e.g. ami-0123456789abcdef0",
        )


@rule("pcs-names")
def pcs_names(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """PCS names clusters (3-40), node groups and queues (3-25) by its own pattern; each
    pool is a node group and a queue of its name, beside the login group."""
    if not _pcs(spec, ctx):
        return
    if not CLUSTER_NAME_RE.fullmatch(spec.metadata.name):
        yield Problem(
            "pcs-names",
            f"PCS cluster names are 3-40 letters, digits and '-': {spec.metadata.name!r}",
            ("metadata", "name"),
        )
    for i, pool in enumerate(spec.compute.gpu_pools):
        path = ("compute", "gpuPools", i, "name")
        if not NODE_GROUP_NAME_RE.fullmatch(pool.name):
            yield Problem(
                "pcs-names",
                f"pool {pool.name!r} becomes a PCS node group and queue of that name, which "
                "take 3-25 letters, digits and '-'",
                path,
                hint="a name of at least 3 characters, e.g. 'gpu'",
            )
        if pool.name == LOGIN_GROUP:
            yield Problem(
                "pcs-names",
                f"pool name {LOGIN_GROUP!r} is the login nodes' group",
                path,
                hint="another pool name, e.g. 'train'",
            )


@rule("pcs-version")
def pcs_version(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """The Slurm versions PCS runs (and publishes sample AMIs for)."""
    if not _pcs(spec, ctx):
        return
    version = spec.slurm.pcs.slurm_version
    if version not in SLURM_VERSIONS:
        yield Problem(
            "pcs-version",
            f"PCS does not run Slurm {version!r}",
            ("slurm", "pcs", "slurmVersion"),
            hint="one of " + ", ".join(f'"{v}"' for v in SLURM_VERSIONS),
        )


@rule("pcs-region")
def pcs_region(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """A region the PCS endpoints list does not name: a warning (the list grows; `up`'s
    online check asks PCS itself)."""
    if _pcs(spec, ctx) and spec.metadata.region not in PCS_REGIONS:
        yield Problem(
            "pcs-region",
            f"AWS PCS's endpoint list does not name {spec.metadata.region}",
            ("metadata", "region"),
            level="warning",
            hint="a region PCS is offered in, e.g. us-east-1; or slurm.provider: parallelcluster",
        )


@rule("pcs-size")
def pcs_size(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Every node PCS may launch (each pool's count, and the login nodes) counts towards the
    controller size's node limit."""
    if not _pcs(spec, ctx):
        return
    pcs = spec.slurm.pcs
    nodes = sum(p.count for p in spec.compute.gpu_pools) + pcs.login_count
    limit = SIZE_NODES[pcs.size]
    if nodes > limit:
        bigger = [s for s, n in SIZE_NODES.items() if n >= nodes]
        yield Problem(
            "pcs-size",
            f"{nodes} nodes (pools and login) exceed a {pcs.size} PCS cluster's {limit}",
            ("slurm", "pcs", "size"),
            hint=f"size: {bigger[0]}" if bigger else "fewer nodes: LARGE takes 2,048",
        )


@rule("pcs-custom-settings")
def pcs_custom_settings(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Custom settings are slurm.conf parameter names; the ones fmctl sets are its own."""
    if not _pcs(spec, ctx):
        return
    for name in spec.slurm.pcs.custom_settings:
        path = ("slurm", "pcs", "customSettings", name)
        if name in FMCTL_SETTINGS:
            yield Problem(
                "pcs-custom-settings",
                f"{name} is set by fmctl ({FMCTL_SETTINGS[name]})",
                path,
                hint=f"remove {name}; add scripts to fmctl's slurm/ folder instead",
            )
        elif not SETTING_RE.fullmatch(name):
            yield Problem(
                "pcs-custom-settings",
                f"{name!r} is not a slurm.conf parameter name",
                path,
                hint="a parameter as slurm.conf spells it, e.g. SelectTypeParameters",
            )
