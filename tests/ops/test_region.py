"""Where a command about a named cluster runs when --region does not say: the cluster's
recorded region, the AWS environment, the profile (botocore's own lookup), else an error
that says how to set one — never a silent us-east-1."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.ops.region import RegionUnknown, resolve_region


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No AWS settings at all: an empty config file and no AWS_* variables."""
    import os

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    config = tmp_path / "aws-config"
    config.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    return config


def _record(home: Path, name: str, region: str) -> None:
    folder = home / "clusters" / name
    folder.mkdir(parents=True)
    (folder / "spec.yaml").write_text(f"metadata: {{name: {name}, region: {region}}}\n")


def test_the_order(clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    clean.write_text("[default]\nregion = ap-south-1\n[profile team]\nregion = sa-east-1\n")
    assert resolve_region(None, "c1", home, sandbox=False) == "ap-south-1"
    monkeypatch.setenv("AWS_PROFILE", "team")
    assert resolve_region(None, "c1", home, sandbox=False) == "sa-east-1"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert resolve_region(None, "c1", home, sandbox=False) == "eu-central-1"
    monkeypatch.setenv("AWS_REGION", "eu-north-1")
    assert resolve_region(None, "c1", home, sandbox=False) == "eu-north-1"
    _record(home, "c1", "us-west-2")
    assert resolve_region(None, "c1", home, sandbox=False) == "us-west-2"
    assert resolve_region(None, "c2", home, sandbox=False) == "eu-north-1"
    assert resolve_region("ca-central-1", "c1", home, sandbox=False) == "ca-central-1"


def test_nothing_configured_is_an_error_with_the_way_out(clean: Path, tmp_path: Path) -> None:
    with pytest.raises(RegionUnknown) as caught:
        resolve_region(None, "c1", tmp_path, sandbox=False)
    assert "no region for cluster c1" in str(caught.value)
    assert caught.value.hint is not None and "--region" in caught.value.hint


def test_the_sandbox_never_reads_the_profile(clean: Path, tmp_path: Path) -> None:
    clean.write_text("[default]\nregion = ap-south-1\n")
    with pytest.raises(RegionUnknown):
        resolve_region(None, "c1", tmp_path, sandbox=True)


def test_an_unknown_profile_gives_no_region(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "nobody")
    with pytest.raises(RegionUnknown):
        resolve_region(None, None, tmp_path, sandbox=False)


def test_a_command_without_a_region_stops_before_any_call(clean: Path, tmp_path: Path) -> None:
    """`fmctl status NAME` with nothing configured: exit 1, the message and hint, and no
    AWS client made (no credentials exist here; a call would fail differently)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(clean),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        FMCTL_HOME=str(tmp_path / "home"),
    )
    done = subprocess.run(
        [sys.executable, "-m", "provisioner", "status", "nowhere"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("error: ") and "no region for cluster nowhere" in done.stderr
    assert "hint: pass --region REGION" in done.stderr and "Traceback" not in done.stderr


def test_a_down_in_the_wrong_region_keeps_the_local_state(tmp_path: Path) -> None:
    """`down NAME --region us-east-1` finding nothing, for a cluster applied in us-east-2:
    its spec, events and kubeconfig entry stay (they are a live cluster's), and it says
    where the cluster is; in its own region the same call removes them."""
    from provisioner.ops.kubeconfig import forget_locally
    from provisioner.ops.target import Target
    from provisioner.state.store import ClusterState

    name = "p5-slurm"
    ClusterState(tmp_path, name).save_spec(
        f"apiVersion: fmctl.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}, "
        "region: us-east-2}\n"
    )
    folder = tmp_path / "clusters" / name
    assert folder.is_dir()
    said = forget_locally(Target("us-east-1", tmp_path), name, keep_state=False)
    assert folder.is_dir() and (folder / "spec.yaml").is_file()
    assert said and "applied in us-east-2, not us-east-1" in said[0]
    assert "--region us-east-2" in said[0]
    said = forget_locally(Target("us-east-2", tmp_path), name, keep_state=False)
    assert not folder.exists() and any("removed the local state" in s for s in said)


def test_a_first_up_cut_short_still_records_its_region(clean: Path, tmp_path: Path) -> None:
    """No spec was applied yet, but the run wrote where it works before its first change."""
    from provisioner.state.store import ClusterState

    home = tmp_path / "home"
    state = ClusterState(home, "c1")
    state.save_region("ap-northeast-2")
    assert resolve_region(None, "c1", home, sandbox=False) == "ap-northeast-2"
    # The applied spec, once there, is the record.
    (home / "clusters" / "c1" / "spec.yaml").write_text("metadata: {name: c1, region: eu-west-1}\n")
    assert resolve_region(None, "c1", home, sandbox=False) == "eu-west-1"


def test_the_team_state_is_asked_only_without_a_local_record(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def shared() -> str:
        asked.append("c1")
        return "us-east-2"

    home = tmp_path / "home"
    monkeypatch.setenv("AWS_REGION", "eu-north-1")
    assert resolve_region(None, "c1", home, sandbox=False, shared=shared) == "us-east-2"
    assert asked == ["c1"]
    _record(home, "c1", "us-west-2")
    assert resolve_region(None, "c1", home, sandbox=False, shared=shared) == "us-west-2"
    assert resolve_region("ca-central-1", "c1", home, sandbox=False, shared=shared)
    assert asked == ["c1"]
