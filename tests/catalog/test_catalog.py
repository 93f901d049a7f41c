"""The catalog against EC2's own DescribeInstanceTypes data (as moto bundles it) and FACTS."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from provisioner.catalog import InstanceType, load_catalog

CATALOG = load_catalog()
REQUIRED = [
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.4xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
]


def _ec2_data() -> dict[str, Any]:
    import moto

    path = Path(moto.__file__).parent / "ec2/resources/instance_types.json.gz"
    raw = json.loads(gzip.decompress(path.read_bytes()))
    return raw if isinstance(raw, dict) else {t["InstanceType"]: t for t in raw}


EC2 = _ec2_data()
IN_EC2 = [t for t in CATALOG.types.values() if t.name in EC2]


def test_required_types_present() -> None:
    assert set(REQUIRED) <= set(CATALOG.types)
    # moto lacks p6e-gb200; everything else is cross-checked below.
    assert {t.name for t in IN_EC2} >= set(REQUIRED) - {"p6e-gb200.36xlarge"}


@pytest.mark.parametrize("itype", IN_EC2, ids=lambda t: t.name)
def test_matches_describe_instance_types(itype: InstanceType) -> None:
    ec2 = EC2[itype.name]
    net = ec2["NetworkInfo"]
    assert itype.cpu.vcpus == ec2["VCpuInfo"]["DefaultVCpus"]
    assert itype.cpu.sockets * itype.cpu.cores_per_socket == ec2["VCpuInfo"]["DefaultCores"]
    assert itype.cpu.memory_gib * 1024 == ec2["MemoryInfo"]["SizeInMiB"]
    assert itype.network.cards == net["MaximumNetworkCards"]
    efa = net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0) if net.get("EfaSupported") else 0
    assert itype.network.efa_interfaces == efa
    assert set(itype.network.efa_cards).isdisjoint(itype.network.ena_only_cards)
    assert all(0 <= c < itype.network.cards for c in itype.network.efa_cards)
    gpus = ec2.get("GpuInfo", {}).get("Gpus", [])
    if itype.gpu:
        assert gpus and gpus[0]["Name"] == itype.gpu.model and gpus[0]["Count"] == itype.gpu.count
    else:
        assert not gpus
    disks = ec2.get("InstanceStorageInfo", {}).get("Disks", [])
    if itype.local_nvme:
        assert (disks[0]["Count"], disks[0]["SizeInGB"]) == (
            itype.local_nvme.count,
            itype.local_nvme.size_gb,
        )
    else:
        assert not disks


@pytest.mark.parametrize(
    ("name", "efa", "cards", "ena_only"),
    [
        ("p4d.24xlarge", 4, 4, ()),
        ("p5.48xlarge", 32, 32, ()),
        ("p5e.48xlarge", 32, 32, ()),
        ("p5en.48xlarge", 16, 16, ()),
        ("p6-b200.48xlarge", 8, 8, ()),
        ("p6-b300.48xlarge", 16, 17, (0,)),
        ("p6e-gb200.36xlarge", 16, 17, (0,)),
    ],
)
def test_efa_layouts(name: str, efa: int, cards: int, ena_only: tuple[int, ...]) -> None:
    net = CATALOG[name].network
    assert (net.efa_interfaces, net.cards, net.ena_only_cards) == (efa, cards, ena_only)
    assert 0 not in net.efa_cards or not ena_only


@pytest.mark.parametrize(
    ("model", "bf16", "fp8", "fp4", "hbm", "bw"),
    [
        ("H100", 0.989, 1.979, None, 80, 3.35),
        ("H200", 0.989, 1.979, None, 141, 4.8),
        ("B200", 2.25, 4.5, 9.0, 180, 8.0),
        ("B300", 2.25, 4.5, 13.5, 288, 8.0),
    ],
)
def test_gpu_figures(
    model: str, bf16: float, fp8: float, fp4: float | None, hbm: int, bw: float
) -> None:
    gpus = [t.gpu for t in CATALOG.types.values() if t.gpu and t.gpu.model == model]
    assert gpus
    for gpu in gpus:
        assert (
            gpu.bf16_pflops,
            gpu.fp8_pflops,
            gpu.fp4_pflops,
            gpu.hbm_gb,
            gpu.hbm_bandwidth_tbs,
        ) == (bf16, fp8, fp4, hbm, bw)


def test_nvlink_and_efa_generations() -> None:
    assert CATALOG["p5.48xlarge"].nvlink.bandwidth_tbs == 7.2  # type: ignore[union-attr]
    assert CATALOG["p6-b200.48xlarge"].nvlink.bandwidth_tbs == 14.4  # type: ignore[union-attr]
    assert CATALOG["p5.48xlarge"].network.efa_version == 2
    assert CATALOG["p6-b300.48xlarge"].network.bandwidth_gbps == 6400


def test_every_fact_group_names_a_known_source() -> None:
    for t in CATALOG.types.values():
        for group in (t.cpu, t.gpu, t.nvlink, t.network, t.local_nvme, t.network_layers):
            if group is not None:
                assert group.source in CATALOG.sources, (t.name, group)


def test_family_filter() -> None:
    assert {t.name for t in CATALOG.family("p5")} == {
        "p5.4xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
    }


def test_rdma_read_and_capacity_block_facts() -> None:
    """FI_EFA_USE_DEVICE_RDMA=1 aborts libfabric where EFA has no RDMA read (g5): the catalog
    says where it has, with its source; p4de is sold as Capacity Blocks."""
    catalog = load_catalog()
    assert not catalog["g5.48xlarge"].network.rdma_read
    for name in ("p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge", "p6-b300.48xlarge"):
        assert catalog[name].network.rdma_read, name
        assert catalog[name].network.rdma_source == "ec2-efa-rdma"
    assert catalog["p4de.24xlarge"].capacity_blocks
    gb200 = catalog["p6e-gb200.36xlarge"].local_nvme
    assert gb200 is not None and gb200.total_gb == 22500


def test_network_layers_per_type() -> None:
    """EC2 topology's depth: 4 network nodes for p6-b200 and p6-b300, 3 for the other
    topology types, none for types DescribeInstanceTopology does not place."""
    depth = {n: t.network_layers.count for n, t in CATALOG.types.items() if t.network_layers}
    assert depth["p6-b200.48xlarge"] == depth["p6-b300.48xlarge"] == 4
    assert {depth[n] for n in ("p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge")} == {3}
    assert depth["p6e-gb200.36xlarge"] == 3
    assert CATALOG["p5.4xlarge"].network_layers is None
    assert CATALOG["g5.xlarge"].network_layers is None


def test_nccl_baselines_are_the_sources_figures() -> None:
    """The published rows are the AWS samples' README figures (out-of-place busbw of the
    2 x p5.48xlarge and 2 x p4de.24xlarge runs, as the README prints them), each with its
    size: a row typed wrong (16 GiB was once 480, the source says 487.09) fails here."""
    from provisioner.catalog.nccl_baselines import BASELINES, GIB

    rows = {(b.instance_type, b.nodes, b.size_bytes): b.busbw_gbs for b in BASELINES}
    assert rows[("p5.48xlarge", 2, 16 * GIB)] == 487.1
    assert rows[("p5.48xlarge", 2, 8 * GIB)] == 479.3
    assert rows[("p5.48xlarge", 2, 4 * GIB)] == 465.9
    assert rows[("p4de.24xlarge", 2, 2 * GIB)] == 78.3
    assert all(b.size_bytes is not None for b in BASELINES)


def test_the_p5en_baseline_is_the_topology_readmes_16_node_run() -> None:
    """The topology-aware NCCL tests' README prints one p5en.48xlarge line at 16 GiB without
    its node count: the all-reduce's busbw/algbw ratio, 2(n-1)/n, says 128 ranks (16 nodes of
    8 GPUs). The row is that run's, and applies to 16-node runs only."""
    from provisioner.catalog.nccl_baselines import GIB, published

    # The README's line: size, count, type, redop, root, time, algbw, busbw (out-of-place).
    line = "17179869184 4294967296 float sum -1 92173 186.39 369.86 0 92284 186.16 369.42 0"
    fields = line.split()
    algbw, busbw = float(fields[6]), float(fields[7])
    ranks = round(2 / (2 - busbw / algbw))
    assert ranks == 128
    (row,) = published("p5en.48xlarge", ranks // 8)
    assert (row.size_bytes, row.busbw_gbs) == (int(fields[0]), busbw) == (16 * GIB, 369.86)
    assert published("p5en.48xlarge", 2) == []


def test_the_verify_pairs_floor_is_what_check_holds_a_pool_to() -> None:
    """The verify gate's 2-node pair (slurm/lib/verify-pair.sh) is judged as `fmctl check`
    judges a 2-node run: 85% of the published measurement nearest 4 GiB, at its size; else
    70% of EFA's line rate at 4 GiB."""
    from provisioner.catalog.nccl_baselines import (
        BASELINE_FRACTION,
        NCCL_FLOOR,
        PAIR_BYTES,
        pair_floor,
    )

    p5 = pair_floor("p5.48xlarge", 3200)
    assert (p5.floor_gbs, p5.size_bytes) == (round(BASELINE_FRACTION * 465.9, 1), 4 * 2**30)
    assert "465.9 GB/s measured on 2 x p5.48xlarge" in p5.source
    p4de = pair_floor("p4de.24xlarge", 400)  # measured at 2 GiB only: judged there
    assert (p4de.floor_gbs, p4de.size_bytes) == (round(BASELINE_FRACTION * 78.3, 1), 2 * 2**30)
    b200 = pair_floor("p6-b200.48xlarge", 3200)  # nothing published for 2 nodes
    assert (b200.floor_gbs, b200.size_bytes) == (NCCL_FLOOR * 400, PAIR_BYTES)
    assert "line-rate estimate" in b200.source
