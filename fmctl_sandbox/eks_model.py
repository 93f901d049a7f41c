"""What the sandbox's EKS is made of: its documented durations and offerings, its errors,
resources with a lifecycle (creation, updates, deletion), and the lookups the handlers share
(launch templates in moto's EC2, a cluster that must be ACTIVE, a child resource that must
exist).

Its facts are its own, not fmctl's (a mistake in fmctl's tables must show against them):
versions and add-on offerings are modelled on what EKS's DescribeAddonVersions answers in
shape — one version of kube-proxy per Kubernetes minor, the others compatible with every
supported version — and the instance hardware comes from moto's DescribeInstanceTypes data.
"""

from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol

#: Documented durations, seconds (before scaling). Creation and deletion as before; updates:
#: a control-plane version update and a rolling node update take the longest (EKS's docs
#: give no figure; these are the sandbox's), a scaling or config change a few minutes.
DURATIONS = {
    "cluster-create": 600.0,
    "cluster-delete": 300.0,
    "cluster-version": 1200.0,
    "cluster-config": 300.0,
    "nodegroup-create": 300.0,
    "nodegroup-delete": 300.0,
    "nodegroup-config": 240.0,
    "nodegroup-version": 600.0,
    "addon-create": 60.0,
    "addon-update": 60.0,
    "addon-delete": 30.0,
}
#: Kubernetes versions the sandbox's EKS has known.
VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
#: When EKS stops offering a version: the end of its extended support (endoflife.date's
#: amazon-eks table, read 2026-02; EKS's release calendar in its User Guide gives the same).
#: 1.36 was not in that table: no end known. A source of its own, not fmctl's catalog, so a
#: mistake in fmctl's calendar shows against it.
END_OF_EXTENDED = {
    "1.30": date(2026, 7, 23),
    "1.31": date(2026, 11, 26),
    "1.32": date(2027, 3, 23),
    "1.33": date(2027, 7, 29),
    "1.34": date(2027, 12, 2),
    "1.35": date(2028, 3, 27),
}


def offered(today: date | None = None) -> tuple[str, ...]:
    """The versions a new cluster or an upgrade may ask for on ``today`` (EKS refuses a
    version past its extended support)."""
    day = today or date.today()
    return tuple(v for v in VERSIONS if v not in END_OF_EXTENDED or day < END_OF_EXTENDED[v])


#: Add-on -> (versions, newest first, each with the cluster versions it is the default for
#: (None: every version); does it run pods that need a node).
ADDONS: dict[str, tuple[tuple[tuple[str, tuple[str, ...] | None], ...], bool]] = {
    "vpc-cni": ((("v1.20.4-eksbuild.1", None), ("v1.19.6-eksbuild.7", ())), False),
    "kube-proxy": (
        tuple(
            (f"v{v}.{patch}-eksbuild.{build}", (v,))
            for v, patch, build in (
                ("1.36", 0, 1),
                ("1.35", 1, 2),
                ("1.34", 1, 3),
                ("1.33", 3, 6),
                ("1.32", 6, 12),
                ("1.31", 10, 15),
                ("1.30", 14, 19),
            )
        ),
        False,
    ),
    "coredns": ((("v1.12.3-eksbuild.1", None), ("v1.11.4-eksbuild.14", ())), True),
    "eks-pod-identity-agent": ((("v1.3.8-eksbuild.2", None),), False),
    "aws-fsx-csi-driver": ((("v1.7.0-eksbuild.1", None), ("v1.6.0-eksbuild.1", ())), True),
    # A DaemonSet that tolerates every taint (aws/eks-node-monitoring-agent's chart values at
    # 51af549); the version as public Terraform configs pin it.
    "eks-node-monitoring-agent": ((("v1.4.0-eksbuild.2", None),), False),
}
CAPACITY_TYPES = ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK")
AMI_TYPES = (
    "AL2023_x86_64_STANDARD",
    "AL2023_x86_64_NVIDIA",
    "AL2023_ARM_64_NVIDIA",
    "AL2023_ARM_64_STANDARD",
    "CUSTOM",
)
#: GPUs of types moto's DescribeInstanceTypes data lacks them for (AWS's instance type page:
#: p6e-gb200.36xlarge has 4 B200 GPUs of the GB200 superchip).
EXTRA_GPUS = {"p6e-gb200.36xlarge": 4}


def addon_versions(addon: str) -> list[str]:
    """The versions offered, newest first."""
    return [v for v, _ in ADDONS[addon][0]]


def addon_default(addon: str, cluster_version: str) -> str:
    """EKS's default version of ``addon`` for a cluster version."""
    for version, defaults in ADDONS[addon][0]:
        if defaults is None or cluster_version in defaults:
            return version
    return addon_versions(addon)[0]


def gpus_of(instance_type: str) -> int:
    """GPUs of an instance type, from moto's DescribeInstanceTypes data."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    info = INSTANCE_TYPES.get(instance_type, {}).get("GpuInfo") or {}
    count = sum(int(g.get("Count", 0)) for g in info.get("Gpus", []))
    return count or EXTRA_GPUS.get(instance_type, 0)


#: GPU models of types moto's DescribeInstanceTypes data lacks (AWS's instance type page:
#: p6e-gb200.36xlarge's GPUs are NVIDIA GB200's).
EXTRA_GPU_NAMES = {"p6e-gb200.36xlarge": "GB200"}


def gpu_model_of(instance_type: str) -> tuple[str, int]:
    """An instance type's GPU model and memory per GPU in MiB, from moto's
    DescribeInstanceTypes data (GpuInfo.Gpus[].Name, MemoryInfo.SizeInMiB); ("", 0) when it
    has none."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    gpus = (INSTANCE_TYPES.get(instance_type, {}).get("GpuInfo") or {}).get("Gpus") or [{}]
    name = str(gpus[0].get("Name") or EXTRA_GPU_NAMES.get(instance_type, ""))
    return name, int((gpus[0].get("MemoryInfo") or {}).get("SizeInMiB", 0))


def network_gbps_of(instance_type: str) -> float:
    """An instance type's network bandwidth in Gbit/s, its network cards' peak summed (moto's
    DescribeInstanceTypes data: NetworkInfo.NetworkCards[].PeakBandwidthInGbps); 0 when the
    data has none."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    cards = (INSTANCE_TYPES.get(instance_type, {}).get("NetworkInfo") or {}).get("NetworkCards")
    return float(sum(float(card.get("PeakBandwidthInGbps", 0)) for card in cards or []))


def minor(version: str) -> tuple[int, int]:
    """(major, minor) of a Kubernetes version."""
    major, rest = version.split(".")[:2]
    return int(major), int(rest)


class EksError(Exception):
    """An EKS error answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Pending:
    """An update on its way: ``changes`` land in the item's data at ``at``, then ``done``."""

    at: float
    changes: dict[str, Any]
    update: dict[str, Any]
    done: Callable[[], None] | None = None
    #: The errors the update fails with when it lands (nothing of it is applied then).
    fails: list[dict[str, Any]] | None = None


@dataclass
class Item:
    """A resource with a lifecycle: CREATING until ``ready_at``, UPDATING while an update is
    pending, DELETING until ``gone_at``."""

    data: dict[str, Any]
    ready_at: float
    gone_at: float | None = None
    pending: Pending | None = None
    updates: list[dict[str, Any]] = field(default_factory=list)


class EksState(Protocol):
    """What the handlers reach of ``sandbox.eks.Eks``."""

    scale: float
    account: str
    clusters: dict[tuple[str, str], Item]
    nodegroups: dict[tuple[str, str, str], Item]
    addons: dict[tuple[str, str, str], Item]
    access: dict[tuple[str, str, str], dict[str, Any]]
    identities: dict[tuple[str, str, str], dict[str, Any]]

    def _cluster(self, region: str, name: str) -> Item: ...

    def reservation(self, region: str, rid: str) -> dict[str, Any] | None:
        """A capacity reservation of the account by region and id, None when unknown."""
        ...

    def _after(self, key: str) -> float: ...

    def sync_nodes(self, region: str, ng: dict[str, Any], fresh: bool = False) -> None: ...

    def cordon(self, region: str, cluster: str, nodegroup: str) -> None: ...


def start_update(
    s: EksState,
    item: Item,
    kind: str,
    params: list[tuple[str, Any]],
    changes: dict[str, Any],
    duration: str,
    done: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Begin an update as EKS does: only on an ACTIVE resource with no update on its way
    (ResourceInUseException otherwise); UPDATING until it lands."""
    status = item.data.get("status")
    if item.pending is not None or status != "ACTIVE":
        raise EksError(
            409,
            "ResourceInUseException",
            f"An update is already in progress or the resource is {status}",
        )
    update = {
        "id": str(uuid.uuid4()),
        "status": "InProgress",
        "type": kind,
        "params": [{"type": k, "value": str(v)} for k, v in params],
        "createdAt": now(),
        "errors": [],
    }
    item.data["status"] = "UPDATING"
    item.pending = Pending(s._after(duration), changes, update, done)
    item.updates.append(update)
    return update


def land(item: Item, at: float) -> None:
    """Finish a pending update that is due."""
    pending = item.pending
    if pending is None or at < pending.at:
        return
    item.data["status"] = "ACTIVE"
    item.pending = None
    if pending.fails:
        pending.update["status"] = "Failed"
        pending.update["errors"] = pending.fails
        return
    item.data.update(pending.changes)
    pending.update["status"] = "Successful"
    if pending.done is not None:
        pending.done()


def hardware(data: dict[str, Any], ng: dict[str, Any]) -> tuple[str, int]:
    """Instance type and EFA interfaces of a node group (``data``: its launch template's)."""
    itype = data.get("InstanceType") or (ng.get("instanceTypes") or ["m7i.2xlarge"])[0]
    efa = sum(
        1
        for i in data.get("NetworkInterfaces") or []
        if i.get("InterfaceType") in ("efa", "efa-only")
    )
    return itype, efa


def node_groups(data: dict[str, Any]) -> list[str]:
    """The security groups a node group's nodes have: its launch template's (``data``; on
    the first interface, or the template's own), else none named (EKS gives the cluster's)."""
    interfaces = data.get("NetworkInterfaces") or []
    if interfaces and interfaces[0].get("Groups"):
        return [str(g) for g in interfaces[0]["Groups"]]
    return [str(g) for g in data.get("SecurityGroupIds") or []]


def template_data(account: str, region: str, spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The launch template a node group names, as moto's EC2 stored it (None for none)."""
    if not spec:
        return None
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[account][region]
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


def active(s: EksState, region: str, cluster: str) -> None:
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


def start_delete(s: EksState, item: Item, duration: str) -> None:
    """DELETING now, gone after the documented duration (a repeated delete changes nothing)."""
    if item.gone_at is None:
        item.data["status"] = "DELETING"
        item.pending = None
        item.gone_at = s._after(duration)


def node_slots(region: str, ng: dict[str, Any]) -> list[tuple[int, str]]:
    """The node group's instances as (index, instance id), as many as its desired size: the
    ones it has keep their place (an Auto Scaling group scaled in drops the newest; one told
    to terminate an instance drops that one, ``eks_asg``), new ones take the next index.
    Each generation (a rolling update) numbers its nodes afresh, apart from the last's."""
    base = 10 + 64 * (ng.get("_generation", 0) % 3)
    slots: list[int] = ng.setdefault("_slots", [])
    desired = int(ng["scalingConfig"]["desiredSize"])
    del slots[desired:]
    # A new instance never takes the id of one that was terminated (EC2 does not reuse
    # instance ids): numbering goes on from the last number given, within the generation's
    # 64, the oldest free number once those are used up.
    following = max(max(slots, default=-1) + 1, int(ng.get("_next", 0)))
    while len(slots) < desired:
        following = next(
            (i % 64 for i in range(following, following + 64) if i % 64 not in slots), following
        )
        slots.append(following)
        following += 1
    ng["_next"] = following
    group = f"{ng.get('clusterName', '')}/{ng['nodegroupName']}"
    return [(base + i, _instance_id(region, group, base + i)) for i in slots]


def _instance_id(region: str, nodegroup: str, index: int) -> str:
    """A node's instance id, the same for the same node (i- and 17 hex digits, as EC2's).
    ``nodegroup`` is CLUSTER/NAME: EC2's ids are unique in an account, and two clusters'
    node groups of one name (every spec's "gpu") must not share instances (a terminate of
    one cluster's node reached the other's group)."""
    digest = zlib.crc32(f"{region}/{nodegroup}".encode())
    return f"i-{digest:08x}{index:09x}"
