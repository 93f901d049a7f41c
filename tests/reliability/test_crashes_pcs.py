"""The crash campaign on AWS PCS: `up` and `down` of a PCS cluster SIGKILLed at every step of
their plans in turn and run again; the end state must equal a clean run's, with no duplicate
(PCS's client tokens, and reads by tag) and nothing left after down. Local state only: what
a crash leaves of the lock and the state is the same for either provider (test_crashes.py
runs the S3 rounds). (Its own file: `make test` gives each file to one worker.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.engine.harness import Sandbox, owned
from tests.engine.test_pcs import PCS_RESOURCES, pcs_spec
from tests.reliability.campaign import duplicates, killed, raw_leftovers, run_points
from tests.sampling import selected_params

#: Resources a clean `up` creates (the sample AMI is looked up, not made), and the deletes
#: of a clean `down` (the artifacts go with their bucket): the cluster, its ttl's schedule
#: group and role, and its budget with the stop chain (key, topic, role, function).
UP_STEPS, DOWN_STEPS = 30, 29
POINTS = list(range(1, UP_STEPS + 1))
CRASH_PARALLELISM = 6
#: `make test` tries one point in this many (a different slice each commit).
SAMPLE_STRIDE = 6
TEST = "test_pcs_killed_at_each_step_then_rerun"
REGION = "us-west-2"


def crash_spec(tmp: Path, name: str) -> Path:
    """The PCS cluster with what guards its money too: a ttl (schedules kept by AWS) and a
    budget that stops it, so every step of those is a kill point as well."""
    spec = pcs_spec(tmp, name, REGION)
    data = yaml.safe_load(spec.read_text())
    data["metadata"]["ttl"] = "30d"
    data["cost"] = {"budget": {"total": 100000, "actions": "stop"}}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def _crash_point(sandbox: Sandbox, tmp: Path, point: int) -> None:
    name = f"e2e-pcscrash-{point}"
    spec = crash_spec(tmp, name)
    up, down = ("up", "-f", str(spec)), ("down", name, "--region", REGION)
    killed(sandbox, up, " creating", point, down)
    partial = owned(sandbox, name, REGION)
    assert duplicates(partial) == {}
    again = sandbox.fmctl(*up, "--sandbox", "--yes", timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    items = owned(sandbox, name, REGION)
    assert {logical for _, logical, _ in items} >= PCS_RESOURCES
    assert duplicates(items) == {}
    # What existed before the crash was kept, not replaced.
    assert {i[2] for i in partial} <= {i[2] for i in items}

    killed(sandbox, down, " deleting", min(point, DOWN_STEPS), up)
    gone = sandbox.fmctl(*down, "--sandbox", "--yes", timeout=300)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert raw_leftovers(sandbox, name, REGION) == []


@pytest.fixture(scope="module")
def crash_runs(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[int, BaseException | None]:
    """This run's crash points (tests/sampling.py), CRASH_PARALLELISM at a time; what each
    raised. PCS creates one
    cluster at a time per region: the points' clusters wait behind each other (as a team's
    would), which the campaign exercises too."""
    chosen = [int(str(p["point"])) for p in selected_params(request.session, request.module, TEST)]
    tmp = tmp_path_factory.mktemp("pcs-crashes")
    return run_points(chosen, lambda p: _crash_point(sandbox, tmp, p), CRASH_PARALLELISM, "pcs")


def test_a_clean_run_has_the_steps_the_points_cover(sandbox: Sandbox, tmp_path: Path) -> None:
    """The kill points are every step: a clean up creates UP_STEPS resources, a clean down
    deletes DOWN_STEPS."""
    name = "e2e-pcscrash-clean"
    spec = crash_spec(tmp_path, name)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    assert up.stdout.count(" creating") == UP_STEPS
    down = sandbox.fmctl("down", name, "--region", REGION, "--sandbox", "--yes", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert down.stdout.count(" deleting") == DOWN_STEPS
    assert raw_leftovers(sandbox, name, REGION) == []


@pytest.mark.timeout(2400)
@pytest.mark.campaign(stride=SAMPLE_STRIDE)
@pytest.mark.parametrize("point", POINTS)
def test_pcs_killed_at_each_step_then_rerun(
    crash_runs: dict[int, BaseException | None], point: int
) -> None:
    """See ``_crash_point``: killed at step ``point`` of `up`, then of `down`."""
    error = crash_runs[point]
    if error is not None:
        raise error
