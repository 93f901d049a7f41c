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


def template(
    chart: ChartRef, values: str, kube_version: str, mirror: str | None = None
) -> list[dict[str, Any]]:
    """The chart's objects (CRDs included) for a cluster of ``kube_version`` ("1.35"), with
    ``values`` (YAML). The same inputs render once per process (plan and apply both ask)."""
    from provisioner.drivers import yamlio

    args = source_args(chart, mirror)
    key = hashlib.sha256("\0".join([*args, values, kube_version]).encode()).hexdigest()
    with _lock:
        if key in _cache:
            return copy.deepcopy(_cache[key])
    helm = find_helm()
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
        _cache[key] = docs
    return copy.deepcopy(docs)
