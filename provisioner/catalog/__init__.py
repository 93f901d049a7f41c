"""The accelerated-instance catalog: typed facts loaded from ``instances.yaml``.

Every layer reads instance facts from here (EFA layouts for launch templates, socket counts
for Slurm, GPU counts for readiness checks, FLOPS for estimates), so a new instance type is
one entry in the YAML file. Each fact group keeps the key of the source it came from.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Architecture = Literal["x86_64", "arm64"]


@dataclass(frozen=True)
class CpuInfo:
    """Host CPU and memory."""

    vcpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_gib: int
    source: str


@dataclass(frozen=True)
class GpuInfo:
    """GPUs of one instance; memory and FLOPS are per GPU, dense."""

    model: str
    count: int
    hbm_gb: float
    hbm_type: str
    hbm_bandwidth_tbs: float
    bf16_pflops: float
    fp8_pflops: float | None
    fp4_pflops: float | None
    source: str

    @property
    def total_hbm_gb(self) -> float:
        """HBM across the instance's GPUs."""
        return self.hbm_gb * self.count


@dataclass(frozen=True)
class NvLinkInfo:
    """NVLink generation and aggregate bandwidth per instance (TB/s, bidirectional)."""

    generation: int
    bandwidth_tbs: float
    source: str


@dataclass(frozen=True)
class NetworkInfo:
    """Network cards and where EFA lives on them.

    ``efa_cards`` are the card indices that carry an EFA device (one each); ``ena_only_cards``
    carry no EFA (p6-b300's card 0). Launch templates put one EFA interface on each EFA card.
    """

    bandwidth_gbps: float
    cards: int
    efa_version: int | None
    efa_cards: tuple[int, ...]
    ena_only_cards: tuple[int, ...]
    source: str
    #: EFA RDMA read, which libfabric's FI_EFA_USE_DEVICE_RDMA=1 requires (it aborts where
    #: the device has none, as on g5); from ``rdma_source``.
    rdma_read: bool = False
    rdma_source: str = ""

    @property
    def efa_interfaces(self) -> int:
        """How many EFA devices the instance exposes (EfaInfo.MaximumEfaInterfaces)."""
        return len(self.efa_cards)


@dataclass(frozen=True)
class NvmeInfo:
    """Instance-store NVMe drives."""

    count: int
    size_gb: int
    source: str

    @property
    def total_gb(self) -> int:
        """Raw capacity of a RAID0 over all drives."""
        return self.count * self.size_gb


@dataclass(frozen=True)
class NetworkLayers:
    """How many network nodes EC2's topology APIs give above an instance of the type."""

    count: int
    source: str


@dataclass(frozen=True)
class InstanceType:
    """Everything fmctl needs to know about one EC2 instance type."""

    name: str
    family: str
    architecture: Architecture
    cpu: CpuInfo
    network: NetworkInfo
    gpu: GpuInfo | None = None
    nvlink: NvLinkInfo | None = None
    local_nvme: NvmeInfo | None = None
    placement_group: bool = True
    capacity_blocks: bool = False
    ultra_server: bool = False
    #: UltraServer types: the instance counts their Capacity Blocks come in.
    block_sizes: tuple[int, ...] = ()
    #: None: DescribeInstanceTopology does not place the type.
    network_layers: NetworkLayers | None = None

    @property
    def efa_supported(self) -> bool:
        """True when the type has at least one EFA device."""
        return self.network.efa_interfaces > 0

    @property
    def is_gpu(self) -> bool:
        """True for accelerated types."""
        return self.gpu is not None


@dataclass(frozen=True)
class Catalog:
    """All known instance types, by name, with the table of sources."""

    types: dict[str, InstanceType]
    sources: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> InstanceType | None:
        """The type called ``name``, or None."""
        return self.types.get(name)

    def __getitem__(self, name: str) -> InstanceType:
        return self.types[name]

    def names(self) -> list[str]:
        """Type names in catalog order."""
        return list(self.types)

    def family(self, family: str) -> list[InstanceType]:
        """Types of one family (``p5`` also matches ``p5e`` and ``p5en``)."""
        return [t for t in self.types.values() if t.family.startswith(family)]


def architecture_of(instance_type: str, catalog: Catalog) -> Architecture:
    """The catalog's architecture, or, for a type it does not list, EC2's naming: Graviton
    types have a ``g`` after the generation (m7g, c8gd); every other type is x86_64."""
    known = catalog.get(instance_type)
    if known is not None:
        return known.architecture
    family = instance_type.split(".", 1)[0]
    digits = family.rstrip("abcdefghijklmnopqrstuvwxyz-")
    rest = family[len(digits) :] if digits else ""
    return "arm64" if rest.startswith("g") else "x86_64"


def _from_dict(name: str, raw: dict[str, Any]) -> InstanceType:
    def section(key: str) -> dict[str, Any] | None:
        value = raw.get(key)
        return dict(value) if value else None

    cpu = section("cpu")
    gpu = section("gpu")
    nvlink = section("nvlink")
    net = section("network")
    nvme = section("localNvme")
    layers = section("networkLayers")
    assert cpu is not None and net is not None, f"catalog entry {name} lacks cpu or network"
    return InstanceType(
        name=name,
        family=raw["family"],
        architecture=raw["architecture"],
        cpu=CpuInfo(
            cpu["vcpus"],
            cpu["sockets"],
            cpu["coresPerSocket"],
            cpu["threadsPerCore"],
            cpu["memoryGiB"],
            cpu["source"],
        ),
        gpu=GpuInfo(
            gpu["model"],
            gpu["count"],
            gpu["hbmGB"],
            gpu["hbmType"],
            gpu["hbmBandwidthTBs"],
            gpu["bf16Pflops"],
            gpu["fp8Pflops"],
            gpu["fp4Pflops"],
            gpu["source"],
        )
        if gpu
        else None,
        nvlink=NvLinkInfo(nvlink["generation"], nvlink["bandwidthTBs"], nvlink["source"])
        if nvlink
        else None,
        network=NetworkInfo(
            net["bandwidthGbps"],
            net["cards"],
            net["efaVersion"],
            tuple(net["efaCards"]),
            tuple(net["enaOnlyCards"]),
            net["source"],
            rdma_read=net.get("rdmaRead", False),
            rdma_source=net.get("rdmaSource", ""),
        ),
        local_nvme=NvmeInfo(nvme["count"], nvme["sizeGB"], nvme["source"]) if nvme else None,
        placement_group=raw.get("placementGroup", True),
        capacity_blocks=raw.get("capacityBlocks", False),
        ultra_server=raw.get("ultraServer", False),
        block_sizes=tuple(raw.get("blockSizes", ())),
        network_layers=NetworkLayers(layers["count"], layers["source"]) if layers else None,
    )


@functools.cache
def load_catalog() -> Catalog:
    """Load the checked-in catalog (once per process)."""
    import yaml

    # A plain path, not importlib.resources: the file ships beside this module in both wheel
    # and editable installs, and importlib.resources costs ~10 ms of start-up.
    text = (Path(__file__).parent / "instances.yaml").read_text("utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw = yaml.load(text, Loader=loader)
    types = {name: _from_dict(name, entry) for name, entry in raw["types"].items()}
    return Catalog(types=types, sources=dict(raw["sources"]))
