"""`fmctl validate`: load a spec file, check it offline, resolve its defaults."""

from __future__ import annotations

import sys

from provisioner.spec.source import SourceDoc, load_source, parse_source
from provisioner.validate import Validation, validate_document


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
