"""A GB200 (arm64) EKS cluster renders arm64 throughout: the system nodes on Graviton with
EKS's arm64 AMI type, the GPU nodes on the arm64 NVIDIA AMI, and the NCCL test and the
training chart on the arm64 PyTorch Deep Learning Container. x86_64 ones are untouched."""

from __future__ import annotations

from typing import Any

import yaml

from provisioner.catalog import load_catalog
from provisioner.drivers import yamlio
from provisioner.render import render
from provisioner.render.images import PYTORCH_DLC, PYTORCH_DLC_ARM64
from tests.conftest import ROOT, set_path, validate_data

EXAMPLE = ROOT / "examples/p6-b300-eks-capacity-block.yaml"
POOL = ("compute", "gpuPools", 0)


def _files(*edits: tuple[tuple[Any, ...], Any]) -> dict[str, str]:
    data = yaml.safe_load(EXAMPLE.read_text())
    for path, value in edits:
        data = set_path(data, path, value)
    result = validate_data(data)
    assert result.ok and result.resolved is not None, result.problems
    return render(result.resolved, load_catalog()).files


def _job_image(files: dict[str, str]) -> str:
    docs = [d for d in yamlio.load_all(files["kubernetes/nccl-test/job.yaml"]) if d]
    (job,) = [d for d in docs if d["kind"] == "Job"]
    image: str = job["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def test_a_gb200_cluster_is_arm64_throughout() -> None:
    files = _files(((*POOL, "instanceType"), "p6e-gb200.36xlarge"), ((*POOL, "count"), 18))
    system = yaml.safe_load(files["aws/nodegroups/system.yaml"])
    assert system["amiType"] == "AL2023_ARM_64_STANDARD"
    assert system["instanceTypes"] == ["m7g.2xlarge"]
    gpu = yaml.safe_load(files["aws/nodegroups/b300.yaml"])
    assert gpu["amiType"] == "AL2023_ARM_64_NVIDIA"
    assert _job_image(files).endswith("/" + PYTORCH_DLC_ARM64)
    values = yaml.safe_load(files["charts/values-b300-eval.yaml"])
    assert values["image"].endswith("/" + PYTORCH_DLC_ARM64)


def test_x86_clusters_keep_their_images_and_a_chosen_system_type_stays() -> None:
    files = _files()
    assert yaml.safe_load(files["aws/nodegroups/system.yaml"])["amiType"] == (
        "AL2023_x86_64_STANDARD"
    )
    assert _job_image(files).endswith("/" + PYTORCH_DLC)
    chosen = _files(
        ((*POOL, "instanceType"), "p6e-gb200.36xlarge"),
        ((*POOL, "count"), 18),
        (("compute", "systemNodes"), {"instanceType": "m7i.2xlarge"}),
    )
    system = yaml.safe_load(chosen["aws/nodegroups/system.yaml"])
    # Written out, the user's type stays (EKS runs mixed architectures).
    assert system["instanceTypes"] == ["m7i.2xlarge"]
    assert system["amiType"] == "AL2023_x86_64_STANDARD"
