"""The in-cluster stack against a real Kubernetes API: a kind cluster in Docker.

The same code `fmctl up` uses (``kube_stack.manifests`` and ``_apply`` through
``KubeClient``) applies what ``render`` wrote for the p5en example, then checks what a real
API server did with it: every object there, owned by field manager fmctl; a second apply a
no-op; the FSx claim bound to its static volume; the GPU DaemonSets scheduled nowhere on
nodes without GPUs and the node exporter everywhere. Only the control plane runs: no GPU,
no EFA, no AWS. The module runs wherever `kind` and a Docker engine exist (`make e2e-kind`)
and is skipped, with the reason, elsewhere.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.catalog import load_catalog
from provisioner.drivers.kube import KubeClient
from provisioner.render.context import build_context
from provisioner.render.kubernetes import render_kubernetes
from provisioner.resources.kube_health import not_ready
from provisioner.resources.kube_stack import apply_all, manifests
from provisioner.spec.model import ClusterSpec
from provisioner.spec.source import load_source
from provisioner.validate import validate_document
from tests.render.helpers import FILLED

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "p5en-eks-fsx-s3.yaml"
#: Values `up` would learn from AWS; any well-formed ones do for the API server.
VALUES = FILLED


def _spec() -> ClusterSpec:
    doc, problems = load_source(str(EXAMPLE))
    assert not problems
    spec = validate_document(doc).resolved
    assert spec is not None
    return spec


def _why_not() -> str | None:
    if shutil.which("kind") is None:
        return "kind is not installed (https://kind.sigs.k8s.io); `make e2e-kind` runs this"
    if shutil.which("docker") is None:
        return "no docker command: kind runs Kubernetes nodes as Docker containers"
    probe = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=30)
    if probe.returncode != 0:
        return "no Docker engine is running (docker info failed)"
    return None


REASON = _why_not()
pytestmark = [pytest.mark.kind, pytest.mark.skipif(REASON is not None, reason=REASON or "")]


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh kind cluster for the module, deleted after it (also when a test fails)."""
    name = f"fmctl-e2e-{uuid.uuid4().hex[:6]}"
    path = tmp_path_factory.mktemp("kind") / "kubeconfig"
    subprocess.run(
        ["kind", "create", "cluster", "--name", name, "--kubeconfig", str(path), "--wait", "180s"],
        check=True,
        timeout=600,
    )
    try:
        yield path
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", name], check=False, timeout=300)


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    spec = _spec()
    files = render_kubernetes(build_context(spec, load_catalog()))
    return manifests(files, VALUES, spec.metadata.name)


@pytest.fixture(scope="module")
def api(kubeconfig: Path) -> Iterator[KubeClient]:
    client = KubeClient.from_kubeconfig(str(kubeconfig))
    yield client
    client.close()


def _live(api: KubeClient, obj: dict[str, Any]) -> dict[str, Any] | None:
    meta = obj["metadata"]
    return api.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace", ""))


def test_the_rendered_stack_applies_server_side(
    api: KubeClient, objects: list[dict[str, Any]]
) -> None:
    apply_all(api, objects)
    for obj in objects:
        live = _live(api, obj)
        assert live is not None, f"{obj['kind']} {obj['metadata']['name']} missing"
        managers = {f["manager"] for f in live["metadata"].get("managedFields", [])}
        assert "fmctl" in managers, (obj["kind"], managers)
        assert live["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "fmctl"


def test_applying_again_changes_nothing(api: KubeClient, objects: list[dict[str, Any]]) -> None:
    before = {id(o): (_live(api, o) or {})["metadata"]["resourceVersion"] for o in objects}
    apply_all(api, objects)
    after = {id(o): (_live(api, o) or {})["metadata"]["resourceVersion"] for o in objects}
    assert after == before


def test_the_stack_settles_on_nodes_without_gpus(
    api: KubeClient, objects: list[dict[str, Any]]
) -> None:
    """kind's node has no GPU label: the GPU DaemonSets want 0 pods there (so nothing
    waits on them), the node exporter runs, and the FSx claim binds its static volume."""
    deadline = time.monotonic() + 300
    while True:
        claim = api.get("v1", "PersistentVolumeClaim", "fsx", "training")
        if claim and claim.get("status", {}).get("phase") == "Bound":
            break
        assert time.monotonic() < deadline, f"FSx claim not bound: {claim}"
        time.sleep(2)
    for name in ("nvidia-device-plugin", "efa-device-plugin"):
        ds = api.get("apps/v1", "DaemonSet", name, "fmctl-system")
        assert ds is not None and ds.get("status", {}).get("desiredNumberScheduled", 0) == 0
    exporter = api.get("apps/v1", "DaemonSet", "node-exporter", "monitoring")
    assert exporter is not None
    assert exporter.get("status", {}).get("desiredNumberScheduled", 0) >= 1
    # What `up` would still wait for here: only what needs the images pulled and running.
    waiting = not_ready(api, objects, _spec().metadata.name)
    assert all("Deployment" in w or "DaemonSet" in w for w in waiting), waiting
