"""A sandbox node's GPUs as fmctl's node agent counts them (``fmctl_sandbox.node_gpus``):
the driver's procfs in the node's folder, the stand-in nvidia-smi answering from it in
nvidia-smi's own format, and fmctl's real detector (slurm/lib/health-detect.sh, as the
agent's container runs it) finding one GPU gone once ``sandbox fault --gpu-missing`` took
it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fmctl_sandbox import node_gpus, node_tools
from tests.conftest import ROOT

DETECT = ROOT / "slurm/lib/health-detect.sh"
RECORDED = ROOT / "tests/data/check/nvidia-smi-p5en.csv"


def _env(host: Path, state: Path) -> dict[str, str]:
    return {
        "PATH": f"{node_tools.tools()}:/usr/bin:/bin",
        node_tools.HOST_ENV: str(host),
        # As the agent's DaemonSet sets them for a p5en (no EFA here: its /sys is not laid
        # out in this test, and the kernel log has no line).
        "FMCTL_EXPECTED_GPUS": "8",
        "FMCTL_IN_CONTAINER": "true",
        "FMCTL_EFA_ENABLED": "false",
        "FMCTL_KERNEL_LOG": "/dev/null",
        "FMCTL_HEALTH_DIR": str(state),
    }


def _detect(host: Path, state: Path) -> str:
    done = subprocess.run(
        ["bash", str(DETECT)], env=_env(host, state), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_stand_in_counts_the_nodes_gpus_and_the_detector_sees_one_fall_off(
    tmp_path: Path,
) -> None:
    host, state = tmp_path / "node", tmp_path / "state"
    node_gpus.lay_out(host, 8)
    # The driver's folders, by the bus locations the recorded p5en's nvidia-smi shows (in
    # upper case there; the driver's procfs prints them with %x).
    recorded = [line.split(", ")[3].lower() for line in RECORDED.read_text().splitlines()]
    listed = sorted(p.name for p in (host / node_gpus.GPUS).iterdir())
    assert [f"0000{bus}" for bus in listed] == recorded
    index = subprocess.run(
        ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
        env=_env(host, state),
        capture_output=True,
        text=True,
        check=True,
    )
    assert index.stdout.split("\n") == [str(i) for i in range(8)] + [""]
    assert _detect(host, state) == ""  # nothing wrong

    assert node_gpus.fall_off(host, 1) == 1
    assert _detect(host, state) == "gpu-count\t7 of 8 GPUs\n"

    asked = subprocess.run(
        ["nvidia-smi", "-q"], env=_env(host, state), capture_output=True, text=True, check=False
    )
    assert asked.returncode == 2 and "not answered here" in asked.stderr
