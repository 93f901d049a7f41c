"""Offline validation: structure (types, unknown keys) then the registered rules.

Online checks (quotas, reservations, AZ offerings) need credentials and live elsewhere; this
package never touches the network.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provisioner.catalog import Catalog, load_catalog
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Position, Problem, has_errors
from provisioner.spec.resolve import resolve
from provisioner.spec.source import SourceDoc
from provisioner.validate.rules import RuleContext, run_rules
from provisioner.validate.structure import check_structure, suppressed

#: Problems about a key itself (not its value) point at the key.
KEY_CODES = frozenset({"unknown-key", "missing-key", "yaml-duplicate-key"})


@dataclass
class Validation:
    """The outcome of validating one document."""

    doc: SourceDoc
    problems: list[Problem] = field(default_factory=list)
    spec: ClusterSpec | None = None
    resolved: ClusterSpec | None = None

    @property
    def ok(self) -> bool:
        """True when there is no error (warnings allowed)."""
        return not has_errors(self.problems)

    def position(self, problem: Problem) -> Position:
        """Where ``problem`` is in the source file."""
        if problem.position is not None:
            return problem.position
        return self.doc.locate(problem.path, prefer_key=problem.code in KEY_CODES)


def validate_document(
    doc: SourceDoc,
    scheduler: str | None = None,
    catalog: Catalog | None = None,
) -> Validation:
    """Validate a parsed document; ``scheduler`` overrides the spec's own."""
    result = Validation(doc)
    catalog = catalog or load_catalog()
    structure = check_structure(doc.data)
    result.problems.extend(structure.problems)
    spec = structure.spec
    if spec is not None:
        ctx = RuleContext(catalog=catalog, scheduler=scheduler or spec.scheduler)
        result.problems.extend(
            p for p in run_rules(spec, ctx) if not suppressed(p, structure.dropped)
        )
        result.spec = spec
        if result.ok:
            result.resolved = resolve(spec, catalog, scheduler)
    result.problems.sort(key=lambda p: (result.position(p).line, result.position(p).column))
    return result
