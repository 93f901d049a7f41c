"""The campaign's tally: what the reliability tests tried and what they found.

Tests add to it as they go (``tally.add(crashes=1)``, ``tally.found(orphans=...)``); the
session writes it, with the emulator's count of calls and injected faults, to the file named
by FMCTL_RELIABILITY_REPORT, and `make reliability` prints it (``python -m
tests.reliability.report``).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from tests.engine import harness
from tests.engine.harness import Sandbox

P = TypeVar("P")

#: What must be 0 for the campaign to pass.
MUST_BE_ZERO = ("orphans found", "duplicates found", "foreign resources touched")


class Tally:
    """Counters, by label."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()  # crash points run in threads

    def add(self, **counts: int) -> None:
        """Add to counters (underscores in names read as spaces)."""
        with self.lock:
            for key, value in counts.items():
                self.counts[key.replace("_", " ")] += value

    def as_data(self, requests: list[dict[str, Any]]) -> dict[str, int]:
        """The report: calls and faults from the emulator's log, then the counters."""
        data = {
            "calls made": len(requests),
            "faults injected": sum(1 for r in requests if r.get("fault")),
        }
        for key in ("crashes tried", "bad specs tried", *MUST_BE_ZERO):
            data[key] = self.counts.get(key, 0)
        return data

    def write(self, path: Path, requests: list[dict[str, Any]]) -> None:
        """Save the report as JSON."""
        path.write_text(json.dumps(self.as_data(requests), indent=1))


tally = Tally()


#: Tries at killing a run at its step: the kill follows the run's output, and on a loaded
#: machine the reader may fall so far behind that the run has finished when it gets there.
KILL_TRIES = 3


def killed(
    sandbox: Sandbox,
    args: tuple[str, ...],
    marker: str,
    count: int,
    undo: tuple[str, ...],
    env: dict[str, str] | None = None,
) -> None:
    """Run fmctl ``args`` and SIGKILL it once ``count`` output lines show ``marker``. When
    the run finished before the kill landed, ``undo`` it and try again: a crash at that step
    must have happened before this returns."""
    env = env or {}
    for _ in range(KILL_TRIES):
        proc = sandbox.spawn(*args, "--sandbox", "--yes", **env)
        lines = harness.kill_after(proc, marker, count)
        if proc.returncode != 0:
            break
        again = sandbox.fmctl(*undo, "--sandbox", "--yes", timeout=300, **env)
        assert again.returncode == 0, again.stdout + again.stderr
    assert proc.returncode == -9, "".join(lines)
    tally.add(crashes_tried=1)


def raw_leftovers(sandbox: Sandbox, name: str, region: str) -> list[str]:
    """What is left tagged as the cluster's (counted for the campaign's report)."""
    left = harness.raw_leftovers(sandbox, name, region)
    tally.add(orphans_found=len(left))
    return left


def duplicates(items: list[tuple[str, str, str]]) -> dict[tuple[str, str], int]:
    """Logical ids that exist more than once (counted for the campaign's report)."""
    found = harness.duplicates(items)
    tally.add(duplicates_found=sum(n - 1 for n in found.values()))
    return found


def run_points(
    points: Sequence[P], attempt: Callable[[P], None], parallelism: int, name: str
) -> dict[P, BaseException | None]:
    """Run ``attempt`` at every point, ``parallelism`` at a time; what each one raised.

    A module fixture runs them all up front (the sandbox is shared and each point takes
    seconds of waiting, so threads overlap them); each point's own test then re-raises
    its failure, so a report names the point that failed.
    """

    def run(point: P) -> BaseException | None:
        try:
            attempt(point)
        except BaseException as exc:  # reported by the point's own test
            return exc
        return None

    with ThreadPoolExecutor(parallelism, thread_name_prefix=name) as pool:
        return dict(zip(points, pool.map(run, points), strict=True))
