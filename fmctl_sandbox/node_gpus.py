"""A sandbox node's GPUs, as fmctl's node agent reads them there: the NVIDIA driver's procfs
in the node's folder, and a stand-in ``nvidia-smi`` that answers from it.

The sandbox's nodes have no GPUs. So that fmctl's agent (a DaemonSet program,
``kube_programs``) can count a node's GPUs, and ``fmctl sandbox fault --gpu-missing N`` can
take some away, a node's folder holds what the driver lays out under
``/proc/driver/nvidia/gpus``: a folder per GPU named by its PCI bus location, with an
``information`` file (NVIDIA's open-gpu-kernel-modules, kernel-open/nvidia/nv-procfs.c:
``nv_procfs_read_gpu_info``'s "Bus Location" and "Device Minor" lines). A GPU that fell off
the bus is gone from there, and from what nvidia-smi lists.

The stand-in answers the one question fmctl's detector (slurm/lib/health-detect.sh) asks of
the count, ``--query-gpu=index --format=csv,noheader``, as nvidia-smi prints it (an index a
line, tests/data/check/nvidia-smi-p5en.csv's first column); ``nvlink -s`` and ``-q -d
ROW_REMAPPER`` print nothing (no NVLinks, no remap tables to show: the detector then finds
nothing of theirs); any other question fails, saying the sandbox does not answer it. Jobs'
pods do not get it (``fmctl check`` in the sandbox still needs a test's recorded tools,
``KubeServer.node_tools``), and a test's tools, when given, replace it.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

#: Where the driver's procfs lists the GPUs, below a node's folder.
GPUS = "proc/driver/nvidia/gpus"
#: The env var that tells the stand-in where its node's folder is (a pod is not told it).
HOST_ENV = "FMCTL_SANDBOX_HOST"
#: PCI buses of a p5en's eight GPUs, as its recorded nvidia-smi lists them
#: (tests/data/check/nvidia-smi-p5en.csv); further GPUs count on from the last.
BUSES = (0x53, 0x64, 0x75, 0x86, 0x97, 0xA8, 0xB9, 0xCA)

NVIDIA_SMI = f"""#!/bin/sh
# The sandbox's stand-in for nvidia-smi (fmctl_sandbox/node_gpus.py): this node's GPUs are
# the folders the driver's procfs lists in its folder.
gpus="${{{HOST_ENV}:?}}/{GPUS}"
case "$*" in
  "--query-gpu=index --format=csv,noheader")
    i=0
    for gpu in "$gpus"/*/; do
      [ -d "$gpu" ] || continue
      echo "$i"
      i=$((i + 1))
    done ;;
  "nvlink -s" | "-q -d ROW_REMAPPER") ;;
  *)
    echo "sandbox: nvidia-smi $* is not answered here (only the GPU count is)" >&2
    exit 2 ;;
esac
"""


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


@functools.cache
def tools() -> str:
    """The folder with the stand-in nvidia-smi: written once per sandbox process (mkdtemp's
    0700, so no other user can change what the agents run) and removed when it exits."""
    folder = Path(tempfile.mkdtemp(prefix="fmctl-sandbox-nvidia-"))
    (folder / "nvidia-smi").write_text(NVIDIA_SMI)
    (folder / "nvidia-smi").chmod(0o755)
    atexit.register(shutil.rmtree, folder, True)
    return str(folder)
