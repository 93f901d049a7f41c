"""Container images fmctl deploys, pinned in one place.

Versions from shared/FACTS.md (checked November 2026): the NVIDIA device plugin and DCGM
exporter from NGC, the EFA device plugin from the EKS ECR account of the partition (it must
be >= v0.5.10 so p6-b200's NVLink ``ibp*`` devices are not counted as EFA).
"""

from __future__ import annotations

from dataclasses import dataclass

#: EKS's ECR account for add-on images, by partition (us-east-1 and most commercial regions).
EKS_ECR_ACCOUNT = {"aws": "602401143452", "aws-cn": "918309763551", "aws-us-gov": "013241004608"}


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
    efa_device_plugin: str = (
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"
    )
    dcgm_exporter: str = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"
    node_exporter: str = "quay.io/prometheus/node-exporter:v1.10.2"
    kube_state_metrics: str = "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.17.0"
    prometheus: str = "quay.io/prometheus/prometheus:v3.7.3"
    grafana: str = "docker.io/grafana/grafana-oss:12.3.0"
    #: DCGM itself (dcgmi, nv-hostengine): `fmctl check` runs its diagnostic in it; the same
    #: DCGM release as the exporter's.
    dcgm: str = "nvcr.io/nvidia/cloud-native/dcgm:4.5.3-1-ubuntu22.04"
    #: AWS Deep Learning Container: PyTorch with NCCL, aws-ofi-nccl and the EFA libraries.
    pytorch: str = (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:"
        "2.8.0-gpu-py312-cu129-ubuntu22.04-ec2"
    )

    @classmethod
    def for_region(cls, region: str) -> Images:
        """The same images, with ECR addresses in ``region`` (ECR is regional)."""
        suffix = ".com.cn" if partition(region) == "aws-cn" else ".com"
        account = EKS_ECR_ACCOUNT[partition(region)]
        base = cls()
        return cls(
            efa_device_plugin=f"{account}.dkr.ecr.{region}.amazonaws{suffix}/eks/"
            "aws-efa-k8s-device-plugin:v0.5.20",
            pytorch=base.pytorch.replace("us-east-1", region).replace(".com", suffix),
        )
