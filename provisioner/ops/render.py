"""`fmctl render`: validate, resolve defaults, render, write the deployment folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from provisioner.ops.validate import load_and_validate
from provisioner.validate import Validation


@dataclass
class RenderOutcome:
    """What `fmctl render` did: the validation, and on success the files written."""

    validation: Validation
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    placeholders: dict[str, set[str]] = field(default_factory=dict)


def render_to(path: str, out: Path, scheduler: str | None = None) -> RenderOutcome:
    """Render the spec at ``path`` into ``out`` (nothing is written when it is invalid)."""
    from provisioner.catalog import load_catalog
    from provisioner.render import render, write

    validation = load_and_validate(path, scheduler)
    outcome = RenderOutcome(validation)
    if not validation.ok or validation.resolved is None:
        return outcome
    rendered = render(validation.resolved, load_catalog())
    outcome.removed = write(rendered, out)
    outcome.written = list(rendered.files)
    outcome.placeholders = rendered.placeholders()
    return outcome
