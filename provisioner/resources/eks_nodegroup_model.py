"""The typed data of an EKS managed node group: its parameters (what the blueprint asks),
what fmctl reads back of a live group, and its outputs. The kind is
``provisioner.resources.eks_nodes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.graph.ref import Ref
from provisioner.resources.eks import EksOut
from provisioner.resources.eks_access import AccessOut
from provisioner.resources.iam import RoleOut
from provisioner.resources.launch_template import LtOut
from provisioner.resources.network import SubnetOut
from provisioner.resources.routes import EndpointOut, RouteTableOut
from provisioner.resources.tags import DesiredTags, Tags


@dataclass(frozen=True)
class NodegroupOut:
    """A node group by name."""

    id: str


@dataclass(frozen=True)
class Scaling:
    """A node group's scaling configuration."""

    min_size: int
    max_size: int
    desired_size: int


@dataclass(frozen=True)
class Taint:
    """A Kubernetes taint, as EKS spells it (NO_SCHEDULE, ...)."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeRepair:
    """EKS node auto repair on a node group (CreateNodegroup / UpdateNodegroupConfig
    ``nodeRepairConfig``): on, and how many nodes it may repair at once (None: EKS's
    default)."""

    enabled: bool = False
    max_parallel: int | None = None
    #: nodeRepairConfigOverrides: (condition, reason, wait in minutes, action) each.
    overrides: tuple[tuple[str, str, int, str], ...] = ()

    @staticmethod
    def of(config: dict[str, Any] | None) -> NodeRepair:
        """From DescribeNodegroup's ``nodeRepairConfig`` (absent: off)."""
        config = config or {}
        if not config.get("enabled"):
            return NodeRepair()
        count = config.get("maxParallelNodesRepairedCount")
        overrides = tuple(
            (
                str(o["nodeMonitoringCondition"]),
                str(o["nodeUnhealthyReason"]),
                int(o["minRepairWaitTimeMins"]),
                str(o["repairAction"]),
            )
            for o in config.get("nodeRepairConfigOverrides") or ()
        )
        return NodeRepair(True, int(count) if count is not None else None, overrides)

    def request(self) -> dict[str, Any]:
        """As EKS takes it."""
        out: dict[str, Any] = {"enabled": self.enabled}
        if self.enabled and self.max_parallel is not None:
            out["maxParallelNodesRepairedCount"] = self.max_parallel
        if self.enabled and self.overrides:
            out["nodeRepairConfigOverrides"] = [
                {
                    "nodeMonitoringCondition": condition,
                    "nodeUnhealthyReason": reason,
                    "minRepairWaitTimeMins": wait,
                    "repairAction": action,
                }
                for condition, reason, wait, action in self.overrides
            ]
        return out


@dataclass(frozen=True)
class NodegroupParams:
    """A managed node group, as ``render`` writes it in aws/nodegroups/NAME.yaml."""

    cluster: Ref[EksOut]
    nodegroup_name: str
    ami_type: str
    capacity_type: str
    scaling: Scaling
    subnets: tuple[Ref[SubnetOut], ...]
    node_role: Ref[RoleOut]
    labels: tuple[tuple[str, str], ...]
    taints: tuple[Taint, ...]
    max_unavailable: int
    version: str
    tags: DesiredTags
    #: The nodes' access entry: without it they cannot join.
    access: Ref[AccessOut]
    instance_types: tuple[str, ...] = ()
    launch_template: Ref[LtOut] | None = None
    #: The pool's instance type when it lives in the launch template.
    instance_type: str | None = None
    #: The private subnet's route out (NAT) and the S3 endpoint: nodes pull images to join.
    routes: tuple[Ref[RouteTableOut], ...] = ()
    endpoint: Ref[EndpointOut] | None = None
    #: The ODCR or Capacity Block the pool runs on (its launch template targets it): a
    #: rolling update needs room in it for a new node.
    reservation_id: str | None = None
    #: EKS node auto repair (spec health:; off for the system group).
    repair: NodeRepair = NodeRepair()
    #: Tags fmctl keeps on the group's Auto Scaling group (aws/autoscaling/): the Cluster
    #: Autoscaler's discovery tag and node template; the verify controller's repair tag.
    asg_tags: tuple[tuple[str, str], ...] = ()

    @property
    def autoscaled(self) -> bool:
        """The Cluster Autoscaler sets the desired size, between min and max."""
        from provisioner.catalog.autoscaler import DISCOVERY_TAG

        return any(key == DISCOVERY_TAG for key, _ in self.asg_tags)


@dataclass(frozen=True)
class NodegroupLive:
    """What fmctl manages of a node group."""

    ami_type: str
    capacity_type: str
    instance_type: Any
    subnets: Any
    node_role: Any
    scaling: Scaling
    labels: Any
    taints: Any
    max_unavailable: int
    version: str
    launch_template: Any
    tags: Tags
    repair: NodeRepair = NodeRepair()
    #: fmctl's tags on the group's Auto Scaling group (``eks_nodes.ASG_TAG_KEYS``).
    asg_tags: Any = frozenset()
