"""verify-node.sh as the EKS verify gate's Job containers run it (FMCTL_VERIFY_SCHEDULER=
kubernetes; templates/kubernetes/health-verify/job.yaml.j2): its settings from the
environment, its report where it is told, no boot record and no Slurm hold, its exit status
the verdict. The node's tools print the recorded outputs of tests/data; a container is the
process's own environment, so the script runs here as the container would run it (the
stand-in node runs it as ParallelCluster does: tests/slurm/test_standin_health.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.check import fakes
from tests.conftest import ROOT

LIB = ROOT / "slurm/lib"
DATA = ROOT / "tests/data/check"

#: nvidia-smi answering the gate's questions from a p5en's recorded outputs ($CSV names one).
NVIDIA_SMI = """#!/bin/bash
case "$*" in
  *--query-gpu=index,ecc.errors.uncorrected.volatile.total*)
    awk -F', ' '/^[0-9]/ { print $1 ", " $6; next } { print }' "$DATA/$CSV" ;;
  "nvlink -s") cat "$DATA/nvidia-smi-nvlink-p5-healthy.txt" ;;
  *) ;;
esac
"""


def _run(tmp_path: Path, dcgmi: str, **env: str) -> subprocess.CompletedProcess[str]:
    tools = fakes.install(
        tmp_path / "bin",
        {
            "nvidia-smi": NVIDIA_SMI,
            "dcgmi": dcgmi,
            "logger": '#!/bin/sh\necho logger >> "$CALLS"\n',
        },
    )
    settings = {
        "PATH": f"{tools}:/usr/bin:/bin",
        "DATA": str(DATA),
        "CSV": "nvidia-smi-p5en.csv",
        "CALLS": str(tmp_path / "calls"),
        "FMCTL_VERIFY_SCHEDULER": "kubernetes",
        "FMCTL_NODE_ENV": "/dev/null",
        "FMCTL_HEALTH_DIR": str(tmp_path / "health"),
        "FMCTL_EXPECTED_GPUS": "8",
        "FMCTL_EXPECTED_EFA": "0",
        "FMCTL_HEALTH_VERIFY_DCGM_LEVEL": "2",
        **env,
    }
    return subprocess.run(
        ["bash", str(LIB / "verify-node.sh")],
        env=settings,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _stamp() -> float | None:
    """When this machine's boot record was written (None: there is none)."""
    record = Path("/run/fmctl/verified")
    return record.stat().st_mtime if record.exists() else None


def test_a_healthy_node_passes_and_leaves_no_boot_record(tmp_path: Path) -> None:
    before = _stamp()
    done = _run(tmp_path, f'#!/bin/sh\ncat "{DATA}/dcgmi-diag-healthy.json"\n')
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok gpus: 8 of 8" in done.stdout
    assert "ok dcgm: level 2 diagnostic passed" in done.stdout
    assert (tmp_path / "health/verify.txt").read_text() == done.stdout
    assert _stamp() == before  # no boot record, no Slurm hold
    assert not (tmp_path / "calls").exists()


def test_a_gpu_off_the_bus_fails(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        f'#!/bin/sh\ncat "{DATA}/dcgmi-diag-healthy.json"\n',
        CSV="nvidia-smi-lost-gpu.csv",
    )
    assert done.returncode == 1
    assert "FAIL gpus: 7 of 8 (Unable to determine the device handle" in done.stdout
    assert not (tmp_path / "calls").exists()  # no syslog line from a container


def test_a_diagnostic_that_does_not_finish_fails(tmp_path: Path) -> None:
    """Before, a diagnostic killed at its deadline printed no JSON and was said as `skip`:
    the node passed. A GPU whose diagnostic does not end is not a pass."""
    done = _run(tmp_path, "#!/bin/sh\nsleep 30\n", FMCTL_HEALTH_VERIFY_DCGM_TIMEOUT="1")
    assert done.returncode == 1, done.stdout
    assert "FAIL dcgm: level 2 diagnostic did not finish in 1 s" in done.stdout
