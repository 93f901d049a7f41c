"""What the sandbox's EKS is made of: its documented durations and offerings, its errors,
resources with a lifecycle, and the lookups the handlers share (launch templates in moto's
EC2, a cluster that must be ACTIVE, a child resource that must exist)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provisioner.spec.defaults import KUBERNETES_VERSIONS

if TYPE_CHECKING:
    from provisioner.sandbox.eks import Eks

ACCOUNT = "123456789012"

#: Documented durations, seconds (before scaling).
DURATIONS = {
    "cluster-create": 600.0,
    "cluster-delete": 300.0,
    "nodegroup-create": 300.0,
    "nodegroup-delete": 300.0,
    "addon-create": 60.0,
    "addon-delete": 30.0,
}
VERSIONS = KUBERNETES_VERSIONS
#: Add-on -> (versions offered, newest first; does it run pods that need a node).
ADDONS: dict[str, tuple[tuple[str, ...], bool]] = {
    "vpc-cni": (("v1.20.4-eksbuild.1", "v1.19.6-eksbuild.7"), False),
    "kube-proxy": (("v1.33.3-eksbuild.6",), False),
    "coredns": (("v1.12.3-eksbuild.1", "v1.11.4-eksbuild.14"), True),
    "eks-pod-identity-agent": (("v1.3.8-eksbuild.2",), False),
    "aws-fsx-csi-driver": (("v1.7.0-eksbuild.1", "v1.6.0-eksbuild.1"), True),
}
CAPACITY_TYPES = ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK")
AMI_TYPES = (
    "AL2023_x86_64_STANDARD",
    "AL2023_x86_64_NVIDIA",
    "AL2023_ARM_64_NVIDIA",
    "AL2023_ARM_64_STANDARD",
    "CUSTOM",
)


class EksError(Exception):
    """An EKS error answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Item:
    """A resource with a lifecycle: CREATING until ``ready_at``, DELETING until ``gone_at``."""

    data: dict[str, Any]
    ready_at: float
    gone_at: float | None = None


def hardware(region: str, ng: dict[str, Any]) -> tuple[str, int]:
    """Instance type and EFA interfaces of a node group (from its launch template)."""
    data = template_data(region, ng.get("launchTemplate")) or {}
    itype = data.get("InstanceType") or (ng.get("instanceTypes") or ["m7i.2xlarge"])[0]
    efa = sum(
        1
        for i in data.get("NetworkInterfaces") or []
        if i.get("InterfaceType") in ("efa", "efa-only")
    )
    return itype, efa


def template_data(region: str, spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The launch template a node group names, as moto's EC2 stored it (None for none)."""
    if not spec:
        return None
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[ACCOUNT][region]
    lt_id = spec.get("id") or backend.launch_template_name_to_ids.get(spec.get("name", ""))
    template = backend.launch_templates.get(str(lt_id))
    if template is None:
        raise EksError(
            400,
            "InvalidParameterException",
            f"Launch template {spec.get('id') or spec.get('name')} does not exist",
        )
    version = str(spec.get("version", "")) or str(template.default_version_number)
    found = template.get_version(version) if version.isdigit() else template.latest_version()
    data: dict[str, Any] = found.data
    return data


def creating(item: Item) -> bool:
    """True while the resource is CREATING."""
    return bool(item.data["status"] == "CREATING")


def active(s: Eks, region: str, cluster: str) -> None:
    """Refuse, as EKS does, an operation on a cluster that is not ACTIVE."""
    if s._cluster(region, cluster).data["status"] != "ACTIVE":
        raise EksError(400, "InvalidRequestException", f"Cluster '{cluster}' is not ACTIVE")


def now() -> float:
    """EKS's createdAt: epoch seconds."""
    return time.time()


def child(items: dict[tuple[str, str, str], Item], key: tuple[str, str, str], missing: str) -> Item:
    """A node group or add-on of a cluster, or EKS's ResourceNotFoundException."""
    item = items.get(key)
    if item is None:
        raise EksError(404, "ResourceNotFoundException", missing)
    return item


def children(items: dict[tuple[str, str, str], Any], region: str, cluster: str) -> list[str]:
    """Names of a cluster's node groups, add-ons or access entries."""
    return sorted(k[2] for k in items if k[:2] == (region, cluster))


def start_delete(s: Eks, item: Item, duration: str) -> None:
    """DELETING now, gone after the documented duration (a repeated delete changes nothing)."""
    if item.gone_at is None:
        item.data["status"] = "DELETING"
        item.gone_at = s._after(duration)
