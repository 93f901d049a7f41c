"""The one table `make bench` prints: every benchmark's headline figures as rows of fmctl's
value, what it is compared against, the ratio and the target it is held to.

Each benchmark module has ``collect() -> (rows, detail)``: the rows for this table and its own
detailed table (printed when the module runs alone, or with ``run.py --detail``).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One headline figure. ``ratio`` is ``value / against_value``; ``target`` bounds it (or
    the value itself when there is nothing to compare against)."""

    area: str
    measure: str
    value: float
    against: str = "-"
    against_value: float | None = None
    #: Upper (``"<="``) or lower (``">="``) bound, on the ratio when there is one.
    bound: str | None = None
    limit: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.against_value:
            return self.value / self.against_value
        return None

    @property
    def met(self) -> str:
        if self.bound is None or self.limit is None:
            return "-"
        checked = self.ratio if self.ratio is not None else self.value
        ok = checked <= self.limit if self.bound == "<=" else checked >= self.limit
        return "yes" if ok else "NO"

    @property
    def target(self) -> str:
        if self.bound is None or self.limit is None:
            return "-"
        return f"{self.bound} {self.limit:g}"


def machine() -> str:
    """The line that says where the figures came from."""
    return (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )


def render(rows: list[Row]) -> str:
    """The table as text: one line per row, ratios and targets aligned."""
    head = ("area", "measure", "fmctl", "against", "theirs", "ratio", "target", "met")
    cells = [
        (
            r.area,
            r.measure,
            f"{r.value:.3g}",
            r.against,
            "-" if r.against_value is None else f"{r.against_value:.3g}",
            "-" if r.ratio is None else f"{r.ratio:.2f}",
            r.target,
            r.met,
        )
        for r in rows
    ]
    widths = [max(len(str(c[i])) for c in [head, *cells]) for i in range(len(head))]
    numeric = {2, 4, 5}
    lines = []
    for line in [head, *cells]:
        lines.append(
            "  ".join(
                str(c).rjust(w) if i in numeric else str(c).ljust(w)
                for i, (c, w) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
        )
    return "\n".join(lines)
