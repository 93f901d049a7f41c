"""The campaign's sample (tests/sampling.py): successive seeds try every point, each run
crosses every backend, a failed point says how to replay it, and the in-process CLI gives a
subprocess's outcome."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import sampling
from tests.conftest import ROOT
from tests.tools import inprocess

pytest_plugins = ["pytester"]


@pytest.mark.parametrize("stride", [1, 3, 6])
def test_successive_seeds_cover_every_point_once(stride: int) -> None:
    points = range(34)
    slices = [[i for i in points if sampling.keep(i, stride, seed)] for seed in range(stride)]
    assert sorted(i for part in slices for i in part) == list(points)
    # And the next seeds start the round again.
    assert [i for i in points if sampling.keep(i, stride, stride)] == slices[0]


CAMPAIGN = """
import pytest

POINTS = [(p, "local") for p in range(1, 13)] + [(p, "s3") for p in (1, 7, 12)]


@pytest.mark.campaign(stride=6, by=("backend",))
@pytest.mark.parametrize(("point", "backend"), POINTS)
def test_point(point, backend):
    assert (point, backend) != (8, "local")
"""


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, **env: str
) -> pytest.RunResult:
    """A campaign test run with this suite's own hooks (tests/conftest.py as a plugin)."""
    monkeypatch.delenv("FMCTL_CAMPAIGN", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_campaign=CAMPAIGN)
    pytester.makeini("[pytest]\nmarkers =\n  campaign: sampled\n  scenario: tier\n")
    return pytester.runpytest_subprocess("-p", "tests.conftest", "-p", "no:cacheprovider")


def test_a_seed_keeps_one_slice_of_each_backend(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, FMCTL_CAMPAIGN_SEED="1")
    result.assert_outcomes(passed=2, failed=1)  # local 2 and 8 (which fails), s3 7
    result.stdout.fnmatch_lines(["*campaign: seed 1*", "*12 deselected*"])
    # The failure says the seed and the command that runs that point alone.
    result.stdout.fnmatch_lines(
        ["*seed 1; replay this point alone:*", "*FMCTL_CAMPAIGN=all*test_point?8-local?*"]
    )


def test_every_point_when_asked(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch, FMCTL_CAMPAIGN="all")
    result.assert_outcomes(passed=14, failed=1)
    result.stdout.fnmatch_lines(["*campaign: every point*"])


def test_the_seed_is_the_commit_count_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FMCTL_CAMPAIGN_SEED", raising=False)
    done = subprocess.run(
        ["git", "rev-list", "--count", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    expected = int(done.stdout) if done.returncode == 0 else 0
    assert sampling.seed() == expected


def test_in_process_runs_give_a_subprocess_outcome(tmp_path: Path) -> None:
    good = inprocess.fmctl("validate", "-f", str(ROOT / "examples/p5-slurm-capacity-block.yaml"))
    assert good.returncode == 0, good.stdout + good.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: fmctl.dev/v1alpha1\nkind: Cluster\nmetadata: {name: 1}\n")
    bad = inprocess.fmctl("validate", "-f", str(broken))
    assert bad.returncode == 1 and f"{broken}:" in bad.stdout + bad.stderr
    # Variables set for one run are gone after it; the working directory comes back.
    here = Path.cwd()
    seen = inprocess.fmctl(
        "validate", "-f", "-", stdin="x: [", env={"FMCTL_PROBE": "1"}, cwd=tmp_path
    )
    assert seen.returncode == 1 and "<stdin>:" in seen.stdout + seen.stderr
    assert "FMCTL_PROBE" not in __import__("os").environ and Path.cwd() == here


def test_an_uncaught_exception_prints_a_traceback_and_exits_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import provisioner.cli.main as cli_main

    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli_main.cli, "main", boom)
    done = inprocess.fmctl("validate", "-f", "x.yaml")
    assert (
        done.returncode == 1 and "Traceback" in done.stderr and "RuntimeError: boom" in done.stderr
    )
