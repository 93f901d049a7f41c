"""Rules for UltraServers (p6e-gb200) and for pools whose CPUs are not the head node's.

Sources: the catalog's ``blockSizes`` (ParallelCluster 3.16's allowed UltraServer Capacity
Block sizes, cited there), and ParallelCluster's ``cluster_validators.py``'s
``InstanceArchitectureCompatibilityValidator`` refuses a compute type whose architecture is
not the head node's. EC2 sells UltraServer capacity as Capacity Blocks only (the EC2 User
Guide, "Capacity Blocks for ML": UltraServer Capacity Blocks).
"""

from __future__ import annotations

from collections.abc import Iterator

from provisioner.catalog import architecture_of
from provisioner.catalog.pcs import default_slurm_version
from provisioner.spec import defaults
from provisioner.spec.model import ClusterSpec, GpuPool
from provisioner.spec.problems import Problem, SpecPath
from provisioner.validate.rules.registry import RuleContext, rule


def _pools(spec: ClusterSpec) -> Iterator[tuple[SpecPath, GpuPool]]:
    for i, pool in enumerate(spec.compute.gpu_pools):
        yield ("compute", "gpuPools", i), pool


def _first_ultraserver(spec: ClusterSpec, ctx: RuleContext) -> tuple[SpecPath, GpuPool] | None:
    """The first pool of UltraServers (where a cluster-wide problem about them is located)."""
    for path, pool in _pools(spec):
        itype = ctx.catalog.get(pool.instance_type)
        if itype is not None and itype.ultra_server:
            return path, pool
    return None


@rule("ultraserver-capacity")
def ultraserver_capacity(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """UltraServer pools run on a Capacity Block of a size EC2 sells."""
    for path, pool in _pools(spec):
        itype = ctx.catalog.get(pool.instance_type)
        if itype is None or not itype.ultra_server:
            continue
        if pool.capacity.type != "capacity-block":
            yield Problem(
                "ultraserver-capacity",
                f"{pool.instance_type} runs only on UltraServer Capacity Blocks, not "
                f"{pool.capacity.type} capacity",
                (*path, "capacity", "type"),
                hint="buy an UltraServer Capacity Block (aws ec2 "
                "describe-capacity-block-offerings --ultraserver-type u-p6e-gb200x72) and set "
                "capacity: {type: capacity-block, reservationId: cr-...}",
                related=((*path, "instanceType"),),
            )
        sizes = itype.block_sizes
        if sizes and pool.count not in sizes:
            yield Problem(
                "ultraserver-capacity",
                f"a {itype.family} Capacity Block holds "
                f"{' or '.join(map(str, sizes))} instances, not {pool.count}",
                (*path, "count"),
                hint=f"set count to the block's size ({' or '.join(map(str, sizes))}); "
                "more instances: one pool per block",
            )


@rule("architecture-mix")
def architecture_mix(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """On ParallelCluster, every pool shares the head node's CPU architecture."""
    if ctx.scheduler != "slurm" or spec.slurm.provider != "parallelcluster":
        return
    head = spec.compute.head_node
    if "instance_type" not in head.model_fields_set:
        return  # the default follows the pools' architecture (spec.resolve)
    want = architecture_of(head.instance_type, ctx.catalog)
    for path, pool in _pools(spec):
        itype = ctx.catalog.get(pool.instance_type)
        if itype is not None and itype.architecture != want:
            other = (
                defaults.HEAD_NODE_INSTANCE_TYPE_ARM64
                if itype.architecture == "arm64"
                else (defaults.HEAD_NODE_INSTANCE_TYPE)
            )
            yield Problem(
                "architecture-mix",
                f"{pool.instance_type} is {itype.architecture} but the head node "
                f"{head.instance_type} is {want}: ParallelCluster refuses the mix "
                "(InstanceArchitectureCompatibilityValidator)",
                ("compute", "headNode", "instanceType"),
                hint=f"use an {itype.architecture} head node such as {other}, or remove "
                "headNode.instanceType to get one",
                related=((*path, "instanceType"),),
            )


#: The oldest Slurm AWS PCS runs UltraServer node groups on (the AWS PCS User Guide,
#: "Configure UltraServer instances": prerequisites).
PCS_ULTRASERVER_SLURM = (25, 5)


@rule("ultraserver-pcs-slurm")
def ultraserver_pcs_slurm(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """On AWS PCS, UltraServer pools need Slurm 25.05 or later and an AMI with IMEX."""
    if ctx.scheduler != "slurm" or spec.slurm.provider != "pcs":
        return
    version = spec.slurm.pcs.slurm_version
    try:
        major, minor = (int(part) for part in version.split("."))
    except ValueError:
        return  # pcs-version says what is wrong with it
    ultra = _first_ultraserver(spec, ctx)
    if ultra is None:
        return
    path, pool = ultra
    if (major, minor) < PCS_ULTRASERVER_SLURM:
        newest = default_slurm_version(ctx.today)
        yield Problem(
            "ultraserver-pcs-slurm",
            f"AWS PCS runs {pool.instance_type} node groups on Slurm 25.05 or later, not {version}",
            ("slurm", "pcs", "slurmVersion"),
            hint=f'set slurm.pcs.slurmVersion to "{newest}"',
            related=((*path, "instanceType"),),
        )
    if spec.slurm.ami_id is None:
        # The same page's prerequisites: "An AMI with the NVIDIA driver, CUDA, and IMEX
        # packages installed. The IMEX service (nvidia-imex) must be enabled on the AMI";
        # AWS's sample AMIs carry no nvidia-imex (their release notes list none).
        yield Problem(
            "ultraserver-pcs-slurm",
            f"{pool.instance_type} node groups on AWS PCS need an AMI with nvidia-imex "
            "enabled, which AWS's PCS sample AMIs do not have",
            ("slurm", "amiId"),
            hint="set slurm.amiId to an image with the NVIDIA driver (R570+), CUDA, IMEX "
            "and PCS's agent (AWS's PCS-ready DLAMI, or one built with PCS's installers)",
            related=((*path, "instanceType"),),
        )


@rule("ultraserver-topology")
def ultraserver_topology(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """On ParallelCluster, UltraServer clusters get ParallelCluster's own block topology
    (render.context.parallelcluster_owns_topology): slurm.topologyAware is then a no-op,
    said rather than silently dropped."""
    if ctx.scheduler != "slurm" or spec.slurm.provider != "parallelcluster":
        return
    ultra = _first_ultraserver(spec, ctx) if spec.slurm.topology_aware else None
    if ultra is not None:
        path, pool = ultra
        yield Problem(
            "ultraserver-topology",
            f"ParallelCluster writes the Slurm topology itself for {pool.instance_type} "
            "Capacity Blocks (topology/block, one block per UltraServer): fmctl writes "
            "none on this cluster, for any pool",
            ("slurm", "topologyAware"),
            level="warning",
            hint="remove slurm.topologyAware; ParallelCluster 3.14+ keeps the blocks",
            related=((*path, "instanceType"),),
        )
