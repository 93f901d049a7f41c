"""The EKS check pod's commands, run as its containers run them: in a stand-in filesystem
shaped like each container's image (tests/tools/standin), with the pod's own command, env
and ConfigMap, and a node's recorded fi_info (p5.48xlarge, libfabric 2.x, 32 devices).

Image shapes (what each image carries that node-check.sh needs):
- DCGM's image (nvcr.io/nvidia/cloud-native/dcgm, Ubuntu 22.04): DCGM, and nvidia-smi from
  the NVIDIA container toolkit; no rdma-core (NVIDIA's Dockerfile installs
  datacenter-gpu-manager only), so libfabric's efa provider finds no device there even with
  the host's /opt/amazon/efa mounted (the check pod's former layout).
- The AWS Deep Learning Container (pytorch-training ...-ec2): the EFA installer's user space,
  /opt/amazon/efa and rdma-core with its EFA provider (the DLC Dockerfiles run the EFA
  installer with --skip-kmod), and the node's EFA devices from the device plugin.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.catalog import load_catalog
from provisioner.check.kube_gather import NodeState, Selection, node_manifests
from provisioner.check.outputs import efa_report
from provisioner.check.results import split_stream
from provisioner.render.context import build_context
from provisioner.spec.source import load_source
from provisioner.validate import validate_document
from tests.tools.standin import recorded, rootfs
from tests.tools.standin.node import StandinNode

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "check"
#: Docker's default PATH, which these images keep.
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
pytestmark = rootfs.required()


def _shape(node: StandinNode, image: str) -> None:
    """Make the stand-in's filesystem carry what ``image`` carries (see the module doc)."""
    if "/cloud-native/dcgm:" in image:
        for path in (
            node.path("/etc/libibverbs.d/efa.driver"),
            *node.path("/usr/lib/x86_64-linux-gnu").glob("libefa.so*"),
        ):
            path.unlink()
    elif "/pytorch-training:" not in image:
        raise AssertionError(f"no shape recorded for image {image}")
    # The node's own devices and driver, the same whatever the image.
    node.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32), 2))
    node.write("/etc/standin/nvidia-smi.csv", (DATA / "nvidia-smi-p5en.csv").read_text())
    node.write("/etc/standin/dcgmi-diag.json", (DATA / "dcgmi-diag-healthy.json").read_text())


def _pod(example: str = "p5en-eks-fsx-s3.yaml") -> tuple[dict[str, Any], dict[str, str], str]:
    doc, _ = load_source(str(ROOT / "examples" / example))
    spec = validate_document(doc, "kubernetes").resolved
    assert spec is not None
    context = build_context(spec, load_catalog())
    pool = context.pools[0]
    node = NodeState("ip-10-0-1-5", pool.name, True, False, pool.gpus, pool.efa_devices)
    objects, _ = node_manifests(
        context, Selection(chosen={pool.name: [node]}), "fmctl-check-x", 600
    )
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    job = next(o for o in objects if o["kind"] == "Job")
    return job["spec"]["template"]["spec"], config["data"], node.name


def _run(container: dict[str, Any], scripts: dict[str, str], node_name: str, image: str) -> str:
    """The container's command in a stand-in shaped like ``image``; its log."""
    node = StandinNode(rootfs.ensure(), "check-pod")
    try:
        _shape(node, image)
        for name, text in scripts.items():
            node.write(f"/opt/fmctl/{name}", text, 0o755)
        env = {"PATH": IMAGE_PATH}
        for item in container.get("env", []):
            env[item["name"]] = node_name if "valueFrom" in item else str(item["value"])
        done = node.run(container["command"], env=env)
        return done.stdout + done.stderr
    finally:
        node.stop()


@pytest.fixture(scope="module")
def pod() -> Iterator[tuple[dict[str, Any], dict[str, str], str]]:
    yield _pod()


def test_the_efa_part_runs_where_the_efa_user_space_is(
    pod: tuple[dict[str, Any], dict[str, str], str], tmp_path: Path
) -> None:
    spec, scripts, node_name = pod
    containers = {c["name"]: c for c in spec["containers"]}
    assert set(containers) == {"gpu", "efa"}
    efa = containers["efa"]
    assert efa["resources"]["limits"]["vpc.amazonaws.com/efa"] == 16  # p5en
    log = _run(efa, scripts, node_name, efa["image"])
    split_stream(log, tmp_path)
    folder = tmp_path / "nodes" / node_name
    report = efa_report(
        (folder / "efa-devices.txt").read_text(), (folder / "fi_info.txt").read_text()
    )
    # The stand-in's recording is a p5's 32 devices: what the node's fi_info printed.
    assert len(report.domains) == 32, log
    assert not (folder / "nvidia-smi.csv").exists()  # the GPU part is the other container's


def test_the_dcgm_image_alone_sees_no_efa_device(
    pod: tuple[dict[str, Any], dict[str, str], str], tmp_path: Path
) -> None:
    """The former layout (node-check.sh's EFA part in DCGM's image): 0 devices, fi_getinfo
    -61: what made `fmctl check` fail every healthy EFA node on EKS."""
    spec, scripts, node_name = pod
    gpu = next(c for c in spec["containers"] if c["name"] == "gpu")
    former = {**gpu, "env": [*gpu["env"][:-1], {"name": "FMCTL_CHECK_PARTS", "value": "gpu efa"}]}
    log = _run(former, scripts, node_name, gpu["image"])
    split_stream(log, tmp_path)
    folder = tmp_path / "nodes" / node_name
    report = efa_report(
        (folder / "efa-devices.txt").read_text(), (folder / "fi_info.txt").read_text()
    )
    assert report.domains == [] and report.error == "fi_getinfo: -61 (No data available)"
    # Its GPU part is fine there: all 8 H200s.
    assert len((folder / "nvidia-smi.csv").read_text().splitlines()) == 8
