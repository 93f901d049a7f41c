"""Rendering the examples once per test session, and reading the results as data."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from provisioner.catalog import load_catalog
from provisioner.drivers import yamlio
from provisioner.render import Rendered, render
from provisioner.spec.source import load_source
from provisioner.validate import validate_document
from tests.conftest import EXAMPLES, ROOT

#: fmctl's in-cluster programs (the verify controller, the node agent), each run by its pod's
#: python3 from a ConfigMap beside the modules it imports.
PROGRAMS = ROOT / "templates/kubernetes/health-verify"

SCHEDULERS = ("slurm", "kubernetes")
CASES = [(example, scheduler) for example in EXAMPLES for scheduler in SCHEDULERS]
CASE_IDS = [f"{example.stem}:{scheduler}" for example, scheduler in CASES]
#: Test values for the placeholders, shaped like the real ids so schemas accept them.
FILLED = {
    "accountId": "123456789012",
    "vpcCidr": "10.50.0.0/16",
    "privateSubnetId": "subnet-0123456789abcdef0",
    "secondarySubnetId": "subnet-0123456789abcdef2",
    "publicSubnetId": "subnet-0123456789abcdef1",
    "efaSecurityGroupId": "sg-0123456789abcdef0",
    "fsxSecurityGroupId": "sg-0123456789abcdef1",
    "headNodeSecurityGroupId": "sg-0123456789abcdef2",
    "fileSystemId": "fs-0123456789abcdef0",
    "fsxDnsName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    "fsxMountName": "abcdefgh",
    "artifactBucket": "fmctl-artifacts-123456789012-us-east-1",
    "clusterRoleArn": "arn:aws:iam::123456789012:role/fmctl-cluster",
    "nodeRoleArn": "arn:aws:iam::123456789012:role/fmctl-node",
    "ampWritePolicyArn": (
        "arn:aws:iam::123456789012:policy/parallelcluster/fmctl-c-us-east-1-amp-write"
    ),
    "gitRepoUrl": "https://git.example.com/infra/clusters.git",
}


@functools.cache
def rendered(example: Path, scheduler: str) -> Rendered:
    """The example rendered for ``scheduler`` (validated first, as `fmctl render` does)."""
    doc, problems = load_source(str(example))
    assert not problems
    result = validate_document(doc, scheduler)
    assert result.ok and result.resolved is not None
    return render(result.resolved, load_catalog())


def documents(files: dict[str, str], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every YAML document (path, object) of files under ``prefix``."""
    out = []
    for path, text in files.items():
        if path.startswith(prefix) and path.endswith(".yaml"):
            out += [(path, doc) for doc in yamlio.load_all(text) if doc is not None]
    return out


def fill_all(text: str, pools: list[str] = ()) -> str:  # type: ignore[assignment]
    """``text`` with every placeholder filled with test values."""
    from provisioner.render.placeholders import fill

    values = dict(FILLED)
    for pool in pools:
        values[f"launchTemplate.{pool}"] = "lt-0123456789abcdef0"
        values[f"placementGroup.{pool}"] = f"pg-{pool}"
    return fill(text, values)


def program(name: str) -> ModuleType:
    """The in-cluster program ``name`` (``PROGRAMS/name.py``) as a module, imported as its
    pod's python3 runs it: the modules beside it importable, itself registered (its
    dataclasses look their module up)."""
    if str(PROGRAMS) not in sys.path:
        sys.path.insert(0, str(PROGRAMS))
    spec = importlib.util.spec_from_file_location(name, PROGRAMS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
