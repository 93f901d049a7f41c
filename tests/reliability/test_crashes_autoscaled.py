"""The crash campaign over an autoscaled EKS spec (``cost.idle: scale-down``): `up` SIGKILLed
as each part the Cluster Autoscaler brings starts being made, and `down` as each starts being
deleted, then run again; the end state must equal a clean run's, none twice, nothing left.

The points are the resources the autoscaler adds to the p5en example's plan (its IAM role and
that role's pod identity association) and the two it changes (the GPU pool's node group,
which also tags its Auto Scaling group for the autoscaler; the kube stack, which also holds the
autoscaler's Deployment and RBAC). Every other step of this plan is a step of the p5en
example's, killed in turn by test_crashes.py. (Its own file: `make test` gives each file to
one worker.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.engine.harness import Sandbox, owned
from tests.engine.test_lifecycle import P5EN_RESOURCES
from tests.reliability.campaign import duplicates, killed, raw_leftovers, run_points
from tests.sampling import selected_params

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests/data/specs/eks-autoscaled.yaml"
ADDED = frozenset({"iam/cluster-autoscaler", "pod-identity/cluster-autoscaler"})
POINTS = [*sorted(ADDED), "nodegroup/gpu", "kube-stack"]
RESOURCES = P5EN_RESOURCES | ADDED
CRASH_PARALLELISM = 4
#: `make test` tries one point in this many (a different one each commit).
SAMPLE_STRIDE = 4
TEST = "test_autoscaled_killed_at_each_part_then_rerun"


def _spec(tmp: Path, name: str) -> tuple[Path, str]:
    data = yaml.safe_load(SPEC.read_text())
    data["metadata"]["name"] = name
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, str(data["metadata"]["region"])


def _crash_point(sandbox: Sandbox, tmp: Path, resource: str) -> None:
    name = f"e2e-ascrash-{POINTS.index(resource)}"
    spec, region = _spec(tmp, name)
    up, down = ("up", "-f", str(spec)), ("down", name, "--region", region)
    # The progress line of a resource's step (cli/progress.py pads the id to 34).
    killed(sandbox, up, f"{resource:<34} creating", 1, down)
    partial = owned(sandbox, name, region)
    assert duplicates(partial) == {}
    again = sandbox.fmctl(*up, "--sandbox", "--yes", timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    items = owned(sandbox, name, region)
    assert {logical for _, logical, _ in items} == RESOURCES
    assert duplicates(items) == {}
    assert {i[2] for i in partial} <= {i[2] for i in items}  # kept, not replaced
    plan = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr  # nothing left to change

    killed(sandbox, down, f"{resource:<34} deleting", 1, up)
    gone = sandbox.fmctl(*down, "--sandbox", "--yes", timeout=300)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert raw_leftovers(sandbox, name, region) == []


@pytest.fixture(scope="module")
def crash_runs(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, BaseException | None]:
    """This run's points (tests/sampling.py), CRASH_PARALLELISM at a time; what each raised."""
    chosen = [str(p["resource"]) for p in selected_params(request.session, request.module, TEST)]
    tmp = tmp_path_factory.mktemp("autoscaled-crashes")
    return run_points(chosen, lambda r: _crash_point(sandbox, tmp, r), CRASH_PARALLELISM, "as")


def test_the_points_are_what_the_autoscaler_adds(sandbox: Sandbox, tmp_path: Path) -> None:
    """The plan of the autoscaled spec is the p5en example's and ADDED (offline: no AWS)."""
    import json

    spec, _ = _spec(tmp_path, "e2e-ascrash-plan")
    plan = sandbox.fmctl("plan", "-f", str(spec), "--offline", "-o", "json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert {c["resource"] for c in json.loads(plan.stdout)["changes"]} == RESOURCES


@pytest.mark.timeout(2400)
@pytest.mark.campaign(stride=SAMPLE_STRIDE)
@pytest.mark.parametrize("resource", POINTS)
def test_autoscaled_killed_at_each_part_then_rerun(
    crash_runs: dict[str, BaseException | None], resource: str
) -> None:
    """See ``_crash_point``: killed as ``resource`` is made in `up`, then deleted in `down`."""
    error = crash_runs[resource]
    if error is not None:
        raise error
