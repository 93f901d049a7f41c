"""The campaign's sample: which crash points this run tries.

A crash campaign kills a run at every step of its plan, one cluster per step. Every point
every run took `make test` past 20 minutes on 2 cores, so `make test` runs a deterministic
share of each campaign and `make campaign` runs them all:

- A campaign test is marked ``@pytest.mark.campaign(stride=N)``: its points, in collection
  order, are dealt into N slices, and a run keeps slice ``seed % N``. With ``by=("backend",)``
  the points are dealt per value of those parameters, so each run still crosses every
  backend (local and S3 state): every kind of point is tried on every run, a share of the
  steps of each.
- The seed is the number of commits (``git rev-list --count HEAD``): successive commits take
  successive slices, so N commits in a row together try every point. ``FMCTL_CAMPAIGN_SEED``
  sets it; ``FMCTL_CAMPAIGN=all`` keeps every point.
- A failing point prints the seed and the one command that runs that point alone.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The marker that makes a parametrized test a sampled campaign.
MARKER = "campaign"


def every_point() -> bool:
    """True when this run keeps every campaign point (``FMCTL_CAMPAIGN=all``)."""
    return os.environ.get("FMCTL_CAMPAIGN", "").strip().lower() == "all"


def seed() -> int:
    """This run's seed: FMCTL_CAMPAIGN_SEED, else the commit count, else 0 (no git)."""
    given = os.environ.get("FMCTL_CAMPAIGN_SEED", "").strip()
    if given:
        return int(given)
    try:
        done = subprocess.run(
            ["git", "rev-list", "--count", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return 0
    text = done.stdout.strip()
    return int(text) if done.returncode == 0 and text.isdigit() else 0


def keep(index: int, stride: int, run_seed: int) -> bool:
    """Whether the ``index``-th point of a group is in this seed's slice of ``stride``."""
    return stride <= 1 or index % stride == run_seed % stride


def _group(item: pytest.Item, by: Sequence[str]) -> tuple[object, ...]:
    params = getattr(item, "callspec", None)
    values = tuple(params.params.get(name) for name in by) if params else ()
    return (item.nodeid.split("[", 1)[0], *values)


def split(
    items: Sequence[pytest.Item], run_seed: int
) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """The items this seed keeps, and the campaign points it leaves for other seeds."""
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    seen: defaultdict[tuple[object, ...], int] = defaultdict(int)
    for item in items:
        mark = item.get_closest_marker(MARKER)
        if mark is None:
            kept.append(item)
            continue
        stride = int(mark.kwargs.get("stride", 1))
        group = _group(item, tuple(mark.kwargs.get("by", ())))
        index = seen[group]
        seen[group] += 1
        (kept if keep(index, stride, run_seed) else left).append(item)
    return kept, left


def replay_command(nodeid: str) -> str:
    """The command that runs one campaign point alone, whatever the seed."""
    return f"FMCTL_CAMPAIGN=all .venv/bin/pytest {shlex.quote(nodeid)}"


def selected_params(session: pytest.Session, module: object, test: str) -> list[dict[str, object]]:
    """The parameters of ``test``'s points that this run keeps, in order: what a campaign's
    module fixture runs up front (only those; a replayed point runs alone)."""
    return [
        dict(item.callspec.params)
        for item in session.items
        if isinstance(item, pytest.Function)
        and item.module is module
        and item.originalname == test
        and hasattr(item, "callspec")
    ]
