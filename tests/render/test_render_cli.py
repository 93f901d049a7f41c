"""`fmctl render` as users run it."""

from __future__ import annotations

from pathlib import Path

from tests.cli.helpers import ROOT, fmctl


def test_render_writes_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = fmctl("render", "-f", str(ROOT / "examples/p5en-eks-fsx-s3.yaml"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "placeholder(s) `fmctl up` fills" in result.stdout
    assert (out / "aws/launch-templates/gpu.yaml").is_file()
    assert (out / "kubernetes/kustomization.yaml").is_file()
    assert "<fmctl:privateSubnetId>" in (out / "PLACEHOLDERS.md").read_text()
    again = fmctl(
        "render",
        "-f",
        str(ROOT / "examples/p5en-eks-fsx-s3.yaml"),
        "-o",
        str(out),
        "--scheduler",
        "slurm",
    )
    assert again.returncode == 0
    assert ("removed" in again.stdout and not (out / "aws").exists()) or not list(
        (out / "aws").rglob("*.yaml")
    )
    assert (out / "parallelcluster/cluster-config.yaml").is_file()


def test_invalid_spec_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = fmctl("render", "-f", str(ROOT / "tests/data/demo-broken.yaml"), "-o", str(out))
    assert result.returncode == 1
    assert ":13:21: error:" in result.stderr
    assert not out.exists()
