"""helm's renderings kept between runs (drivers/helm.py): the same inputs render once, read
back from the cache by the next process; anything a rendering depends on (the values, the
Kubernetes version, a file of the chart) renders again; a damaged entry is rendered over; the
cache is the user's alone and bounded."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from provisioner.catalog.charts import KUEUE
from provisioner.drivers import helm
from tests.conftest import SHARED, fetched_tool


@pytest.fixture()
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A helm that counts its runs (in ``runs``), a chart mirror of our own, an empty cache."""
    real = fetched_tool("helm")
    runs = tmp_path / "runs"
    wrapper = tmp_path / "helm"
    wrapper.write_text(f'#!/bin/sh\necho run >> "{runs}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    mirror = tmp_path / "charts"
    shutil.copytree(SHARED / "charts" / KUEUE.folder, mirror / KUEUE.folder)
    monkeypatch.setenv(helm.HELM_ENV, str(wrapper))
    monkeypatch.setenv(helm.MIRROR_ENV, str(mirror))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(helm, "_cache", {})
    return runs


REF = helm.ChartRef(KUEUE.name, KUEUE.version, KUEUE.repository, KUEUE.release, KUEUE.namespace)


def _runs(counted: Path) -> int:
    return len(counted.read_text().splitlines()) if counted.exists() else 0


def _next_process() -> None:
    """What a new fmctl process starts with: nothing rendered in memory."""
    helm._cache.clear()


def test_a_rendering_is_read_back_by_the_next_run_instead_of_running_helm(counted: Path) -> None:
    first = helm.template(REF, "", "1.35")
    assert _runs(counted) == 1 and any(d["kind"] == "CustomResourceDefinition" for d in first)
    _next_process()
    again = helm.template(REF, "", "1.35")
    assert again == first and _runs(counted) == 1
    # Each caller gets its own copy: changing one changes neither the cache nor the next.
    again[0]["metadata"]["name"] = "changed"
    assert helm.template(REF, "", "1.35") == first
    (kept,) = helm.cache_dir().glob("*.json")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(helm.cache_dir().stat().st_mode) == 0o700


def test_what_a_rendering_depends_on_renders_again(counted: Path, tmp_path: Path) -> None:
    helm.template(REF, "", "1.35")
    _next_process()
    helm.template(REF, "", "1.34")
    helm.template(REF, "enableCertManager: false\n", "1.35")
    assert _runs(counted) == 3
    # The chart's own files: a copy edited in the mirror is another chart.
    values = tmp_path / "charts" / KUEUE.folder / "values.yaml"
    values.write_text(values.read_text() + "\n# edited\n")
    _next_process()
    helm.template(REF, "", "1.35")
    assert _runs(counted) == 4


def test_a_damaged_entry_is_rendered_again(counted: Path) -> None:
    first = helm.template(REF, "", "1.35")
    (kept,) = helm.cache_dir().glob("*.json")
    kept.write_text('{"half": ')
    _next_process()
    assert helm.template(REF, "", "1.35") == first and _runs(counted) == 2


def test_the_cache_keeps_only_the_newest_renderings(
    counted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(helm, "CACHE_ENTRIES", 2)
    for version in ("1.33", "1.34", "1.35"):
        helm.template(REF, "", version)
    assert len(list(helm.cache_dir().glob("*.json"))) == 2
