"""`fmctl render`: validate, resolve defaults, render, write the deployment folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.ops.target import Target
from provisioner.ops.validate import load_and_validate
from provisioner.spec.model import ClusterSpec
from provisioner.validate import Validation


@dataclass
class RenderOutcome:
    """What `fmctl render` did: the validation, and on success the files written."""

    validation: Validation
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    placeholders: dict[str, set[str]] = field(default_factory=dict)
    #: How many values came from the live cluster (``--from-cluster``).
    filled: int = 0
    #: Resources that differ from the spec (their ids were still filled in).
    pending: tuple[str, ...] = ()


def path_in_repository(out: Path) -> str | None:
    """``out``'s path from the root of the Git work tree holding it ("." for the root),
    or None outside one: where Argo CD and Flux find the folder once it is committed."""
    folder = Path(os.path.abspath(out))
    for parent in (folder, *folder.parents):
        if (parent / ".git").exists():
            return folder.relative_to(parent).as_posix() or "."
    return None


def render_to(
    path: str,
    out: Path,
    scheduler: str | None = None,
    target_of: Callable[[ClusterSpec], Target] | None = None,
) -> RenderOutcome:
    """Render the spec at ``path`` into ``out`` (nothing is written when it is invalid, or
    when ``target_of`` is given, the target the valid spec names, and the live cluster
    cannot fill every placeholder)."""
    from provisioner.catalog import load_catalog
    from provisioner.render import render, write

    validation = load_and_validate(path, scheduler)
    outcome = RenderOutcome(validation)
    if not validation.ok or validation.resolved is None:
        return outcome
    spec, catalog = validation.resolved, load_catalog()
    repo_path = path_in_repository(out)
    rendered = render(spec, catalog, repo_path=repo_path)
    if target_of is not None:
        from provisioner.ops.fill import from_cluster

        names = {n for names in rendered.placeholders().values() for n in names}
        live = from_cluster(spec, target_of(spec), names)
        rendered = render(spec, catalog, repo_path=repo_path, filled=live.filled)
        outcome.filled, outcome.pending = len(live.filled.values), live.pending
    outcome.removed = write(rendered, out)
    outcome.written = list(rendered.files)
    outcome.placeholders = rendered.placeholders()
    return outcome
