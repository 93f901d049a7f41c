"""Which verbs of which kind have unit tests against recorded AWS answers (issue 36's kind
contract): each such test says so with ``@covers(kind, verb, ...)``, and
``test_kind_contract`` holds every kind to the four verbs below, with the gaps listed there
allowed only to shrink."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TypeVar

#: read: finds and describes its resource (ours only); diff: classifies each difference;
#: create-adopts: a create whose answer was lost ends with the one resource, not two;
#: delete: removes it (and what it must sweep first), a resource already gone is success.
VERBS = ("read", "diff", "create-adopts", "delete")

#: Kind name -> the verbs some test covers.
COVERED: dict[str, set[str]] = defaultdict(set)

F = TypeVar("F", bound=Callable[..., object])


def covers(kind: str, *verbs: str) -> Callable[[F], F]:
    """Mark a test as covering ``verbs`` of ``kind``."""
    unknown = set(verbs) - set(VERBS)
    if unknown:
        raise ValueError(f"unknown verbs {sorted(unknown)}: say one of {VERBS}")

    def mark(test: F) -> F:
        COVERED[kind].update(verbs)
        return test

    return mark
