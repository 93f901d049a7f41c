"""The rules' registry: ``@rule("code")`` and what a rule may consult."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date

from provisioner.catalog import Catalog
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem

RuleFn = Callable[[ClusterSpec, "RuleContext"], Iterable[Problem]]


@dataclass(frozen=True)
class RuleContext:
    """What rules may consult besides the spec."""

    catalog: Catalog
    scheduler: str
    #: The day dated facts are judged on (EKS version support): today, unless a test says.
    today: date = field(default_factory=date.today)


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
