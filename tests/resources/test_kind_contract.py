"""Every resource kind has unit tests of its verbs against recorded AWS answers (issue 36):
read, diff, a create whose answer was lost, and delete (a kind fmctl only uses, like an
existing VPC: read). A test says what it covers with ``tests.resources.contract.covers``.

``GAPS`` lists what had no such test when this rule came in (2026-12-05). It may only
shrink: a new kind comes with its tests, a test removed fails here, and a gap filled must be
struck from the list (so the list stays the truth)."""

from __future__ import annotations

import importlib
import pkgutil

import tests.resources
from provisioner.resources.registry import kinds
from tests.resources.contract import COVERED, VERBS

READ_ONLY = ("read",)

#: Kind -> verbs without a unit test of their own (the sandbox's scenario tests and crash
#: campaigns cover them end to end). Strike a verb when its test lands; never add one.
GAPS: dict[str, set[str]] = {
    "dra": {"read", "diff", "create-adopts", "delete"},
    "kube-chart": {"read", "diff", "create-adopts", "delete"},
    "kube-stack": {"read", "diff", "create-adopts", "delete"},
}


def _load_every_test_module() -> None:
    for found in pkgutil.iter_modules(tests.resources.__path__):
        if found.name.startswith("test_"):
            importlib.import_module(f"tests.resources.{found.name}")


def test_every_kind_has_unit_tests_of_its_verbs_or_is_a_listed_gap() -> None:
    _load_every_test_module()
    every = kinds()
    assert set(COVERED) <= set(every), (
        f"tests cover kinds that do not exist: {set(COVERED) - set(every)}"
    )
    missing, filled = {}, {}
    for name, kind in sorted(every.items()):
        wanted = set(VERBS if kind.owned else READ_ONLY)
        untested = wanted - COVERED[name]
        allowed = GAPS.get(name, set())
        if untested - allowed:
            missing[name] = sorted(untested - allowed)
        if allowed - untested:
            filled[name] = sorted(allowed - untested)
    assert missing == {}, f"kinds whose verbs have no unit test: {missing} (tests/resources)"
    assert filled == {}, f"tested now: strike these from GAPS: {filled}"
    assert set(GAPS) <= set(every), f"GAPS names kinds that do not exist: {set(GAPS) - set(every)}"


def test_the_gaps_only_shrink() -> None:
    """The count when the rule came in; lower it as gaps are filled, never raise it."""
    assert sum(len(v) for v in GAPS.values()) <= 12
