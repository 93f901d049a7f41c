"""Offline rules: checks that need no credentials and no network.

A rule is a function from the typed spec (and a context with the catalog and the effective
scheduler) to problems. Rules register with ``@rule("code")``; the code appears in every
problem the rule reports, and the test suite checks that each registered code has a passing
and a failing case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from provisioner.catalog import Catalog
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem

RuleFn = Callable[[ClusterSpec, "RuleContext"], Iterable[Problem]]


@dataclass(frozen=True)
class RuleContext:
    """What rules may consult besides the spec."""

    catalog: Catalog
    scheduler: str


@dataclass(frozen=True)
class Rule:
    """A registered rule: its codes (a rule may report under more than one) and function."""

    codes: tuple[str, ...]
    fn: RuleFn


RULES: list[Rule] = []


def rule(*codes: str) -> Callable[[RuleFn], RuleFn]:
    """Register an offline rule reporting under ``codes``."""

    def register(fn: RuleFn) -> RuleFn:
        RULES.append(Rule(codes, fn))
        return fn

    return register


def run_rules(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Run every registered rule."""
    # Import the rule modules for their registrations (kept here so importing the package
    # for RuleContext alone stays cheap and free of cycles).
    from provisioner.validate.rules import compute, general, network, storage  # noqa: F401

    for registered in RULES:
        yield from registered.fn(spec, ctx)


def all_codes() -> set[str]:
    """Every code a rule can report (for the completeness test)."""
    from provisioner.validate.rules import compute, general, network, storage  # noqa: F401

    return {code for registered in RULES for code in registered.codes}
