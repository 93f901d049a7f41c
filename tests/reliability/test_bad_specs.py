"""Bad input: every broken spec gives a located error, exit 1, no traceback, and no AWS call.

The corpus runs through the CLI in this process (tests/tools/inprocess.py: the console
script's entry point, its exit status and streams), where a subprocess per spec proved
nothing more and took six minutes of the suite; the inputs that cannot be files in the
repository, and a sample of the corpus, still run as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.engine.harness import ROOT, Sandbox, fmctl_calls
from tests.reliability.campaign import tally
from tests.tools import inprocess

CORPUS = sorted((ROOT / "tests/data/bad-specs").glob("*.yaml"))


def _expected(path: Path) -> set[str]:
    for line in path.read_bytes().decode("utf-8", "replace").splitlines()[:3]:
        if line.startswith("# expect:"):
            return {c.strip() for c in line.split(":", 1)[1].split(",") if c.strip()}
    raise AssertionError(f"{path.name} has no '# expect:' line")


def _fmctl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run(
        [sys.executable, "-m", "provisioner", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        env={**env, "AWS_EC2_METADATA_DISABLED": "true"},
        timeout=60,
        check=False,
    )


def _special_cases(tmp: Path) -> list[Path]:
    big = tmp / "ten-megabytes.yaml"
    big.write_text("apiVersion: fmctl.dev/v1alpha1\n" + "# padding\n" * 1_100_000)
    loop = tmp / "loop.yaml"
    loop.symlink_to(tmp / "loop2.yaml")
    (tmp / "loop2.yaml").symlink_to(loop)
    folder = tmp / "a-directory.yaml"
    folder.mkdir()
    return [big, loop, folder, tmp / "missing.yaml"]


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 60


def _in_process(*args: str) -> subprocess.CompletedProcess[str]:
    return inprocess.fmctl(*args, cwd=ROOT)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_located_error_exit_1_no_traceback(path: Path) -> None:
    _located(path, _in_process)


#: Every tenth spec of the corpus again as a real process (the console script itself).
PROCESS_SAMPLE = CORPUS[::10]


@pytest.mark.parametrize("path", PROCESS_SAMPLE, ids=lambda p: p.stem)
def test_located_error_as_a_process(path: Path) -> None:
    _located(path, _fmctl)


def _located(path: Path, run: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """Exit 1, no traceback, every error located in the file, the expected codes, and the
    text form naming file:line:col."""
    result = run("validate", "-f", str(path), "-o", "json")
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    problems = json.loads(result.stdout)["problems"]
    errors = [p for p in problems if p["level"] == "error"]
    assert errors
    for p in errors:
        assert p["file"] == str(path) and p["line"] >= 1 and p["column"] >= 1, p
        assert p["message"]
    assert _expected(path) <= {p["code"] for p in errors}
    # The text form names the file, line and column too, with a caret under the value.
    text = run("validate", "-f", str(path))
    assert f"{path}:{errors[0]['line']}:{errors[0]['column']}: error:" in text.stdout + text.stderr


def test_inputs_that_cannot_be_files_in_the_repository(tmp_path: Path) -> None:
    for path in _special_cases(tmp_path):
        result = _fmctl("validate", "-f", str(path))
        assert result.returncode == 1, (path.name, result.stdout)
        out = result.stdout + result.stderr
        assert "Traceback" not in out and str(path) in out, (path.name, out)
    piped = _fmctl("validate", "-f", "-", stdin="kind: Cluster\n\tname: x\n")
    assert piped.returncode == 1 and "<stdin>:2:1" in piped.stdout + piped.stderr


def test_every_rule_has_a_bad_spec() -> None:
    from provisioner.validate.rules import all_codes

    covered = set().union(*(_expected(p) for p in CORPUS))
    # Warnings only (a spec with them is valid): the corpus has them beside errors.
    warnings = {
        "cidr-world-open",
        "api-private",
        "head-node-ssh",
        "pcs-region",
        "ultraserver-eks-nvlink",
        "ultraserver-topology",
        "pcs-os",
        "pcs-lacks",
        "fsx-two-way",
        "health-dcgm-extended",
    }
    missing = all_codes() - covered - warnings
    assert missing == set(), f"rules without a broken spec in tests/data/bad-specs: {missing}"


def test_up_makes_no_aws_call_for_any_bad_spec(sandbox: Sandbox, tmp_path: Path) -> None:
    cases = [*CORPUS, *_special_cases(tmp_path)]
    tally.add(bad_specs_tried=len(cases))
    before = len(sandbox.requests())

    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("AWS_")}
    env.update(FMCTL_HOME=str(sandbox.home), AWS_EC2_METADATA_DISABLED="true")

    def up(path: Path) -> tuple[str, int, str, str]:
        result = inprocess.fmctl("up", "-f", str(path), "--sandbox", "--yes", env=env, cwd=ROOT)
        return path.name, result.returncode, result.stdout, result.stderr

    for name, code, out, err in map(up, cases):
        assert code == 1, (name, out)
        assert "Traceback" not in err, name
    # And a few as the real process, against the same emulator.
    with ThreadPoolExecutor(3) as pool:
        for code, name in pool.map(
            lambda p: (sandbox.fmctl("up", "-f", str(p), "--sandbox", "--yes").returncode, p),
            PROCESS_SAMPLE,
        ):
            assert code == 1, name
    # fmctl's calls: a cluster another test has up in this emulator runs node agents.
    calls = fmctl_calls(sandbox.requests()[before:])
    assert calls == [], f"{len(calls)} AWS calls for bad specs: {calls[:3]}"
