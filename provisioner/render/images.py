"""Container images fmctl deploys, pinned in one place.

Versions from shared/FACTS.md (checked November 2026): the NVIDIA device plugin and DCGM
exporter from NGC, the EFA device plugin from the region's EKS add-on registry (it must
be >= v0.5.10 so p6-b200's NVLink ``ibp*`` devices are not counted as EFA).
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioner.catalog.registries import dlc_registry, eks_addon_registry

EFA_DEVICE_PLUGIN = "eks/aws-efa-k8s-device-plugin:v0.5.20"
PYTORCH_DLC = "pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-ec2"
#: The Deep Learning Container for arm64 GPU nodes (p6e-gb200's Grace CPUs): the EC2 ARM64
#: PyTorch training image aws/deep-learning-containers lists ("Available images": EC2 ARM64
#: containers, PyTorch 2.7.0 training, GPU, py312).
PYTORCH_DLC_ARM64 = "pytorch-training-arm64:2.7.0-gpu-py312-cu128-ubuntu22.04-ec2"


def partition(region: str) -> str:
    """The AWS partition of a region."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


@dataclass(frozen=True)
class Images:
    """Every image a rendered manifest or chart uses."""

    nvidia_device_plugin: str = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    efa_device_plugin: str = f"{eks_addon_registry('us-east-1')}/{EFA_DEVICE_PLUGIN}"
    dcgm_exporter: str = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"
    node_exporter: str = "quay.io/prometheus/node-exporter:v1.10.2"
    kube_state_metrics: str = "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.17.0"
    prometheus: str = "quay.io/prometheus/prometheus:v3.7.3"
    grafana: str = "docker.io/grafana/grafana-oss:12.3.0"
    #: DCGM itself (dcgmi, nv-hostengine): `fmctl check` runs its diagnostic in it; the same
    #: DCGM release as the exporter's.
    dcgm: str = "nvcr.io/nvidia/cloud-native/dcgm:4.5.3-1-ubuntu22.04"
    #: Python, for fmctl's verify controller (a standard-library script): the Docker
    #: Official Image as ECR Public mirrors it (gallery.ecr.aws/docker/library/python), so
    #: pulling it needs no Docker Hub account and meets no Docker Hub rate limit.
    python: str = "public.ecr.aws/docker/library/python:3.12-slim"
    #: AWS Deep Learning Container: PyTorch with NCCL, aws-ofi-nccl and the EFA libraries.
    pytorch: str = f"{dlc_registry('us-east-1')}/{PYTORCH_DLC}"
    #: The same for arm64 nodes (the x86_64 image does not run there).
    pytorch_arm64: str = f"{dlc_registry('us-east-1')}/{PYTORCH_DLC_ARM64}"

    def pytorch_for(self, architecture: str) -> str:
        """The PyTorch image for nodes of ``architecture`` (the catalog's: x86_64 | arm64)."""
        return self.pytorch_arm64 if architecture == "arm64" else self.pytorch

    @classmethod
    def for_region(cls, region: str) -> Images:
        """The same images, from the ECR registry that serves them in ``region`` (ECR is
        regional, and opt-in regions use accounts of their own: catalog/registries.py)."""
        return cls(
            efa_device_plugin=f"{eks_addon_registry(region)}/{EFA_DEVICE_PLUGIN}",
            pytorch=f"{dlc_registry(region)}/{PYTORCH_DLC}",
            pytorch_arm64=f"{dlc_registry(region)}/{PYTORCH_DLC_ARM64}",
        )
