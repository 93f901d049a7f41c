"""The crash campaign: `up` and `down` SIGKILLed at every step of the plan in turn and run
again. The end state must equal a clean run's, with no duplicate and nothing left after down.
Every point runs with the state on this machine and again with it in S3 (team state), where
the killed run leaves its lock behind: the rerun must wait out the lease and take it over.
(Its own file: `make test` gives each file to one worker, and this is the longest.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engine.harness import Sandbox, owned, region_of, spec_file
from tests.engine.test_lifecycle import P5EN_RESOURCES
from tests.reliability.campaign import duplicates, killed, raw_leftovers, run_points
from tests.sampling import selected_params

#: Kill `up` after the Nth resource started being created, and `down` after the Nth started
#: being deleted: every step of the plan in turn.
KILL_POINTS = list(range(1, len(P5EN_RESOURCES) + 1))
#: Crash points run this many at a time (each one its own cluster): the runs mostly wait on
#: the emulator's clock, and one after another they took longer than the rest of the suite.
CRASH_PARALLELISM = 6


#: The S3 rounds' state, and a lease short enough that waiting one out stays quick, long
#: enough that a run starved of CPU among the campaign's others still renews in time. At
#: 8 s, CI once saw four reruns stop on their own fence (no renewal had landed for 6 s
#: while the emulator served six runs at once); a late renewal is now tried again before
#: a change (``state.lease``), and 15 s leaves room for one slow answer.
STATE = {"FMCTL_STATE": "s3://fmctl-crash-state/crash", "FMCTL_LOCK_LEASE": "15"}
#: Every point runs with local state; every sixth one with S3 state too (what a crash
#: leaves of the resources does not depend on where the state is, and what it leaves of
#: the lock and the state does not depend on the step; every other point with S3 took
#: this file to 12 minutes of CI's 19, every third to 14 of 24 once the log group made
#: the plan 34 steps, every fourth kept CI near 30 once PCS's own crash campaign ran
#: beside it). The first and the last step are among them.
S3_POINTS = sorted({*KILL_POINTS[::6], KILL_POINTS[-1]})
POINTS = [(point, "local") for point in KILL_POINTS] + [(point, "s3") for point in S3_POINTS]
#: `make test` tries one point in this many of each backend's (a different slice each
#: commit); `make campaign` tries them all.
SAMPLE_STRIDE = 6
TEST = "test_killed_at_each_step_then_rerun"


def _wait(env: dict[str, str]) -> tuple[str, ...]:
    """A rerun after a crash with S3 state waits out the killed run's lease."""
    return ("--wait",) if env else ()


def _lock_left(sandbox: Sandbox, name: str) -> bool:
    """True when the S3 state still holds ``name``'s lock (the killed run's)."""
    from provisioner.state.location import parse_state_url

    location = parse_state_url(STATE["FMCTL_STATE"])
    s3 = sandbox.aws("us-east-1").client("s3")
    try:
        s3.head_object(Bucket=location.bucket, Key=location.key(name, "lock.json"))
    except Exception:
        return False
    return True


def _rerun(sandbox: Sandbox, env: dict[str, str], name: str, *args: str) -> bool:
    """Run again after the crash; with S3 state it must take the dead run's lock over
    whenever the killed run left one. It leaves none when the kill landed after the run had
    let go of it (the last step, on a loaded machine: its work and its unlock were done when
    the signal arrived), and a `down` with nothing left to delete takes none. True when it
    took a lock over."""
    left = bool(env) and _lock_left(sandbox, name)
    again = sandbox.fmctl(*args, "--sandbox", "--yes", *_wait(env), timeout=300, **env)
    assert again.returncode == 0, again.stdout + again.stderr
    # A `down` killed after its last delete finds nothing tagged and takes no lock.
    if not left or "nothing tagged" in again.stdout:
        return False
    assert "took over the lock" in again.stderr, again.stderr
    return True


def _crash_point(sandbox: Sandbox, tmp_path: Path, point: int, backend: str) -> None:
    """`up` SIGKILLed after the Nth create started, run again: the clean run's resources,
    none twice, none replaced. Then `down` SIGKILLed after the Nth delete started, run again:
    nothing left. (One cluster per step and backend serves both crashes.)"""
    env = STATE if backend == "s3" else {}
    name = f"e2e-{'s3crash' if env else 'crash'}-{point}"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    up, down = ("up", "-f", str(spec)), ("down", name, "--region", region)
    killed(sandbox, up, " creating", point, (*down, *_wait(env)), env)
    partial = owned(sandbox, name, region)
    assert duplicates(partial) == {}
    took = [_rerun(sandbox, env, name, *up)]
    items = owned(sandbox, name, region)
    assert {logical for _, logical, _ in items} == P5EN_RESOURCES
    assert duplicates(items) == {}
    # What existed before the crash was kept, not replaced.
    assert {i[2] for i in partial} <= {i[2] for i in items}

    killed(sandbox, down, " deleting", point, (*up, *_wait(env)), env)
    took.append(_rerun(sandbox, env, name, *down))
    assert raw_leftovers(sandbox, name, region) == []
    if env:
        runs = sandbox.fmctl("history", name, "-o", "json", "--sandbox", timeout=60, **env)
        results = [r["result"] for r in json.loads(runs.stdout)]
        # The killed up and down, each taken over by the run after it (a down left
        # nothing to do stays "running": its lock just ends with its lease).
        assert results.count("ok") >= sum(took)
        assert sum(r.startswith("interrupted") for r in results) >= sum(took)


@pytest.fixture(scope="module")
def crash_runs(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[tuple[int, str], BaseException | None]:
    """This run's crash points (tests/sampling.py: a slice of each backend's, or all),
    CRASH_PARALLELISM at a time; what each raised."""
    chosen = [
        (int(str(p["point"])), str(p["backend"]))
        for p in selected_params(request.session, request.module, TEST)
    ]
    tmp = tmp_path_factory.mktemp("crashes")
    made = sandbox.fmctl(
        "state", "init", STATE["FMCTL_STATE"], "--sandbox", "--region", "us-east-1"
    )
    assert made.returncode == 0, made.stderr
    return run_points(
        chosen,
        lambda key: _crash_point(sandbox, tmp, *key),
        CRASH_PARALLELISM,
        "crash",
    )


@pytest.mark.timeout(2400)
@pytest.mark.campaign(stride=SAMPLE_STRIDE, by=("backend",))
@pytest.mark.parametrize(("point", "backend"), POINTS)
def test_killed_at_each_step_then_rerun(
    crash_runs: dict[tuple[int, str], BaseException | None], point: int, backend: str
) -> None:
    """See ``_crash_point``: killed at step ``point`` of `up`, then of `down`."""
    error = crash_runs[(point, backend)]
    if error is not None:
        raise error
