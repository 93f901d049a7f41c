"""Waits against an endpoint that is not AWS follow its pace: FMCTL_TIME_SCALE, or the
endpoint's own word (a sandbox another home started answers its Health call with its
scale), else AWS's. A second home reaching the sandbox through AWS_ENDPOINT_URL (as a
teammate rehearsing against one emulator would) runs at the sandbox's speed."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from provisioner.drivers.endpoint_pace import BadTimeScale
from provisioner.ops.target import target_for
from tests.engine.harness import SCALE, Sandbox, raw_leftovers, region_of, spec_file


def _as_client(monkeypatch: pytest.MonkeyPatch, sandbox: Sandbox) -> None:
    """This process as a home that knows the sandbox only as an endpoint."""
    key, secret = sandbox.credentials
    monkeypatch.setenv("AWS_ENDPOINT_URL", sandbox.endpoint)
    monkeypatch.setenv("AWS_CA_BUNDLE", sandbox.info["ca"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)


def test_the_sandbox_says_its_pace(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert target_for("us-east-1", tmp_path, False).time_scale == 1.0  # AWS itself
    _as_client(monkeypatch, sandbox)
    assert target_for("us-east-1", tmp_path, False).time_scale == SCALE
    monkeypatch.setenv("FMCTL_TIME_SCALE", "0.25")
    assert target_for("us-east-1", tmp_path, False).time_scale == 0.25
    for bad in ("fast", "0", "2"):
        monkeypatch.setenv("FMCTL_TIME_SCALE", bad)
        with pytest.raises(BadTimeScale, match="not a factor in"):
            target_for("us-east-1", tmp_path, False)
    monkeypatch.delenv("FMCTL_TIME_SCALE")
    # An endpoint that says nothing (nobody listens there): AWS's pace.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"https://127.0.0.1:{port}")
    assert target_for("us-east-1", tmp_path, False).time_scale == 1.0


def test_another_home_runs_at_the_sandboxs_pace(sandbox: Sandbox, tmp_path: Path) -> None:
    """A cluster made and torn down from a home that has no sandbox of its own, only the
    endpoint: as fast as from the sandbox's home (the waits of a PCS cluster at AWS's pace
    would take about an hour; the test's own limit is minutes), and a bad setting is said
    plainly."""
    name = "e2e-endpoint-pace"
    spec = spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml")
    region = region_of(spec)
    key, secret = sandbox.credentials
    home = tmp_path / "elsewhere"
    env = {
        "FMCTL_HOME": str(home),
        "AWS_ENDPOINT_URL": sandbox.endpoint,
        "AWS_CA_BUNDLE": sandbox.info["ca"],
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    made = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert made.returncode == 0, made.stdout + made.stderr
    seen = sandbox.fmctl("status", name, "--region", region, timeout=120, **env)
    assert seen.returncode == 0 and f"{name} in {region}" in seen.stdout, seen.stderr
    wrong = sandbox.fmctl("status", name, "--region", region, FMCTL_TIME_SCALE="x", **env)
    assert wrong.returncode == 1 and "FMCTL_TIME_SCALE='x' is not a factor" in wrong.stderr
    down = sandbox.fmctl("down", name, "--region", region, "--yes", timeout=180, **env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
