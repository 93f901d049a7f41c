"""Golden files: every example, both schedulers, byte for byte; and determinism.

`make golden` (FMCTL_UPDATE_GOLDEN=1) rewrites tests/golden/ from the examples; review the
diff like any code change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from provisioner.catalog import load_catalog
from provisioner.render import INDEX, Rendered, render, write
from tests.render.helpers import CASE_IDS, CASES, rendered
from tests.render.helpers import rendered as cached

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("FMCTL_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize(("example", "scheduler"), CASES, ids=CASE_IDS)
def test_matches_golden(example: Path, scheduler: str) -> None:
    folder = GOLDEN / example.stem / scheduler
    files = rendered(example, scheduler).files
    if UPDATE:
        write(Rendered(files), folder)
        (folder / INDEX).unlink()
    on_disk = {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}
    assert sorted(on_disk) == sorted(files), "files differ; run `make golden` and review"
    for path, text in files.items():
        assert on_disk[path] == text, f"{path} differs from golden; run `make golden`"


@pytest.mark.parametrize(("example", "scheduler"), CASES, ids=CASE_IDS)
def test_rendering_twice_gives_identical_bytes(example: Path, scheduler: str) -> None:
    first = cached(example, scheduler)
    from provisioner.spec.source import load_source
    from provisioner.validate import validate_document

    doc, _ = load_source(str(example))
    spec = validate_document(doc, scheduler).resolved
    assert spec is not None
    assert render(spec, load_catalog()).files == first.files


def test_write_removes_only_its_own_stale_files(tmp_path: Path) -> None:
    example, _ = CASES[0]
    files = dict(rendered(example, "kubernetes").files)
    write(Rendered(files), tmp_path)
    (tmp_path / "kubernetes" / "mine.yaml").write_text("kept: true\n")
    fewer = {k: v for k, v in files.items() if not k.startswith("gitops/")}
    removed = write(Rendered(fewer), tmp_path)
    assert sorted(removed) == sorted(k for k in files if k.startswith("gitops/"))
    assert not (tmp_path / "gitops" / "argocd-application.yaml").exists()
    assert (tmp_path / "kubernetes" / "mine.yaml").read_text() == "kept: true\n"
