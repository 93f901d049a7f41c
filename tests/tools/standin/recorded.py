"""Full-node tool outputs assembled from the real recordings in tests/data/real (see its
README's "Assembled"): `fi_info -p efa` for N devices, per libfabric major version."""

from __future__ import annotations

import re
from pathlib import Path

REAL = Path(__file__).resolve().parents[2] / "data" / "real"


def _entries(text: str) -> list[str]:
    return [("provider:" + e).rstrip("\n") for e in text.split("provider:")[1:]]


def fi_info(domains: list[str], libfabric: int = 2) -> str:
    """What `fi_info -p efa` prints on a node with these EFA devices (``rdmapNNs0``)."""
    if libfabric == 2:
        pattern = _entries((REAL / "fi_info-libfabric2-one-device.txt").read_text())
        device = "rdmap49s0"
    else:
        rdm = _entries((REAL / "fi_info-libfabric1-p5-excerpt.txt").read_text())[0]
        device = "rdmap79s0"
        dgram = rdm.replace(f"{device}-rdm", f"{device}-dgrm").replace("FI_EP_RDM", "FI_EP_DGRAM")
        pattern = [rdm, dgram]
    out = []
    for domain in domains:
        out += [re.sub(rf"\b{device}\b", domain, e) for e in pattern]
    return "\n".join(out) + "\n"


def p5_domains(count: int = 32) -> list[str]:
    """EFA device names of the p5.48xlarge kind (rdmapNNs0, one per PCIe bus)."""
    return [f"rdmap{16 + 8 * i}s0" for i in range(count)]


def nccl_p5_2nodes() -> str:
    """A whole all_reduce_perf log of 2 x p5.48xlarge: nccl-tests' header naming the 16 ranks
    on their two hosts (its format, from tests/data/check's hand-written logs) above the
    real measured table of tests/data/real/nccl-p5-2nodes-eks-blueprints.txt (444 GB/s at
    2 GiB)."""
    degraded = (REAL.parent / "check" / "nccl-p5-2nodes-degraded.txt").read_text()
    # Everything before the table's first heading line (the one naming out-of-place).
    header = degraded[: degraded.index("out-of-place")].rsplit("\n", 1)[0] + "\n"
    return header + (REAL / "nccl-p5-2nodes-eks-blueprints.txt").read_text()
