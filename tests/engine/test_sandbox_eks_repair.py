"""The sandbox's node auto repair against the rules the EKS User Guide states ("Node
health"): the wait before a repair (10 minutes for AcceleratedHardwareReady, 30 for the
others), at most maxParallelNodesRepairedCount at once, no repair in a group of more than
five nodes with more than 20% unhealthy, the overrides' action; and the node monitoring
agent's choice of which XIDs set a condition (aws/eks-node-monitoring-agent). Run on the
module's own state, with a clock the test moves."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from fmctl_sandbox import eks_repair
from fmctl_sandbox.eks_model import Item, node_slots
from provisioner.catalog.eks_repair import overrides
from provisioner.resources.eks_nodegroup_model import NodeRepair

SCALE = 0.001  # the sandbox's: a minute is 0.06 s
MINUTE = 60 * SCALE


@dataclass
class FakeKube:
    nodes_of: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (node, line) the kernel logged.
    kernel: list[tuple[str, str]] = field(default_factory=list)

    def kernel_line(self, cluster: str, node: str, text: str) -> None:
        self.kernel.append((node, text))

    def efa_down(self, cluster: str, node: str, count: int) -> int:
        self.kernel.append((node, f"efa-down {count}"))
        return count

    def gpus_off(self, cluster: str, node: str, count: int) -> int:
        self.kernel.append((node, f"gpus-off {count}"))
        return count

    def nodes(self, cluster: str, nodegroup: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(n) for n in self.nodes_of.values()]

    def change_node(self, cluster: str, node: str, change: Any) -> bool:
        if node not in self.nodes_of:
            return False
        change(self.nodes_of[node])
        return True


@dataclass
class FakeEks:
    """What eks_repair reads of ``sandbox.eks.Eks``."""

    kube: FakeKube
    nodegroups: dict[tuple[str, str, str], Item]
    addons: dict[tuple[str, str, str], Item]
    clusters: dict[tuple[str, str], Item]
    endpoints: dict[tuple[str, str], str]
    scale: float = SCALE
    replaced: list[str] = field(default_factory=list)

    def advance(self, now: float) -> None:
        pass

    def sync_nodes(self, region: str, ng: dict[str, Any], fresh: bool = False) -> None:
        """As the sandbox's EKS does it: one node per slot of the group."""
        self.replaced.append(ng["nodegroupName"])
        self.kube.nodes_of = _nodes(ng, self.kube.nodes_of)


def _nodes(ng: dict[str, Any], have: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The group's nodes, named n<slot>, with the sandbox's instance ids (``node_slots``):
    those that have a slot keep their object."""
    out = {}
    for index, instance in node_slots("r", ng):
        name = f"n{index - 10}"
        out[name] = have.get(name) or {
            "metadata": {"name": name},
            "spec": {"providerID": f"aws:///r-a/{instance}"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    return out


def _world(nodes: int, repair: dict[str, Any]) -> FakeEks:
    ng = {
        "nodegroupName": "gpu",
        "clusterName": "c",
        "status": "ACTIVE",
        "nodeRepairConfig": repair,
        "scalingConfig": {"desiredSize": nodes},
    }
    kube = FakeKube(_nodes(ng, {}))
    agent = {"status": "ACTIVE"}
    return FakeEks(
        kube,
        {("r", "c", "gpu"): Item(ng, 0.0)},
        {("r", "c", "eks-node-monitoring-agent"): Item(agent, 0.0)},
        {("r", "c"): Item({}, 0.0)},
        {("r", "c"): "ep"},
    )


def _cordoned(eks: FakeEks) -> set[str]:
    return {n for n, o in eks.kube.nodes_of.items() if o["spec"].get("unschedulable")}


def _fault(eks: FakeEks, node: str, **fault: Any) -> str:
    return eks_repair.inject(eks, "r", "c", node, fault)


def _tick(eks: FakeEks, now: float) -> None:
    eks_repair.repair(eks, now)


def test_the_agent_sets_conditions_only_for_fatal_faults() -> None:
    eks = _world(2, {"enabled": True})
    assert "no node condition" in _fault(eks, "n0", xid=13)
    assert "EFAErrorMetric" in _fault(eks, "n0", efaDown=1)
    assert "NvidiaXID48Error" in _fault(eks, "n0", xid=48)
    assert "NvidiaDoubleBitError" in _fault(eks, "n1", eccDbe=True)
    kinds = {c["type"]: c for c in eks.kube.nodes_of["n0"]["status"]["conditions"]}
    assert kinds["AcceleratedHardwareReady"]["status"] == "False"
    _fault(eks, "n0", clear=True)
    kinds = {c["type"]: c for c in eks.kube.nodes_of["n0"]["status"]["conditions"]}
    assert kinds["AcceleratedHardwareReady"]["status"] == "True"
    # Without the add-on nothing reports a fault.
    del eks.addons[("r", "c", "eks-node-monitoring-agent")]
    assert "no node monitoring agent" in _fault(eks, "n0", xid=79)
    # The kernel logged every Xid (a double-bit error is Xid 48) whoever watches, in the
    # driver's words, for fmctl's own agent; EFA errors and clears are no kernel line.
    xids = [(n, line) for n, line in eks.kube.kernel if line.startswith("NVRM: Xid (PCI:")]
    codes = [(node, line.split("): ")[1].split(",")[0]) for node, line in xids]
    assert codes == [("n0", "13"), ("n0", "48"), ("n1", "48"), ("n0", "79")]
    # EFA devices down leave the node's /sys.
    assert ("n0", "efa-down 1") in eks.kube.kernel


def test_waits_then_cordons_then_replaces_one_at_a_time() -> None:
    eks = _world(4, {"enabled": True, "maxParallelNodesRepairedCount": 1})
    _fault(eks, "n0", xid=79)
    _fault(eks, "n1", gpuMissing=1)
    assert ("n1", "gpus-off 1") in eks.kube.kernel  # for fmctl's agent's nvidia-smi
    _tick(eks, 0.0)
    _tick(eks, 9.9 * MINUTE)
    assert _cordoned(eks) == set()  # EKS waits 10 minutes on AcceleratedHardwareReady
    _tick(eks, 10.1 * MINUTE)
    assert len(_cordoned(eks)) == 1  # at most one node of the group at once
    (first,) = _cordoned(eks)
    _tick(eks, 10.1 * MINUTE + eks_repair.REPLACE_SECONDS * SCALE + 0.001)
    # Its instance went and the group launched another in its place.
    assert first not in eks.kube.nodes_of and len(eks.kube.nodes_of) == 4
    assert eks.replaced == ["gpu"]
    # Then the other one: its own wait has long passed.
    _tick(eks, 10.2 * MINUTE + eks_repair.REPLACE_SECONDS * SCALE + 0.002)
    assert len(_cordoned(eks)) == 1 and first not in _cordoned(eks)


def test_other_conditions_wait_thirty_minutes() -> None:
    eks = _world(3, {"enabled": True})
    eks.kube.nodes_of["n2"]["status"]["conditions"].append(
        {"type": "NetworkingReady", "status": "False", "reason": "InterfaceNotUp"}
    )
    _tick(eks, 0.0)
    _tick(eks, 29 * MINUTE)
    assert _cordoned(eks) == set()
    _tick(eks, 31 * MINUTE)
    assert _cordoned(eks) == {"n2"}


def test_no_repair_past_a_fifth_of_a_larger_group() -> None:
    eks = _world(8, {"enabled": True})
    _fault(eks, "n0", xid=79)
    _fault(eks, "n1", xid=79)  # 2 of 8: more than 20%
    _tick(eks, 0.0)
    _tick(eks, 60 * MINUTE)
    assert _cordoned(eks) == set()
    _fault(eks, "n1", clear=True)  # 1 of 8: repairs go on
    _tick(eks, 61 * MINUTE)
    assert _cordoned(eks) == {"n0"}


def test_overrides_set_the_wait_and_the_action_and_off_means_off() -> None:
    override = {
        "nodeMonitoringCondition": "AcceleratedHardwareReady",
        "nodeUnhealthyReason": "NvidiaXID79Error",
        "minRepairWaitTimeMins": 1,
        "repairAction": "Reboot",
    }
    eks = _world(2, {"enabled": True, "nodeRepairConfigOverrides": [override]})
    _fault(eks, "n0", xid=79)
    _tick(eks, 0.0)
    _tick(eks, 1.1 * MINUTE)
    assert _cordoned(eks) == {"n0"}
    _tick(eks, 1.1 * MINUTE + eks_repair.REBOOT_SECONDS * SCALE + 0.001)
    # Rebooted: the same node, back in service, its conditions cleared; no new instance.
    assert _cordoned(eks) == set() and eks.replaced == []
    kinds = {c["type"]: c["status"] for c in eks.kube.nodes_of["n0"]["status"]["conditions"]}
    assert kinds["AcceleratedHardwareReady"] == "True"

    off = _world(2, {"enabled": False})
    _fault(off, "n0", xid=79)
    _tick(off, 0.0)
    _tick(off, 60 * MINUTE)
    assert _cordoned(off) == set()


def test_without_an_override_eks_reboots_for_the_xids_its_guide_lists() -> None:
    """XID 64 (a failed row remap): EKS's own action is Reboot; XID 79: Replace."""
    eks = _world(3, {"enabled": True})
    _fault(eks, "n0", xid=64)
    _tick(eks, 0.0)
    _tick(eks, 10.1 * MINUTE)
    assert _cordoned(eks) == {"n0"}
    _tick(eks, 10.1 * MINUTE + eks_repair.REBOOT_SECONDS * SCALE + 0.001)
    assert _cordoned(eks) == set() and eks.replaced == []


@pytest.mark.parametrize(("repair", "replaced"), [("replace", ["gpu"]), ("reboot", [])])
def test_fmctls_overrides_make_eks_follow_health_repair(repair: str, replaced: list[str]) -> None:
    """The overrides fmctl renders for health.repair (catalog.eks_repair), as EKS gets them
    (NodeRepair.request): XID 64 replaced under replace, rebooted under reboot."""
    config = NodeRepair(
        True, 1, tuple((o.condition, o.reason, o.wait_minutes, o.action) for o in overrides(repair))
    ).request()
    eks = _world(3, config)
    _fault(eks, "n0", xid=64)
    _tick(eks, 0.0)
    _tick(eks, 1.1 * MINUTE)  # an Xid has happened: a minute, not ten
    assert _cordoned(eks) == {"n0"}
    _tick(eks, 1.1 * MINUTE + eks_repair.REPLACE_SECONDS * SCALE + 0.001)
    assert eks.replaced == replaced
