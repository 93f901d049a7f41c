"""The team-state commands' bad input and local cases (no AWS call made: each fails or
answers before one)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.helpers import fmctl

NO_AWS = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_ACCESS_KEY_ID": "none",
    "AWS_SECRET_ACCESS_KEY": "none",
    # An endpoint nothing listens on: a call that got this far would fail loudly.
    "AWS_ENDPOINT_URL": "https://127.0.0.1:9",
}


def test_a_bad_state_url_is_refused_with_how_to_write_it(tmp_path: Path) -> None:
    env = {**NO_AWS, "FMCTL_HOME": str(tmp_path), "FMCTL_STATE": "s3://Bad_Bucket/x"}
    result = fmctl("down", "c01", "--yes", env=env)
    assert result.returncode == 1
    assert "not an S3 bucket name" in result.stderr and "s3://BUCKET/PREFIX" in result.stderr
    assert "Traceback" not in result.stderr


def test_state_init_needs_an_s3_url(tmp_path: Path) -> None:
    result = fmctl("state", "init", "team-state", env={**NO_AWS, "FMCTL_HOME": str(tmp_path)})
    assert result.returncode == 1 and "s3://BUCKET/PREFIX" in result.stderr
    push = fmctl("state", "push", "c01", env={**NO_AWS, "FMCTL_HOME": str(tmp_path)})
    assert push.returncode == 1 and "FMCTL_STATE" in push.stderr


def test_local_history_and_unlock_of_a_cluster_never_run(tmp_path: Path) -> None:
    env = {**NO_AWS, "FMCTL_HOME": str(tmp_path)}
    shown = fmctl("history", "c01", env=env)
    assert shown.returncode == 0 and "no recorded runs" in shown.stdout
    free = fmctl("unlock", "c01", env=env)
    assert free.returncode == 0 and "not locked" in free.stdout
    assert not (tmp_path / "clusters").exists(), "reads wrote nothing"


def test_a_spec_whose_state_section_is_wrong_is_located(tmp_path: Path) -> None:
    spec = (Path(__file__).resolve().parents[2] / "examples/p5en-eks-fsx-s3.yaml").read_text()
    path = tmp_path / "c.yaml"
    path.write_text(spec + "state:\n  backend: s3\n")
    result = fmctl("up", "-f", str(path), "--yes", env={**NO_AWS, "FMCTL_HOME": str(tmp_path)})
    assert result.returncode == 1
    assert "state.backend s3 needs a bucket" in result.stderr
    assert f"{path}:" in result.stderr and "fmctl state init" in result.stderr
