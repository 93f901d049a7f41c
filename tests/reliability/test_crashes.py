"""The crash campaign: `up` and `down` SIGKILLed at every step of the plan in turn and run
again. The end state must equal a clean run's, with no duplicate and nothing left after down.
(Its own file: `make test` gives each file to one worker, and this is the longest.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.harness import Sandbox, kill_after, owned, region_of, spec_file
from tests.engine.test_lifecycle import P5EN_RESOURCES
from tests.reliability.campaign import duplicates, raw_leftovers, run_points, tally

#: Kill `up` after the Nth resource started being created, and `down` after the Nth started
#: being deleted: every step of the plan in turn.
KILL_POINTS = list(range(1, len(P5EN_RESOURCES) + 1))
#: Crash points run this many at a time (each one its own cluster): the runs mostly wait on
#: the emulator's clock, and one after another they took longer than the rest of the suite.
CRASH_PARALLELISM = 4


#: Tries at killing a run at its step: the kill follows the run's output, and on a loaded
#: machine the reader may fall so far behind that the run has finished when it gets there.
KILL_TRIES = 3


def _killed(
    sandbox: Sandbox, args: tuple[str, ...], marker: str, point: int, undo: tuple[str, ...]
) -> None:
    """Run fmctl ``args`` and SIGKILL it once ``point`` output lines show ``marker``. When
    the run finished before the kill landed, ``undo`` it and try again: a crash at that step
    must have happened before this returns."""
    for _ in range(KILL_TRIES):
        proc = sandbox.spawn(*args, "--sandbox", "--yes")
        lines = kill_after(proc, marker, point)
        if proc.returncode != 0:
            break
        again = sandbox.fmctl(*undo, "--sandbox", "--yes")
        assert again.returncode == 0, again.stdout + again.stderr
    assert proc.returncode == -9, "".join(lines)
    tally.add(crashes_tried=1)


def _crash_point(sandbox: Sandbox, tmp_path: Path, point: int) -> None:
    """`up` SIGKILLed after the Nth create started, run again: the clean run's resources,
    none twice, none replaced. Then `down` SIGKILLed after the Nth delete started, run again:
    nothing left. (One cluster per step serves both crashes.)"""
    name = f"e2e-crash-{point}"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    up, down = ("up", "-f", str(spec)), ("down", name, "--region", region)
    _killed(sandbox, up, " creating", point, undo=down)
    partial = owned(sandbox, name, region)
    assert duplicates(partial) == {}
    rerun = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    items = owned(sandbox, name, region)
    assert {logical for _, logical, _ in items} == P5EN_RESOURCES
    assert duplicates(items) == {}
    # What existed before the crash was kept, not replaced.
    assert {i[2] for i in partial} <= {i[2] for i in items}

    _killed(sandbox, down, " deleting", point, undo=up)
    again = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert raw_leftovers(sandbox, name, region) == []


@pytest.fixture(scope="module")
def crash_runs(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, BaseException | None]:
    """Every crash point, CRASH_PARALLELISM at a time; what each one raised."""
    tmp = tmp_path_factory.mktemp("crashes")
    return run_points(
        KILL_POINTS, lambda point: _crash_point(sandbox, tmp, point), CRASH_PARALLELISM, "crash"
    )


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_at_each_step_then_rerun(
    crash_runs: dict[int, BaseException | None], point: int
) -> None:
    """See ``_crash_point``: killed at step ``point`` of `up`, then of `down`."""
    error = crash_runs[point]
    if error is not None:
        raise error
