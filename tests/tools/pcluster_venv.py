"""Run one of tests/tools' scripts under the ParallelCluster virtualenv (.venv-pcluster,
which `make tools` builds: ParallelCluster pins old dependencies) and read its JSON."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PCLUSTER_PY = ROOT / ".venv-pcluster/bin/python"


def run_json(script: str, *args: str) -> Any:
    """The last line of ``tests/tools/SCRIPT ARGS...``'s output, as JSON. Skips (fails in CI)
    without the virtualenv."""
    if not PCLUSTER_PY.exists():
        if os.environ.get("CI"):
            pytest.fail("the ParallelCluster virtualenv is missing: `make tools` builds it")
        pytest.skip("no .venv-pcluster here (`make tools` builds it)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    # ParallelCluster may make describe calls: no credentials and a dead loopback endpoint,
    # so they fail at once and nothing can leave the machine.
    env.update(
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
    )
    result = subprocess.run(
        [str(PCLUSTER_PY), str(ROOT / "tests/tools" / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
