"""cost.idle as rendered: on Slurm with scale-down, the on-demand pool's nodes all dynamic
(ParallelCluster's MinCount 0, PCS's minInstanceCount 0) and Slurm's own idle time set to
cost.idle.after (ScaledownIdletime, scaleDownIdleTimeInSeconds), through ParallelCluster's
own schema; the Capacity Block pool, paid anyway, stays whole; GpuNodeIdle waits the same
time on both schedulers, and promtool accepts the rules so changed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.render.helpers import fill_all, rendered
from tests.tools.pcluster_venv import run_json

EXAMPLE = ROOT / "examples/p5-slurm-capacity-block.yaml"
IDLE = {"after": "2h", "action": "scale-down"}


def _spec(tmp_path: Path, idle: dict[str, str], **slurm: Any) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["compute"]["gpuPools"].append({"name": "debug", "instanceType": "p5.48xlarge", "count": 2})
    data["cost"] = {"idle": idle}
    data["slurm"] = {**data["slurm"], **slurm}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _idle_rules(text: str) -> list[str]:
    """GpuNodeIdle's `for`, each rule of it (Slurm's and Kubernetes')."""
    groups = yaml.safe_load(text)["groups"]
    return [
        f"for: {r['for']}" for g in groups for r in g["rules"] if r.get("alert") == "GpuNodeIdle"
    ]


def test_parallelcluster_pool_scales_down_after_the_idle_time(tmp_path: Path) -> None:
    files = rendered(_spec(tmp_path, IDLE), "slurm").files
    text = files["parallelcluster/cluster-config.yaml"]
    config = yaml.safe_load(text)
    assert config["Scheduling"]["SlurmSettings"]["ScaledownIdletime"] == 120
    queues = {q["Name"]: q["ComputeResources"][0] for q in config["Scheduling"]["SlurmQueues"]}
    assert (queues["debug"]["MinCount"], queues["debug"]["MaxCount"]) == (0, 2)
    assert (queues["train"]["MinCount"], queues["train"]["MaxCount"]) == (16, 16)
    path = tmp_path / "cluster-config.yaml"
    path.write_text(fill_all(text))
    assert run_json("pcluster_schema.py", str(path)) == {str(path): None}
    assert _idle_rules(files["slurm/monitoring/alert-rules.yml"]) == ["for: 2h", "for: 2h"]


def test_pcs_pool_scales_down_after_the_idle_time(tmp_path: Path) -> None:
    spec = _spec(tmp_path, IDLE, provider="pcs", topologyAware=False)
    files = rendered(spec, "slurm").files
    cluster = json.loads(files["pcs/cluster.json"])
    assert cluster["slurmConfiguration"]["scaleDownIdleTimeInSeconds"] == 7200
    debug = json.loads(files["pcs/compute-node-groups/debug.json"])
    train = json.loads(files["pcs/compute-node-groups/train.json"])
    assert debug["scalingConfiguration"] == {"minInstanceCount": 0, "maxInstanceCount": 2}
    assert train["scalingConfiguration"] == {"minInstanceCount": 16, "maxInstanceCount": 16}


def test_alert_only_changes_nothing_but_the_wait(tmp_path: Path) -> None:
    files = rendered(_spec(tmp_path, {"after": "90m"}), "slurm").files
    config = yaml.safe_load(files["parallelcluster/cluster-config.yaml"])
    queues = {q["Name"]: q["ComputeResources"][0] for q in config["Scheduling"]["SlurmQueues"]}
    assert queues["debug"]["MinCount"] == 2  # static, as without cost.idle
    assert config["Scheduling"]["SlurmSettings"]["ScaledownIdletime"] == 10
    rules = files["slurm/monitoring/alert-rules.yml"]
    assert _idle_rules(rules) == ["for: 90m", "for: 90m"]
    assert "every GPU idle for 90m" in rules
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool not installed (`make tools` installs Debian's prometheus)")
    path = tmp_path / "alert-rules.yml"
    path.write_text(rules)
    done = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_kubernetes_rules_wait_the_same(tmp_path: Path) -> None:
    files = rendered(_spec(tmp_path, {"after": "45m"}), "kubernetes").files
    config = next(v for k, v in files.items() if k.endswith("prometheus/config.yaml"))
    assert config.count("for: 45m") == 2 and "for: 30m" not in config
