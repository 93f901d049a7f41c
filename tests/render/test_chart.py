"""The training chart through a real helm: lint and template with rendered values, then the
official schemas on what it produces."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from provisioner.drivers import yamlio
from tests.conftest import fetched_tool
from tests.render.helpers import CASE_IDS, CASES, rendered

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/fmctl-training"
K8S_CASES = [(e, s) for e, s in CASES if s == "kubernetes"]
K8S_IDS = [i for i in CASE_IDS if i.endswith(":kubernetes")]


def _helm() -> str:
    return fetched_tool("helm")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_helm(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **os.environ,
            "HELM_CACHE_HOME": "/tmp/fmctl-helm",
            "HELM_CONFIG_HOME": "/tmp/fmctl-helm",
        },
    )


@pytest.mark.parametrize(("example", "scheduler"), K8S_CASES, ids=K8S_IDS)
def test_chart_with_rendered_values(tmp_path: Path, example: Path, scheduler: str) -> None:
    files = rendered(example, scheduler).files
    name = yaml.safe_load(example.read_text())["metadata"]["name"]
    values = tmp_path / "values.yaml"
    values.write_text(files[f"charts/values-{name}.yaml"])
    lint = _run("lint", "--strict", str(CHART), "-f", str(values))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    out = _run("template", "run1", str(CHART), "-f", str(values), "--namespace", "training")
    assert out.returncode == 0, out.stderr
    docs = [d for d in yamlio.load_all(out.stdout) if d]
    assert {d["kind"] for d in docs} == {"Job", "Service"}
    for doc in docs:
        kubernetes_validate.validate(doc, "1.33.0", strict=True)
    job = next(d for d in docs if d["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    chart_values = yaml.safe_load(values.read_text())
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == chart_values["gpusPerNode"]
    assert limits["vpc.amazonaws.com/efa"] == chart_values["efaPerNode"] > 0
    assert limits["hugepages-2Mi"] == "5Gi"
    assert job["spec"]["completionMode"] == "Indexed"
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert {"shm", "fsx"} <= mounts


def test_chart_refuses_values_without_image(tmp_path: Path) -> None:
    out = _run("template", "run1", str(CHART))
    assert out.returncode != 0 and "set image" in out.stderr
