"""What the reliability tests prove, counted: each crash campaign's points (and the share a
sampled run takes), the fault cycles, the bad specs. Usage:

    python -m tests.reliability.inventory [SEED]

With SEED (default: this checkout's, tests/sampling.py) it also lists the points that seed's
`make test` tries. CONTRIBUTING.md keeps the before/after of this table: sampling must not
drop a point from the union of successive runs, nor a fault cycle or a bad spec from any.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from tests import sampling

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Campaign:
    """A sampled crash campaign: its test, every point, and its stride."""

    test: str
    points: tuple[tuple[object, ...], ...]
    stride: int
    by: tuple[str, ...]

    def this_run(self, seed: int) -> list[tuple[object, ...]]:
        """The points a run with ``seed`` tries (per group, as tests/sampling.py deals)."""
        seen: dict[tuple[object, ...], int] = {}
        kept = []
        for point in self.points:
            group = point[1:] if self.by else ()
            index = seen.get(group, 0)
            seen[group] = index + 1
            if sampling.keep(index, self.stride, seed):
                kept.append(point)
        return kept


def campaigns() -> list[Campaign]:
    """The crash campaigns, from their modules' own point lists."""
    from tests.reliability import (
        test_crashes,
        test_crashes_autoscaled,
        test_crashes_pcs,
        test_update_campaign,
    )

    return [
        Campaign(
            f"test_crashes.py::{test_crashes.TEST}",
            tuple(test_crashes.POINTS),
            test_crashes.SAMPLE_STRIDE,
            ("backend",),
        ),
        Campaign(
            f"test_crashes_pcs.py::{test_crashes_pcs.TEST}",
            tuple((p,) for p in test_crashes_pcs.POINTS),
            test_crashes_pcs.SAMPLE_STRIDE,
            (),
        ),
        Campaign(
            f"test_crashes_autoscaled.py::{test_crashes_autoscaled.TEST}",
            tuple((p,) for p in test_crashes_autoscaled.POINTS),
            test_crashes_autoscaled.SAMPLE_STRIDE,
            (),
        ),
        Campaign(
            f"test_update_campaign.py::{test_update_campaign.TEST}",
            tuple((p,) for p in test_update_campaign.KILL_POINTS),
            test_update_campaign.SAMPLE_STRIDE,
            (),
        ),
    ]


def fault_cycles() -> list[str]:
    """Every test of the fault files: each one a kind of fault cycle, run every time."""
    names = []
    for path in sorted(HERE.glob("test_faults*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names += [
            f"{path.name}::{node.name}"
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        ]
    return names


def main(argv: list[str]) -> int:
    seed = int(argv[0]) if argv else sampling.seed()
    from tests.reliability.test_bad_specs import CORPUS, PROCESS_SAMPLE

    total = kept = 0
    print(f"{'crash campaign':<70} points  stride  seed {seed}")
    for campaign in campaigns():
        run = campaign.this_run(seed)
        total, kept = total + len(campaign.points), kept + len(run)
        print(f"{campaign.test:<70} {len(campaign.points):>6}  {campaign.stride:>6}  {len(run)}")
        print(f"{'':<4}this seed: {', '.join('-'.join(map(str, p)) for p in run)}")
    print(f"{'every point (make campaign)':<70} {total:>6}          {kept} this run")
    cycles = fault_cycles()
    print(f"fault cycles, every run: {len(cycles)}")
    for name in cycles:
        print(f"    {name}")
    print(
        f"bad specs, every run: {len(CORPUS)} in process, {len(PROCESS_SAMPLE)} of them again "
        "as processes, 4 inputs that cannot be files, and `up` of each (no AWS call)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
