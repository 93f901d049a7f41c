"""A sandbox node's GPUs: what the NVIDIA driver's procfs lists, in the node's folder.

The sandbox's nodes have no GPUs. So that fmctl's agent and verify gate can count a node's
GPUs (the stand-in tools of ``node_tools`` answer from this), and ``fmctl sandbox fault
--gpu-missing N`` can take some away, a node's folder holds what the driver lays out under
``/proc/driver/nvidia/gpus``: a folder per GPU named by its PCI bus location, with an
``information`` file (NVIDIA's open-gpu-kernel-modules, kernel-open/nvidia/nv-procfs.c:
``nv_procfs_read_gpu_info``'s "Bus Location" and "Device Minor" lines). A GPU that fell off
the bus is gone from there, and from what the tools list.
"""

from __future__ import annotations

import shutil
from pathlib import Path

#: Where the driver's procfs lists the GPUs, below a node's folder.
GPUS = "proc/driver/nvidia/gpus"
#: PCI buses of a p5en's eight GPUs, as its recorded nvidia-smi lists them
#: (tests/data/check/nvidia-smi-p5en.csv); further GPUs count on from the last.
BUSES = (0x53, 0x64, 0x75, 0x86, 0x97, 0xA8, 0xB9, 0xCA)


def lay_out(host: Path, count: int) -> None:
    """The node's GPUs in its folder ``host``, as the driver's procfs lists them (made
    once: the first time a program of the node starts)."""
    root = host / GPUS
    if root.exists():
        return
    root.mkdir(parents=True)
    for minor in range(count):
        bus = BUSES[minor] if minor < len(BUSES) else BUSES[-1] + 0x11 * (minor - 7)
        location = f"0000:{bus:02x}:00.0"
        (root / location).mkdir()
        (root / location / "information").write_text(
            f"Bus Location: \t {location}\nDevice Minor: \t {minor}\nGPU Excluded:\t No\n"
        )


def fall_off(host: Path, count: int) -> int:
    """Take ``count`` GPUs away from the node (the last by bus), as a GPU that fell off the
    bus leaves the driver's list; how many went."""
    root = host / GPUS
    gone = sorted(root.iterdir())[-count:] if root.exists() and count > 0 else []
    for gpu in gone:
        shutil.rmtree(gpu)
    return len(gone)
