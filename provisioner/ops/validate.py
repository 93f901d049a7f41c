"""`fmctl validate`: load a spec file, check it offline, resolve its defaults."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from provisioner.spec.source import SourceDoc, load_source, parse_source
from provisioner.validate import Validation, validate_document

__all__ = ["Validation", "check_online", "load_and_validate", "name_refusal"]

if TYPE_CHECKING:
    from provisioner.ops.target import Target


def load_and_validate(path: str, scheduler: str | None = None) -> Validation:
    """Read ``path`` (``-`` for standard input) and validate it; never raises on bad input."""
    doc: SourceDoc
    if path == "-":
        from provisioner.spec.source import MAX_SPEC_BYTES, decode_text

        raw = sys.stdin.buffer.read(MAX_SPEC_BYTES + 1)
        text, problem = decode_text(raw[:MAX_SPEC_BYTES])
        if text is None:
            assert problem is not None
            return Validation(SourceDoc("<stdin>", ""), [problem])
        doc, problems = parse_source(text, "<stdin>")
    else:
        doc, problems = load_source(path)
    if problems:
        return Validation(doc, problems)
    return validate_document(doc, scheduler)


def name_refusal(name: str) -> tuple[str, str] | None:
    """Why ``name`` (a command's NAME) cannot be a cluster's, and the rule, or None."""
    from provisioner.validate.rules.general import NAME_RULE, is_cluster_name

    if is_cluster_name(name):
        return None
    return f"{name!r} is not a cluster name: no fmctl cluster can have it", NAME_RULE


def check_online(validation: Validation, target: Target) -> Validation:
    """The online checks (the AZ offers each type, reservations exist and fit, quotas):
    their problems, located in the same document. AWS's errors propagate (the caller
    translates them)."""
    from provisioner.catalog import load_catalog
    from provisioner.validate.online import online_problems

    assert validation.resolved is not None
    problems = online_problems(target.aws(read_only=True), validation.resolved, load_catalog())
    return Validation(validation.doc, problems)
