"""Rendering: a resolved spec becomes a deployment folder of configs and manifests.

Pure: typed context (``context``) -> Jinja templates (``templates/``) -> text, and every YAML
or JSON file parsed back before anything is written. Deterministic: the same spec gives the
same bytes. Writing is the only I/O (``write``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from provisioner import FmctlBug
from provisioner.catalog import Catalog
from provisioner.render import placeholders
from provisioner.render.context import ClusterContext, build_context
from provisioner.spec.model import ClusterSpec

#: Lists the files the last render wrote, so a re-render removes files it no longer makes
#: (a renamed pool) without touching files a person added to the folder.
INDEX = ".fmctl-render.json"


class RenderError(FmctlBug):
    """A rendered file failed its parse-back check (a bug in a template, not in the spec)."""


@dataclass(frozen=True)
class Rendered:
    """Rendered files by relative path."""

    files: dict[str, str]

    def placeholders(self) -> dict[str, set[str]]:
        """Placeholder names per file, for files that have any."""
        out = {
            path: placeholders.find(text)
            for path, text in self.files.items()
            if not path.endswith(".md")
        }
        return {path: names for path, names in out.items() if names}


@dataclass(frozen=True)
class Filled:
    """The live cluster's values for the placeholders (``render --from-cluster``), and where
    each was read from (said in PLACEHOLDERS.md)."""

    values: tuple[tuple[str, str], ...]
    sources: tuple[tuple[str, str], ...]


def _check_parses(files: dict[str, str]) -> None:
    import yaml

    from provisioner.drivers import yamlio

    for path, text in files.items():
        try:
            if path.endswith((".yaml", ".yml")):
                list(yamlio.load_all(text))
            elif path.endswith(".json"):
                json.loads(text)
        except (yaml.YAMLError, ValueError) as exc:
            raise RenderError(f"rendered {path} does not parse: {exc}") from exc


def _folder_docs(
    c: ClusterContext, files: dict[str, str], used: dict[str, list[str]], filled: Filled | None
) -> dict[str, str]:
    from provisioner.render.engine import render_template

    return {
        "README.md": render_template("README.md.j2", c=c, files=sorted(files)),
        "PLACEHOLDERS.md": render_template(
            "PLACEHOLDERS.md.j2",
            c=c,
            used=sorted(used.items()),
            known=placeholders.KNOWN,
            families=placeholders.FAMILIES,
            values=dict(filled.values) if filled else {},
            sources=dict(filled.sources) if filled else {},
        ),
    }


def render(
    spec: ClusterSpec,
    catalog: Catalog,
    *,
    repo_path: str | None = None,
    filled: Filled | None = None,
) -> Rendered:
    """Render a resolved spec for its scheduler.

    ``repo_path`` is the folder's path in its Git repository when the spec does not say
    (gitops.path); ``filled`` writes the live cluster's values instead of placeholders (a
    placeholder without a value is an error, never left in)."""
    context = build_context(spec, catalog)
    if repo_path is not None and not context.git_path:
        context = dataclasses.replace(context, git_path=repo_path)
    if filled is not None:
        context = dataclasses.replace(context, filled=True)
    if context.scheduler == "slurm" and context.pcs is not None:
        from provisioner.render.pcs import render_pcs

        files = render_pcs(context)
    elif context.scheduler == "slurm":
        from provisioner.render.slurm import render_slurm

        files = render_slurm(context)
    else:
        from provisioner.render.kubernetes import render_kubernetes

        files = render_kubernetes(context)
    used: dict[str, list[str]] = {}
    for path, text in sorted(files.items()):
        for name in sorted(placeholders.find(text)):
            used.setdefault(name, []).append(path)
    if filled is not None:
        values = dict(filled.values)
        files = {path: placeholders.fill(text, values) for path, text in files.items()}
    files.update(_folder_docs(context, files, used, filled))
    _check_parses(files)
    return Rendered(dict(sorted(files.items())))


def write(rendered: Rendered, out: Path) -> list[str]:
    """Write the files under ``out``; remove files an earlier render wrote and this one did
    not. Returns the paths removed."""
    out.mkdir(parents=True, exist_ok=True)
    index = out / INDEX
    previous: list[str] = []
    if index.is_file():
        try:
            previous = list(json.loads(index.read_text()).get("files", []))
        except (ValueError, AttributeError):
            previous = []
    removed = []
    for stale in sorted(set(previous) - set(rendered.files)):
        target = out / stale
        if target.is_file() and out.resolve() in target.resolve().parents:
            target.unlink()
            removed.append(stale)
    for path, text in rendered.files.items():
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)
    index.write_text(json.dumps({"files": sorted(rendered.files)}, indent=1) + "\n")
    return removed
