"""The defaults that depend on other fields or on the catalog, filled into a spec: EFA on
where the type has it, placement groups off with reserved capacity, FSx sizing (the static
ones are ``provisioner.spec.defaults``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provisioner.spec.defaults import (
    FSX_CAPACITY_GIB,
    FSX_DEPLOYMENT_TYPE,
    FSX_THROUGHPUT_PER_TIB,
    HEAD_NODE_INSTANCE_TYPE_ARM64,
    SYSTEM_NODE_INSTANCE_TYPE_ARM64,
    VPC_CIDR,
)
from provisioner.spec.durations import seconds
from provisioner.spec.model import ClusterSpec, FsxLustre, GpuPool

if TYPE_CHECKING:
    from provisioner.catalog import Catalog


def pool_efa(pool: GpuPool, catalog: Catalog) -> bool:
    """EFA defaults to on wherever the instance type supports it."""
    if pool.efa is not None:
        return pool.efa
    itype = catalog.get(pool.instance_type)
    return bool(itype and itype.efa_supported)


def pool_placement_group(pool: GpuPool, catalog: Catalog) -> bool:
    """Placement groups default to on, except with reserved capacity or where unsupported.

    AWS places ODCRs and Capacity Blocks itself; adding a cluster placement group on top risks
    insufficient-capacity errors, so the AWS samples leave it off there. UltraServer types
    (p6e-gb200) take none: their NVLink domain is placed by AWS.
    """
    if pool.placement_group is not None:
        return pool.placement_group
    itype = catalog.get(pool.instance_type)
    if itype is not None and not itype.placement_group:
        return False
    return pool.capacity.type not in ("reservation", "capacity-block")


def kubernetes_agent(spec: ClusterSpec, scheduler: str) -> bool:
    """fmctl's node agent on EKS: on wherever health is (the issue's loop is on by default
    for GPU pools), unless the spec says false; never on Slurm, whose GPU nodes run the
    agent as a systemd timer."""
    if scheduler != "kubernetes" or not spec.health.enabled:
        return False
    return spec.health.kubernetes_agent is not False


def default_queueing(spec: ClusterSpec) -> str:
    """Kueue where a job can span nodes (a GPU pool of more than one): gang admission and
    topology placement are what it is for; a cluster of single nodes gains nothing."""
    return "kueue" if any(p.count > 1 for p in spec.compute.gpu_pools) else "none"


def _fsx(fsx: FsxLustre) -> FsxLustre:
    if fsx.file_system_id:
        return fsx
    deployment = fsx.deployment_type or FSX_DEPLOYMENT_TYPE
    throughput = fsx.throughput_per_tib
    if throughput is None:
        throughput = FSX_THROUGHPUT_PER_TIB.get(deployment)
    return fsx.model_copy(
        update={
            "capacity_gib": fsx.capacity_gib if fsx.capacity_gib is not None else FSX_CAPACITY_GIB,
            "deployment_type": deployment,
            "throughput_per_tib": throughput,
        }
    )


def _scales_down(spec: ClusterSpec) -> bool:
    """cost.idle with scale-down: the on-demand and spot pools shrink to zero when idle
    (Slurm's power saving; on EKS, the Cluster Autoscaler), unless the spec keeps a
    minCount."""
    idle = spec.cost.idle
    return idle is not None and idle.action == "scale-down"


def shrinks(pool: GpuPool, scheduler: str, catalog: Catalog) -> bool:
    """True when ``pool``'s idle nodes are removed under cost.idle scale-down: an on-demand
    or spot pool (reserved capacity is paid anyway); on EKS not an UltraServer pool, whose
    IMEX ComputeDomain the Cluster Autoscaler cannot simulate for a node it has not made."""
    if pool.capacity.type not in ("on-demand", "spot"):
        return False
    itype = catalog.get(pool.instance_type)
    return scheduler == "slurm" or not (itype is not None and itype.ultra_server)


def _min_count(pool: GpuPool, shrinking: bool) -> int:
    if pool.min_count is not None:
        return pool.min_count
    if shrinking:
        return 0  # every node dynamic: removed once idle, back when work comes
    return pool.count


def resolve(spec: ClusterSpec, catalog: Catalog, scheduler: str | None = None) -> ClusterSpec:
    """Return the spec with every derived default filled in (and ``scheduler`` applied)."""
    scales_down = _scales_down(spec)
    where = scheduler or spec.scheduler
    pools = [
        pool.model_copy(
            update={
                "min_count": _min_count(pool, scales_down and shrinks(pool, where, catalog)),
                "efa": pool_efa(pool, catalog),
                "placement_group": pool_placement_group(pool, catalog),
            }
        )
        for pool in spec.compute.gpu_pools
    ]
    network = spec.network
    if network.vpc_id is None and network.vpc_cidr is None:
        network = network.model_copy(update={"vpc_cidr": VPC_CIDR})
    storage = spec.storage
    if storage.fsx_lustre is not None:
        storage = storage.model_copy(update={"fsx_lustre": _fsx(storage.fsx_lustre)})
    compute = spec.compute.model_copy(update={"gpu_pools": pools})
    archs = {catalog[p.instance_type].architecture for p in pools if catalog.get(p.instance_type)}
    if archs == {"arm64"} and "instance_type" not in spec.compute.head_node.model_fields_set:
        # ParallelCluster wants the head node's architecture on every compute type.
        head = spec.compute.head_node.model_copy(
            update={"instance_type": HEAD_NODE_INSTANCE_TYPE_ARM64}
        )
        compute = compute.model_copy(update={"head_node": head})
    if archs == {"arm64"} and "instance_type" not in spec.compute.system_nodes.model_fields_set:
        system = spec.compute.system_nodes.model_copy(
            update={"instance_type": SYSTEM_NODE_INSTANCE_TYPE_ARM64}
        )
        compute = compute.model_copy(update={"system_nodes": system})
    slurm = spec.slurm
    idle = spec.cost.idle
    after = seconds(idle.after) if idle is not None else None
    slurm_idle = scales_down and where == "slurm"
    if slurm_idle and after is not None and "scaledown_idletime" not in slurm.model_fields_set:
        # Slurm's own idle time (ParallelCluster's ScaledownIdletime, PCS's
        # scaleDownIdleTimeInSeconds) is what powers the idle nodes down.
        slurm = slurm.model_copy(update={"scaledown_idletime": max(1, after // 60)})
    kubernetes = spec.kubernetes
    if kubernetes.queueing is None:
        kubernetes = kubernetes.model_copy(update={"queueing": default_queueing(spec)})
    health = spec.health
    if where == "kubernetes" and health.kubernetes_agent is None:
        health = health.model_copy(update={"kubernetes_agent": kubernetes_agent(spec, where)})
    return spec.model_copy(
        update={
            "health": health,
            "kubernetes": kubernetes,
            "slurm": slurm,
            "scheduler": scheduler or spec.scheduler,
            "network": network,
            "compute": compute,
            "storage": storage,
        }
    )
