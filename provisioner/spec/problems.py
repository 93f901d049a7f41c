"""Problems: errors and warnings as data, each with a spec path, a message and a hint.

Every layer (loader, model, offline rules, online checks) reports through ``Problem`` so the
CLI can print them all at once, located in the source file, or as JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Level = Literal["error", "warning"]
PathPart = str | int
SpecPath = tuple[PathPart, ...]


def format_path(path: SpecPath) -> str:
    """Render ``("compute", "gpuPools", 0, "efa")`` as ``compute.gpuPools[0].efa``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


@dataclass(frozen=True)
class Position:
    """A 1-based line and column in a source file."""

    line: int
    column: int


@dataclass(frozen=True)
class Problem:
    """One finding about a spec.

    ``path`` is where in the spec it is (empty for the whole document); ``position``, when
    set, overrides the position looked up from the path (used for syntax errors, which have no
    path). ``code`` names the rule so tests and users can refer to it. ``related`` lists the
    other fields the finding depends on (a rule comparing two fields names the second), so a
    finding that rests on a value dropped as invalid can be suppressed.
    """

    code: str
    message: str
    path: SpecPath = ()
    hint: str | None = None
    level: Level = "error"
    position: Position | None = field(default=None, compare=False)
    related: tuple[SpecPath, ...] = field(default=(), compare=False)

    @property
    def dotted_path(self) -> str:
        """The path as users write it, e.g. ``compute.gpuPools[0].efa``."""
        return format_path(self.path)


def has_errors(problems: Iterable[Problem]) -> bool:
    """True when any problem is an error (warnings alone do not fail validation)."""
    return any(p.level == "error" for p in problems)


def suggest(word: str, choices: Iterable[str]) -> str | None:
    """A did-you-mean hint for ``word`` among ``choices``, or None when nothing is close."""
    import difflib

    pool = list(choices)
    match = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    if not match:
        lowered = {c.lower(): c for c in pool}
        if word.lower() in lowered:
            match = [lowered[word.lower()]]
    return f"did you mean '{match[0]}'?" if match else None
