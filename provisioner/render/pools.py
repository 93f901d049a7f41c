"""The render context of one GPU pool: a Slurm queue or an EKS managed node group, with
everything templates need of it computed once (capacity-type names per tool, EFA layout,
labels, hugepages, what a node offers the Cluster Autoscaler)."""

from __future__ import annotations

from dataclasses import dataclass

from provisioner.catalog import Catalog, InstanceType, autoscaler
from provisioner.render.efa import NetworkInterface, efa_device_count, efa_interfaces
from provisioner.spec.model import ClusterSpec, GpuPool
from provisioner.spec.resolve import shrinks

POOL_LABEL = "fmctl.dev/pool"
EFA_LABEL = "fmctl.dev/efa"
#: 2 MiB hugepages per GPU on a node (the AWS EFA samples give each pod about 5 GiB).
HUGEPAGES_2MI_PER_GPU = 2560

_PCLUSTER_CAPACITY = {
    "on-demand": "ONDEMAND",
    "reservation": "ONDEMAND",
    "spot": "SPOT",
    "capacity-block": "CAPACITY_BLOCK",
}
_EKS_CAPACITY = {
    "on-demand": "ON_DEMAND",
    "reservation": "ON_DEMAND",
    "spot": "SPOT",
    "capacity-block": "CAPACITY_BLOCK",
}


@dataclass(frozen=True)
class PoolContext:
    """One GPU pool: a Slurm queue or an EKS managed node group."""

    name: str
    itype: InstanceType
    count: int
    min_count: int
    capacity: str
    reservation_id: str | None
    efa: bool
    placement_group: bool
    placement_group_name: str
    interfaces: tuple[NetworkInterface, ...]
    labels: tuple[tuple[str, str], ...]
    local_nvme: bool
    #: Its size is the Cluster Autoscaler's between min_count and count (EKS, cost.idle
    #: scale-down): idle nodes go, and come back when work needs them.
    autoscaled: bool = False

    @property
    def instance_type(self) -> str:
        """The EC2 instance type name."""
        return self.itype.name

    @property
    def gpus(self) -> int:
        """GPUs per node."""
        return self.itype.gpu.count if self.itype.gpu else 0

    @property
    def gpu_type(self) -> str:
        """Slurm GRES type, e.g. ``h100``."""
        return self.itype.gpu.model.lower() if self.itype.gpu else ""

    @property
    def efa_rdma_read(self) -> bool:
        """EFA with RDMA read (the catalog's): where FI_EFA_USE_DEVICE_RDMA=1 may be set."""
        return self.efa and self.itype.network.rdma_read

    @property
    def efa_devices(self) -> int:
        """EFA devices per node (what the EFA device plugin must advertise)."""
        return efa_device_count(list(self.interfaces))

    @property
    def static(self) -> bool:
        """True when every node runs all the time (MinCount = MaxCount)."""
        return self.min_count == self.count

    @property
    def pcluster_capacity_type(self) -> str:
        """ParallelCluster's CapacityType."""
        return _PCLUSTER_CAPACITY[self.capacity]

    @property
    def eks_capacity_type(self) -> str:
        """EKS node group capacityType."""
        return _EKS_CAPACITY[self.capacity]

    @property
    def compute_resource_name(self) -> str:
        """ParallelCluster compute-resource name: the type with '.' as '-'."""
        return self.itype.name.replace(".", "-")

    @property
    def hugepages_2mi(self) -> int:
        """2 MiB hugepages to reserve per node."""
        return HUGEPAGES_2MI_PER_GPU * self.gpus

    @property
    def node_template_resources(self) -> tuple[tuple[str, str], ...]:
        """What a node offers the Cluster Autoscaler while its group has none, as the
        group's ``k8s.io/cluster-autoscaler/node-template/resources/NAME`` tags say it."""
        offers = [("nvidia.com/gpu", str(self.gpus))]
        if self.efa:
            offers.append(("vpc.amazonaws.com/efa", str(self.efa_devices)))
        offers.append(("hugepages-2Mi", f"{self.hugepages_2mi * 2}Mi"))
        return tuple((f"{autoscaler.TEMPLATE_PREFIX}resources/{k}", v) for k, v in offers)

    @property
    def ami_type(self) -> str:
        """EKS AMI type: the AL2023 NVIDIA image for the CPU architecture."""
        arch = "ARM_64" if self.itype.architecture == "arm64" else "x86_64"
        return f"AL2023_{arch}_NVIDIA"


def pool_context(
    spec: ClusterSpec, pool: GpuPool, catalog: Catalog, autoscaling: bool
) -> PoolContext:
    """The context of ``pool`` (``autoscaling``: cost.idle scale-down on EKS)."""
    itype = catalog[pool.instance_type]
    efa = bool(pool.efa)
    # Not node.kubernetes.io/instance-type: the kubelet sets it (a well-known label under the
    # reserved kubernetes.io prefix), and a managed node group must not.
    labels = {**pool.labels, POOL_LABEL: pool.name}
    if efa:
        labels[EFA_LABEL] = "true"
    min_count = pool.min_count if pool.min_count is not None else pool.count
    autoscaled = autoscaling and shrinks(pool, "kubernetes", catalog) and min_count < pool.count
    if autoscaled and itype.gpu:
        # The Cluster Autoscaler treats a node with this label as a GPU node: it judges it
        # by GPU requests alone, and waits for its device plugin (catalog.autoscaler).
        labels[autoscaler.GPU_LABEL] = f"nvidia-{itype.gpu.model.lower()}"
    return PoolContext(
        name=pool.name,
        itype=itype,
        count=pool.count,
        min_count=min_count,
        capacity=pool.capacity.type,
        reservation_id=pool.capacity.reservation_id,
        efa=efa,
        placement_group=bool(pool.placement_group),
        placement_group_name=f"{spec.metadata.name}-{pool.name}",
        interfaces=tuple(efa_interfaces(itype, efa)),
        labels=tuple(sorted(labels.items())),
        local_nvme=spec.storage.local_nvme is not None and itype.local_nvme is not None,
        autoscaled=autoscaled,
    )
