"""Upstream Helm charts, rendered with the real ``helm template``: the objects `up` applies
server-side (as Argo CD does with a Helm source; Helm's own release records are not kept,
so `helm list` does not show them).

Where the chart comes from: its registry (an ``oci://`` reference, or a Helm repository with
``--repo``) at the pinned version, or a local copy of the same release in the folder
``FMCTL_CHART_MIRROR`` names (``<name>-<version>/``; what the tests and the sandbox use, the
machines they run on reaching no chart registry). Which helm: ``FMCTL_HELM``, else ``helm``
on PATH, else the one beside this Python (a virtualenv's bin/).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.drivers.aws import AwsError

HELM_ENV = "FMCTL_HELM"
MIRROR_ENV = "FMCTL_CHART_MIRROR"
#: helm 3.8 pulls OCI charts without the experimental flag.
MIN_HELM = (3, 8)


class HelmError(AwsError):
    """helm is missing, or could not render a chart."""


@dataclass(frozen=True)
class ChartRef:
    """Which chart to render, and as what release."""

    name: str
    version: str
    #: ``oci://...`` or an https Helm repository.
    repository: str
    release: str
    namespace: str

    @property
    def folder(self) -> str:
        """Its folder in a mirror."""
        return f"{self.name}-{self.version}"


def find_helm() -> str:
    """The helm to run, or HelmError saying how to get one."""
    named = os.environ.get(HELM_ENV)
    if named:
        if os.access(named, os.X_OK):
            return named
        raise HelmError(f"{HELM_ENV}={named} is not an executable", "point it at a helm 3.8+")
    found = shutil.which("helm") or str(Path(sys.executable).with_name("helm"))
    if not os.access(found, os.X_OK):
        raise HelmError(
            "helm is not installed: fmctl renders Kueue's and NVIDIA's charts with it",
            "install helm 3.8 or newer (https://helm.sh/docs/intro/install/), or set "
            f"{HELM_ENV}; or set kubernetes.queueing: none",
        )
    return found


def source_args(chart: ChartRef, mirror: str | None = None) -> list[str]:
    """`helm template`'s chart arguments: the mirror's folder, or the registry and version."""
    folder = mirror if mirror is not None else os.environ.get(MIRROR_ENV)
    if folder:
        local = Path(folder) / chart.folder
        if not (local / "Chart.yaml").is_file():
            raise HelmError(
                f"the chart mirror {folder} has no {chart.folder}/",
                f"copy {chart.name} {chart.version} there, or unset {MIRROR_ENV} to pull it "
                f"from {chart.repository}",
            )
        return [str(local)]
    if chart.repository.startswith("oci://"):
        return [chart.repository, "--version", chart.version]
    return [chart.name, "--repo", chart.repository, "--version", chart.version]


_cache: dict[str, list[dict[str, Any]]] = {}
_lock = threading.Lock()
#: Renderings kept on disk (the newest ones; each is about a megabyte for Kueue's chart).
CACHE_ENTRIES = 64


def cache_dir() -> Path:
    """Where renderings are kept between runs: ``$XDG_CACHE_HOME/fmctl/helm`` (the XDG base
    directory for caches, ``~/.cache`` unset). Deleting it only costs the next run a render."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fmctl" / "helm"


def _key(helm: str, chart: ChartRef, args: list[str], values: str, kube_version: str) -> str:
    """What a rendering depends on: helm's binary (its path, size and time: another helm may
    render otherwise), the chart (a mirror folder by the bytes of its files; a registry's by
    reference and version, which a release does not change), the release, the namespace, the
    values and the Kubernetes version."""
    digest = hashlib.sha256()
    binary = os.stat(helm)
    for part in (
        helm,
        str(binary.st_size),
        str(binary.st_mtime_ns),
        chart.release,
        chart.namespace,
    ):
        digest.update(part.encode() + b"\0")
    for arg in args:
        digest.update(arg.encode() + b"\0")
    if len(args) == 1:  # a mirror's folder (source_args)
        folder = Path(args[0])
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    digest.update(values.encode() + b"\0" + kube_version.encode())
    return digest.hexdigest()


def _from_disk(key: str) -> list[dict[str, Any]] | None:
    try:
        docs = json.loads((cache_dir() / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if isinstance(docs, list) and all(isinstance(d, dict) for d in docs):
        return docs
    return None


def _to_disk(key: str, docs: list[dict[str, Any]]) -> None:
    """Keep a rendering (private to the user: 0700 folder, 0600 files; written whole, then
    renamed, so a reader never sees half of one); the oldest beyond CACHE_ENTRIES go. A cache
    that cannot be written (a read-only home) is no error."""
    folder = cache_dir()
    try:
        text = json.dumps(docs)
    except (TypeError, ValueError):  # a value JSON cannot hold (a YAML timestamp): not kept
        return
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".render-", dir=folder)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, folder / f"{key}.json")
        kept = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[CACHE_ENTRIES:]:
            old.unlink(missing_ok=True)
    except OSError:
        return


def template(
    chart: ChartRef, values: str, kube_version: str, mirror: str | None = None
) -> list[dict[str, Any]]:
    """The chart's objects (CRDs included) for a cluster of ``kube_version`` ("1.35"), with
    ``values`` (YAML). The same inputs render once per process (plan and apply both ask), and
    once per machine while the rendering stays in ``cache_dir()``: every EKS plan asks, and
    helm's run and the parse of its output (a megabyte of CRDs) took a third of a second."""
    from provisioner.drivers import yamlio

    args = source_args(chart, mirror)
    # Within a process the inputs' names suffice (the chart's files are read once, below).
    named = [*args, chart.release, chart.namespace, values, kube_version]
    seen = hashlib.sha256("\0".join(named).encode()).hexdigest()
    with _lock:
        if seen in _cache:
            return copy.deepcopy(_cache[seen])
    helm = find_helm()
    key = _key(helm, chart, args, values, kube_version)
    kept = _from_disk(key)
    if kept is not None:
        with _lock:
            _cache[seen] = kept
        return copy.deepcopy(kept)
    with tempfile.TemporaryDirectory(prefix="fmctl-helm-") as tmp:
        values_file = Path(tmp) / "values.yaml"
        values_file.write_text(values)
        home = Path(tmp) / "home"
        env = {
            **os.environ,
            # A home of its own: no repositories or registry logins of the user's are read
            # or written.
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        command = [
            helm,
            "template",
            chart.release,
            *args,
            "--namespace",
            chart.namespace,
            "--include-crds",
            "--kube-version",
            f"{kube_version}.0",
            "--values",
            str(values_file),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=300, env=env, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HelmError(f"helm template {chart.name} failed: {exc}") from exc
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise HelmError(
            f"helm template {chart.name} {chart.version} failed: "
            + ("; ".join(said[-3:]) or f"exit status {done.returncode}"),
            f"a registry that cannot be reached: set {MIRROR_ENV} to a folder with {chart.folder}/",
        )
    docs = [d for d in yamlio.load_all(done.stdout) if isinstance(d, dict) and d]
    with _lock:
        _cache[seen] = docs
    _to_disk(key, docs)
    return copy.deepcopy(docs)
