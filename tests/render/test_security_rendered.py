"""Security defaults of what fmctl renders, each with a test: least-privilege IAM, no secret
in a rendered file, and checkov on the rendered Kubernetes manifests with every finding
fixed or justified in tests/data/checkov-skips.yaml. Static (renders only): in `make check`
as in `make test`. The same defaults on a live cluster: tests/reliability/
test_security_defaults.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from provisioner.blueprint.infra import INLINE, ROLES
from tests.conftest import ROOT

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
AUTOSCALED = ROOT / "tests/data/specs/eks-autoscaled.yaml"
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
SKIPS: dict[str, dict[str, object]] = yaml.safe_load(
    (ROOT / "tests/data/checkov-skips.yaml").read_text()
)
#: AWS managed policies too broad for any fmctl role.
BROAD = {
    "AdministratorAccess",
    "PowerUserAccess",
    "IAMFullAccess",
    "AmazonEC2FullAccess",
    "AmazonS3FullAccess",
    "AmazonFSxFullAccess",
}
#: What a secret on disk looks like.
SECRET_PATTERNS = [
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"aws_secret_access_key", re.I),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
]


def _render(tmp: Path, example: Path, scheduler: str) -> Path:
    out = tmp / f"{example.stem}-{scheduler}"
    args = ["render", "-f", str(example), "-o", str(out), "--scheduler", scheduler]
    done = subprocess.run(
        [sys.executable, "-m", "provisioner", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    tmp = tmp_path_factory.mktemp("rendered")
    out = {(e.stem, s): _render(tmp, e, s) for e in EXAMPLES for s in ("slurm", "kubernetes")}
    # Idle nodes removed on EKS: the Cluster Autoscaler's manifests, which no example has.
    out[(AUTOSCALED.stem, "kubernetes")] = _render(tmp, AUTOSCALED, "kubernetes")
    return out


def _files(folder: Path) -> Iterator[Path]:
    yield from (p for p in folder.rglob("*") if p.is_file())


def test_checkov_findings_are_fixed_or_justified(rendered: dict[tuple[str, str], Path]) -> None:
    if not CHECKOV.exists():
        if os.environ.get("CI"):
            pytest.fail("checkov missing: `make tools` installs it in .venv-checkov")
        pytest.skip("checkov not installed (`make tools` installs it in .venv-checkov)")
    unexplained, used = [], set()
    for (example, scheduler), folder in rendered.items():
        if scheduler != "kubernetes":
            continue
        done = subprocess.run(
            [
                str(CHECKOV),
                "-d",
                str(folder / "kubernetes"),
                "--framework",
                "kubernetes",
                "-o",
                "json",
                "--quiet",
                "--skip-download",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
            env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
        )
        report = json.loads(done.stdout)
        assert report["summary"]["parsing_errors"] == 0, done.stdout[:2000]
        assert report["summary"]["passed"] > 100  # it really looked at the manifests
        for finding in report["results"]["failed_checks"]:
            check, resource = finding["check_id"], finding["resource"].split(".app.kubernetes")[0]
            allowed = SKIPS.get(check, {}).get("resources", [])
            assert isinstance(allowed, list)
            if "*" in allowed or resource in allowed:
                used.add((check, "*" if "*" in allowed else resource))
            else:
                unexplained.append(f"{example}: {check} {finding['check_name']} on {resource}")
    assert unexplained == [], "fix these or justify them in tests/data/checkov-skips.yaml"
    listed = {(c, r) for c, entry in SKIPS.items() for r in entry["resources"]}  # type: ignore[attr-defined]
    assert listed - used == set(), "skip-list entries no finding needs any more: remove them"
    assert all(str(entry.get("reason", "")).strip() for entry in SKIPS.values())


def test_rendered_iam_is_least_privilege(rendered: dict[tuple[str, str], Path]) -> None:
    arns: set[str] = set()
    for folder in rendered.values():
        for path in _files(folder):
            text = path.read_text()
            arns |= set(re.findall(r"arn:aws:iam::aws:policy/([A-Za-z0-9_-]+)", text))
            assert not re.search(r'"Action"\s*:\s*"\*"', text), path
            assert not re.search(r"Action:\s*['\"]?\*", text), path
    arns |= {p for _, policies in ROLES.values() for p in policies}
    assert arns and arns & BROAD == set()
    for role, document in INLINE.items():
        for statement in document["Statement"]:
            actions = statement["Action"]
            assert all(a != "*" and not a.endswith(":*") for a in actions), role


def test_nothing_secret_in_rendered_files(rendered: dict[tuple[str, str], Path]) -> None:
    for folder in rendered.values():
        for path in _files(folder):
            text = path.read_text(errors="replace")
            assert not any(p.search(text) for p in SECRET_PATTERNS), path
