"""Rules for Slurm on AWS Parallel Computing Service (``slurm.provider: pcs``).

The limits are AWS's, from botocore's ``pcs`` model (names, sizes) and the AWS PCS User
Guide (Slurm versions, regions, what fmctl's own settings leave to the user): refused here,
on the spec's line, rather than by CreateCluster halfway through `up`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from provisioner.catalog.pcs import (
    BLACKWELL_DRIVER_MAJOR,
    BLACKWELL_GPUS,
    CLUSTER_NAME_RE,
    FMCTL_SETTINGS,
    NODE_GROUP_NAME_RE,
    PCS_REGIONS,
    SIZE_NODES,
    SLURM_RELEASES,
    SLURM_VERSIONS,
    default_slurm_version,
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
    """The Slurm versions PCS takes, judged on the day by their end of life (after it PCS
    creates no cluster on the version), and a sample AMI for the version unless the spec
    names its own image."""
    if not _pcs(spec, ctx):
        return
    where = ("slurm", "pcs", "slurmVersion")
    version = spec.slurm.pcs.slurm_version
    release = SLURM_RELEASES.get(version)
    newest = default_slurm_version(ctx.today)
    if release is None:
        yield Problem(
            "pcs-version",
            f"PCS does not run Slurm {version!r}",
            where,
            hint="one of " + ", ".join(f'"{v}"' for v in SLURM_VERSIONS),
        )
        return
    life = release.life(ctx.today)
    if life == "ended":
        yield Problem(
            "pcs-version",
            f"Slurm {version} reached its end of life on PCS on {release.end_of_life}: PCS "
            "creates no cluster on it",
            where,
            hint=f'use "{newest}"; a cluster already on {version} is upgraded in place to it',
        )
    elif life == "ending":
        yield Problem(
            "pcs-version",
            f"Slurm {version} reaches its end of life on PCS on {release.end_of_life}: after "
            "it PCS creates no cluster on it",
            where,
            level="warning",
            hint=f'"{newest}" lives longer; an upgrade later is UpdateCluster, in place',
        )
    if release.sample_os is None and spec.slurm.ami_id is None:
        yield Problem(
            "pcs-version",
            f"AWS publishes no PCS sample AMI for Slurm {version}",
            where,
            hint=f"set slurm.amiId to an image with Slurm {version} and PCS's agent, or "
            f'use "{newest}"',
        )


def _gpu_pools(spec: ClusterSpec, ctx: RuleContext, models: tuple[str, ...]) -> Iterator[int]:
    for i, pool in enumerate(spec.compute.gpu_pools):
        itype = ctx.catalog.get(pool.instance_type)
        if itype is not None and itype.gpu is not None and itype.gpu.model in models:
            yield i


@rule("pcs-driver")
def pcs_driver(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Blackwell GPUs need NVIDIA's R570 driver or later; AWS's sample AMI for the version
    must carry one (its release notes say which), or the spec names its own image."""
    if not _pcs(spec, ctx) or spec.slurm.ami_id is not None:
        return
    version = spec.slurm.pcs.slurm_version
    release = SLURM_RELEASES.get(version)
    if release is None or release.sample_os is None:
        return  # pcs-version says so
    major = release.driver_major()
    if major is not None and major >= BLACKWELL_DRIVER_MAJOR:
        return
    good = [
        r.version
        for r in SLURM_RELEASES.values()
        if (r.driver_major() or 0) >= BLACKWELL_DRIVER_MAJOR and r.life(ctx.today) != "ended"
    ]
    for i in _gpu_pools(spec, ctx, BLACKWELL_GPUS):
        pool = spec.compute.gpu_pools[i]
        has = f"driver {release.sample_driver}" if release.sample_driver else "no recorded driver"
        yield Problem(
            "pcs-driver",
            f"{pool.instance_type}'s Blackwell GPUs need NVIDIA driver R{BLACKWELL_DRIVER_MAJOR} "
            f"or later; AWS's PCS sample AMI for Slurm {version} has {has}, so every node "
            "would drain",
            ("slurm", "pcs", "slurmVersion"),
            hint=(
                f'slurmVersion "{good[-1]}" (its sample AMI has an R570+ driver), or '
                if good
                else ""
            )
            + "slurm.amiId: an image with an R570+ driver",
            related=(("compute", "gpuPools", i, "instanceType"),),
        )
        return


#: What a PCS cluster does not get that fmctl gives a ParallelCluster one (README, "What PCS
#: clusters get"): said by `validate` on every PCS spec, so nobody learns it from a job.
PCS_LACKS = (
    "no TaskProlog: batch jobs do not get the node's NCCL/EFA environment by themselves "
    "(source /opt/fmctl/slurm/lib/nccl-env.sh in the job script; login shells have it)",
    "no pyxis/enroot: srun --container-image is not available (PCS runs Slurm configless, "
    "with no plugstack.conf of fmctl's)",
    "no Slurm exporter: Grafana's Slurm panels stay empty (GPU, EFA and node metrics work)",
)


@rule("pcs-lacks")
def pcs_lacks(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """What fmctl does not (yet) set up on PCS that it does on ParallelCluster."""
    if _pcs(spec, ctx):
        yield Problem(
            "pcs-lacks",
            "on AWS PCS this cluster gets " + "; ".join(PCS_LACKS),
            ("slurm", "provider"),
            level="warning",
            hint="slurm.provider: parallelcluster has all of these; the README's "
            '"What PCS clusters get" table compares the two',
        )


@rule("pcs-os")
def pcs_os(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """slurm.os is ParallelCluster's image OS: on PCS it picks nothing, said (a warning, so
    the same spec still switches providers with one line)."""
    if _pcs(spec, ctx) and "os" in spec.slurm.model_fields_set:
        yield Problem(
            "pcs-os",
            f"slurm.os ({spec.slurm.os}) picks ParallelCluster's image and is ignored on PCS: "
            "its nodes run slurm.amiId, or AWS's PCS sample AMI (Amazon Linux 2 before Slurm "
            "25.11, Amazon Linux 2023 from it)",
            ("slurm", "os"),
            level="warning",
            hint="remove slurm.os on PCS; set slurm.amiId for another OS",
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
    ultra = any(
        (t := ctx.catalog.get(p.instance_type)) is not None and t.ultra_server
        for p in spec.compute.gpu_pools
    )
    for name in spec.slurm.pcs.custom_settings:
        path = ("slurm", "pcs", "customSettings", name)
        if ultra and name == "PrologFlags":
            yield Problem(
                "pcs-custom-settings",
                "PrologFlags is set by fmctl on UltraServer clusters (Alloc,NoHold: the IMEX "
                "prolog must run on every node at allocation, as PCS's UltraServer guide says)",
                path,
                hint="remove PrologFlags",
            )
        elif name in FMCTL_SETTINGS:
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
