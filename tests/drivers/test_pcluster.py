"""The ParallelCluster driver against a fake `pcluster` speaking ParallelCluster's JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from provisioner.drivers.pcluster import (
    ParallelCluster,
    PclusterError,
    failure_text,
    find_pcluster,
)

FAKE = Path(__file__).resolve().parents[1] / "tools/fake_pcluster.py"


def _pc(tmp_path: Path, scenario: str = "ok", steps: int = 2) -> ParallelCluster:
    env = {
        "FAKE_PCLUSTER_STATE": str(tmp_path / "state.json"),
        "FAKE_PCLUSTER_SCENARIO": scenario,
        "FAKE_PCLUSTER_STEPS": str(steps),
        "PATH": "/usr/bin:/bin",
    }
    return ParallelCluster([sys.executable, str(FAKE)], "us-east-1", env=env)


def _config(
    tmp_path: Path, text: str = "Region: us-east-1\nScheduling: {Scheduler: slurm}\n"
) -> Path:
    path = tmp_path / "cluster-config.yaml"
    path.write_text(text)
    return path


def _calls(tmp_path: Path) -> list[list[str]]:
    calls: list[list[str]] = json.loads((tmp_path / "state.json").read_text())["calls"]
    return calls


def test_dryrun_success_despite_exit_status_1(tmp_path: Path) -> None:
    result = _pc(tmp_path).dryrun("c1", _config(tmp_path))
    assert result.ok and result.messages[0].level == "WARNING"


def test_dryrun_reports_validator_errors(tmp_path: Path) -> None:
    result = _pc(tmp_path, "invalid-config").dryrun("c1", _config(tmp_path))
    assert not result.ok
    assert (
        result.messages[0].type == "EfaValidator" and "queue 'train'" in result.messages[0].message
    )


def test_placeholders_are_refused_like_parallelcluster_does(tmp_path: Path) -> None:
    config = _config(tmp_path, "HeadNode: {Networking: {SubnetId: <fmctl:publicSubnetId>}}\n")
    result = _pc(tmp_path).dryrun("c1", config)
    assert not result.ok and "pattern" in result.messages[0].message


def test_create_describe_delete_sequence(tmp_path: Path) -> None:
    pc = _pc(tmp_path, steps=2)
    assert pc.describe("c1") is None
    summary = pc.create("c1", _config(tmp_path))
    assert summary["clusterStatus"] == "CREATE_IN_PROGRESS"
    first = pc.describe("c1")
    assert first is not None and first["clusterStatus"] == "CREATE_IN_PROGRESS"
    done = pc.describe("c1")
    assert done is not None and done["clusterStatus"] == "CREATE_COMPLETE"
    assert done["headNode"]["instanceId"].startswith("i-")
    with pytest.raises(PclusterError, match="already exists"):
        pc.create("c1", _config(tmp_path))
    pc.delete("c1")
    going = pc.describe("c1")
    assert going is not None and going["clusterStatus"] == "DELETE_IN_PROGRESS"
    assert pc.describe("c1") is None
    pc.delete("c1")  # already gone: not an error
    assert [c[0] for c in _calls(tmp_path)].count("delete-cluster") == 2


def test_failure_names_the_code_and_the_logs(tmp_path: Path) -> None:
    pc = _pc(tmp_path, "bootstrap-failure", steps=1)
    pc.create("c1", _config(tmp_path))
    failed = pc.describe("c1")
    assert failed is not None and failed["clusterStatus"] == "CREATE_FAILED"
    text = failure_text("c1", failed)
    assert "HeadNodeBootstrapFailure" in text and "/aws/parallelcluster/c1-" in text


def test_update_dryrun_says_when_the_fleet_must_stop(tmp_path: Path) -> None:
    pc = _pc(tmp_path, "update-needs-stop")
    pc.create("c1", _config(tmp_path))
    same = pc.update_dryrun("c1", _config(tmp_path))
    assert same.ok and not same.needs_fleet_stop and not same.changes  # "No changes found"
    bigger = pc.update_dryrun("c1", _config(tmp_path, "Region: us-east-1\nMaxCount: 32\n"))
    assert not bigger.ok and bigger.needs_fleet_stop
    assert "MaxCount" in bigger.parameters


def test_update_allowed_runs_and_completes(tmp_path: Path) -> None:
    pc = _pc(tmp_path, steps=1)
    pc.create("c1", _config(tmp_path))
    pc.describe("c1")
    changed = _config(tmp_path, "Region: us-east-1\nScaledownIdletime: 5\n")
    plan = pc.update_dryrun("c1", changed)
    assert plan.ok and plan.parameters == ["ScaledownIdletime", "Scheduling"]
    assert pc.update("c1", changed)["clusterStatus"] == "UPDATE_IN_PROGRESS"
    done = pc.describe("c1")
    assert done is not None and done["clusterStatus"] == "UPDATE_COMPLETE"


def test_garbage_output_is_an_error_not_a_crash(tmp_path: Path) -> None:
    pc = ParallelCluster(["/bin/echo", "not json"], "us-east-1")
    with pytest.raises(PclusterError, match=r"no JSON|nothing useful"):
        pc.describe("c1")
    missing = ParallelCluster(["/nonexistent/pcluster"], "us-east-1")
    with pytest.raises(PclusterError, match="could not run"):
        missing.describe("c1")


def test_find_pcluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FMCTL_PCLUSTER", "/opt/pc/bin/pcluster --debug")
    assert find_pcluster(tmp_path) == ["/opt/pc/bin/pcluster", "--debug"]
    monkeypatch.delenv("FMCTL_PCLUSTER")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_pcluster(tmp_path) is None
    exe = tmp_path / "venv-pcluster"
    exe.write_text("")
    (tmp_path / "parallelcluster.json").write_text(json.dumps({"command": [str(exe)]}))
    assert find_pcluster(tmp_path) == [str(exe)]


def test_setup_records_where_pcluster_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.ops.setup import record

    exe = tmp_path / "pc" / "bin" / "pcluster"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    path = record(tmp_path, [str(exe)])
    assert path.stat().st_mode & 0o777 == 0o600
    monkeypatch.delenv("FMCTL_PCLUSTER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_pcluster(tmp_path) == [str(exe)]


def test_setup_installs_into_its_own_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from provisioner.ops import setup

    ran: list[list[str]] = []

    def fake_run(argv: list[str], check: bool) -> None:
        ran.append(argv)
        if "venv" in argv:
            (Path(argv[-1]) / "bin").mkdir(parents=True)
            (Path(argv[-1]) / "bin" / "python").write_text("")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(setup.shutil, "which", lambda name: None)
    command, warnings = setup.install(tmp_path, "3.16.1")
    assert ran[0][1:3] == ["-m", "venv"]
    assert ran[1][-1] == "aws-parallelcluster==3.16.1"
    assert ran[1][0] == str(tmp_path / "parallelcluster/venv/bin/python")  # not fmctl's
    assert command == [str(tmp_path / "parallelcluster/venv/bin/pcluster")]
    assert warnings and "Node.js" in warnings[0]
