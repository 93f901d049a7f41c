"""`fmctl setup parallelcluster`: ParallelCluster in a virtualenv of its own.

ParallelCluster pins old libraries (CDK v1, marshmallow, flask), so it never shares fmctl's
environment; fmctl records where it is and drives its `pcluster` command.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from provisioner.state.store import write_private

PCLUSTER_VERSION = "3.16.1"


def record(home: Path, command: list[str]) -> Path:
    """Remember the `pcluster` command (read by drivers.pcluster.find_pcluster)."""
    path = home / "parallelcluster.json"
    write_private(path, json.dumps({"command": command}) + "\n")
    return path


def install(home: Path, version: str = PCLUSTER_VERSION) -> tuple[list[str], list[str]]:
    """Create the virtualenv, install ParallelCluster, record it. Returns the command and
    warnings (Node.js, which `pcluster create-cluster` needs, is checked, not installed)."""
    venv = home / "parallelcluster" / "venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"aws-parallelcluster=={version}",
        ],
        check=True,
    )
    command = [str(venv / "bin" / "pcluster")]
    record(home, command)
    warnings = []
    if shutil.which("node") is None:
        warnings.append(
            "Node.js is not on PATH: `pcluster create-cluster` needs it (AWS CDK);"
            " install Node.js 18 or newer"
        )
    return command, warnings
