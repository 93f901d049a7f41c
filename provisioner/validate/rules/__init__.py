"""Offline rules: checks that need no credentials and no network.

A rule is a function from the typed spec (and a context with the catalog and the effective
scheduler) to problems. Rules register with ``@rule("code")``; the code appears in every
problem the rule reports, and the test suite checks that each registered code has a passing
and a failing case.
"""

from __future__ import annotations

from collections.abc import Iterator

from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem
from provisioner.validate.rules.registry import RULES, RuleContext, rule

__all__ = ["RuleContext", "all_codes", "rule", "run_rules"]


def run_rules(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Run every registered rule."""
    _register()
    for registered in RULES:
        yield from registered.fn(spec, ctx)


def all_codes() -> set[str]:
    """Every code a rule can report (for the completeness test)."""
    _register()
    return {code for registered in RULES for code in registered.codes}


def _register() -> None:
    """Import the rule modules for their registrations (here, so importing the package for
    RuleContext alone stays cheap and free of cycles)."""
    from provisioner.validate.rules import (  # noqa: F401
        compute,
        general,
        health,
        network,
        pcs,
        queueing,
        storage,
        ultraserver,
    )
