"""slurm/lib/efa-devices.sh's counting rule, run as the nodes run it (bash), for tests that
need what a node's efa-devices.txt would hold for a recorded fi_info output."""

from __future__ import annotations

import subprocess
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "slurm" / "lib" / "efa-devices.sh"


def efa_devices(fi_info: str) -> str:
    """efa-devices.txt for this fi_info output: one EFA RDM domain per line."""
    return subprocess.run(
        ["bash", "-c", f". '{LIB}' && fmctl_efa_rdm_domains"],
        input=fi_info,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
