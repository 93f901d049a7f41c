"""The sandbox's stand-ins for EKS's node health: the node monitoring agent (the
eks-node-monitoring-agent add-on) on each node, and node auto repair on managed node groups.

A fault is injected on a node (``fmctl sandbox fault``, the sandbox's InjectNodeFault); the
agent stand-in turns it into what the real agent reports (aws/eks-node-monitoring-agent at
51af549):

- an XID the agent knows as fatal (monitors/nvidia/dcgm/dcgm_policies.go,
  ``WellKnownXidCodes``) sets the node condition AcceleratedHardwareReady to False with the
  reason ``NvidiaXID<code>Error``; any other XID is only a Kubernetes event
  (``NvidiaXID<code>Warning``): no condition, nothing for repair to act on;
- GPUs gone: AcceleratedHardwareReady False, ``NvidiaDeviceCountMismatch`` (fatal); an
  uncorrectable ECC error: the same condition, ``NvidiaDoubleBitError`` (fatal);
- EFA errors: ``EFAErrorMetric``, a warning only (pkg/reasons/reasons.go) — the real agent
  sets no condition for them, and so neither does this one;
- a clear: the conditions it set go back to True.

The agent runs only where the add-on is installed (ACTIVE). Node auto repair, as the EKS
User Guide ("Node health", "Node auto repair") describes it, on a node group with
``nodeRepairConfig.enabled``: a node whose Ready condition or an agent's condition is False
is cordoned and replaced (a new instance joins in its place) once the condition has held for
10 minutes (AcceleratedHardwareReady) or 30 (the others), at most
``maxParallelNodesRepairedCount`` nodes of the group at once; with more than five nodes and
more than 20% of them unhealthy, the group's repairs stop. An override
(``nodeRepairConfigOverrides``) for the condition and reason sets the wait and the action
(Replace, Reboot: the node comes back with its conditions cleared, NoAction); without one,
EKS's own action for the reason (the guide's table: Reboot for some XIDs, Replace
otherwise). Waits are in the sandbox's time scale.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from fmctl_sandbox.eks_model import EksError, Item, node_slots


class Kube(Protocol):
    """What this module asks of the sandbox's Kubernetes APIs (``sandbox.kube``)."""

    def nodes(self, cluster: str, nodegroup: str) -> list[dict[str, Any]]: ...

    def change_node(self, cluster: str, node: str, change: Any) -> bool: ...

    def kernel_line(self, cluster: str, node: str, text: str) -> None: ...

    def efa_down(self, cluster: str, node: str, count: int) -> int: ...

    def gpus_off(self, cluster: str, node: str, count: int) -> int: ...


class Eks(Protocol):
    """What this module asks of the sandbox's EKS (``sandbox.eks.Eks``, which calls it)."""

    @property
    def kube(self) -> Kube: ...

    nodegroups: dict[tuple[str, str, str], Item]
    addons: dict[tuple[str, str, str], Item]
    clusters: dict[tuple[str, str], Item]
    endpoints: dict[tuple[str, str], str]
    scale: float
    account: str

    def advance(self, now: float) -> None: ...

    def sync_nodes(self, region: str, ng: dict[str, Any], fresh: bool = False) -> None: ...


#: XIDs the node monitoring agent treats as fatal (dcgm_policies.go at 51af549).
WELL_KNOWN_XIDS = frozenset(
    (46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158)
)
#: The agent's node conditions (the EKS User Guide, "Node health").
CONDITIONS = (
    "AcceleratedHardwareReady",
    "ContainerRuntimeReady",
    "KernelReady",
    "NetworkingReady",
    "StorageReady",
)
#: Minutes EKS waits before it repairs, by condition (10 for accelerators, 30 otherwise).
WAIT_MINUTES = {"AcceleratedHardwareReady": 10}
DEFAULT_WAIT_MINUTES = 30
#: A replacement instance boots and joins in about as long as a node group's nodes do.
#: The NVIDIA reasons EKS reboots a node for when no override says otherwise; it replaces it
#: for every other (the EKS User Guide, "NVIDIA node health issues", awsdocs/amazon-eks-
#: user-guide latest/ug/nodes/node-health.adoc at 4d52b4d0).
REBOOTED_BY_DEFAULT = frozenset(f"NvidiaXID{code}Error" for code in (13, 31, 48, 63, 64, 94, 95))
REPLACE_SECONDS = 300.0
REBOOT_SECONDS = 120.0


def kernel_line(fault: dict[str, Any]) -> str:
    """The kernel's line for an Xid fault (an uncorrectable ECC error is Xid 48, "DBE",
    NVIDIA's Xid catalog), in the driver's words (tests/data/real's recorded lines:
    ``NVRM: Xid (PCI:BUS): CODE, ...``); "" for the others (no kernel line: the GPU count
    and EFA are read with tools)."""
    if "xid" in fault:
        code = int(fault["xid"])
        return f"NVRM: Xid (PCI:0000:53:00): {code}, pid='<unknown>', name=<unknown>, injected"
    if fault.get("eccDbe"):
        return "NVRM: Xid (PCI:0000:53:00): 48, pid='<unknown>', name=<unknown>, DBE (injected)"
    return ""


def agent_installed(eks: Eks, region: str, cluster: str) -> bool:
    """Whether the node monitoring agent add-on is ACTIVE in the cluster."""
    item = eks.addons.get((region, cluster, "eks-node-monitoring-agent"))
    return item is not None and item.data.get("status") == "ACTIVE"


def inject(eks: Eks, region: str, cluster: str, node: str, fault: dict[str, Any]) -> str:
    """What the agent on ``node`` reports of ``fault`` ({"xid": N} | {"gpuMissing": N} |
    {"eccDbe": true} | {"efaDown": N} | {"clear": true}); says what it did."""
    eks.advance(time.monotonic())
    if (region, cluster) not in eks.clusters:
        raise EksError(404, "ResourceNotFoundException", f"No cluster found for name: {cluster}.")
    endpoint = eks.endpoints.get((region, cluster), "")
    if not any(n["metadata"]["name"] == node for n in _all_nodes(eks, region, cluster)):
        raise EksError(404, "ResourceNotFoundException", f"no node {node} in {cluster}")
    line = kernel_line(fault)
    host = ""
    if line:
        # The kernel logs it whoever watches: fmctl's own agent reads the node's /dev/kmsg.
        eks.kube.kernel_line(endpoint, node, line)
        host = "; the driver's line is in its /dev/kmsg (fmctl's node agent reads it)"
    if "efaDown" in fault:
        # The devices leave the node's /sys, where fmctl's own agent counts them.
        gone = eks.kube.efa_down(endpoint, node, int(fault["efaDown"]))
        host = f"; {gone} EFA device(s) gone from its /sys (fmctl's node agent counts them)"
    if "gpuMissing" in fault:
        # The GPUs leave the driver's list, where fmctl's own agent counts them (nvidia-smi).
        gone = eks.kube.gpus_off(endpoint, node, int(fault["gpuMissing"]))
        host = f"; {gone} GPU(s) gone from its driver (fmctl's node agent counts them)"
    return _monitor(eks, region, cluster, endpoint, node, fault) + host


def _monitor(
    eks: Eks, region: str, cluster: str, endpoint: str, node: str, fault: dict[str, Any]
) -> str:
    """What AWS's node monitoring agent (the stand-in) makes of the fault; said."""
    if not agent_installed(eks, region, cluster):
        return (
            f"no node monitoring agent in {cluster} (the eks-node-monitoring-agent add-on, "
            "health.enabled): nothing reports the fault"
        )
    if fault.get("clear"):
        eks.kube.change_node(endpoint, node, lambda obj: _clear(obj))
        return f"{node}: the agent's conditions are True again"
    if "xid" in fault:
        code = int(fault["xid"])
        if code not in WELL_KNOWN_XIDS:
            return (
                f"{node}: XID {code} is not one the agent treats as fatal: a Kubernetes event "
                f"(NvidiaXID{code}Warning), no node condition, nothing to repair"
            )
        reason = f"NvidiaXID{code}Error"
        message = (
            f"detected XID-{code} on the instance, review kernel logs for additional information."
        )
    elif "eccDbe" in fault:
        reason = "NvidiaDoubleBitError"  # fatal (pkg/reasons/reasons.go)
        message = "an uncorrectable (double-bit) ECC error on a GPU"
    elif "gpuMissing" in fault:
        reason = "NvidiaDeviceCountMismatch"
        message = f"{int(fault['gpuMissing'])} GPU(s) fewer than the instance type has"
    elif "efaDown" in fault:
        return (
            f"{node}: EFA errors are a warning to the agent (EFAErrorMetric): an event, no node "
            "condition, nothing for node auto repair to act on"
        )
    else:
        raise EksError(
            400, "InvalidParameterException", "say which fault: xid, gpuMissing, efaDown, clear"
        )
    eks.kube.change_node(
        endpoint, node, lambda obj: _condition(obj, "AcceleratedHardwareReady", reason, message)
    )
    return f"{node}: AcceleratedHardwareReady False ({reason})"


def _all_nodes(eks: Eks, region: str, cluster: str) -> list[dict[str, Any]]:
    endpoint = eks.endpoints.get((region, cluster), "")
    out: list[dict[str, Any]] = []
    for (r, c, group), _ in eks.nodegroups.items():
        if (r, c) == (region, cluster):
            out += eks.kube.nodes(endpoint, group)
    return out


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _condition(obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
    conditions = [
        c for c in obj.setdefault("status", {}).get("conditions") or [] if c.get("type") != kind
    ]
    conditions.append(
        {
            "type": kind,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": _stamp(),
        }
    )
    obj["status"]["conditions"] = conditions


def _clear(obj: dict[str, Any]) -> None:
    for c in obj.setdefault("status", {}).get("conditions") or []:
        if c.get("type") in CONDITIONS and c.get("status") == "False":
            c.update(status="True", reason=f"{c['type'].removesuffix('Ready')}IsReady")
            c.update(message="", lastTransitionTime=_stamp())


def _failing(node: dict[str, Any]) -> dict[str, Any] | None:
    """The node's first failing condition (an agent's, or Ready), or None."""
    conditions: list[dict[str, Any]] = (node.get("status") or {}).get("conditions") or []
    for c in conditions:
        if c.get("status") == "False" and (c.get("type") in CONDITIONS or c.get("type") == "Ready"):
            return c
    return None


def _default_action(failing: dict[str, Any]) -> str:
    """EKS's own action for a condition and reason no override covers: the User Guide's table
    for the NVIDIA reasons (Reboot for some XIDs), Replace for the rest."""
    if failing.get("type") == "AcceleratedHardwareReady":
        return "Reboot" if failing.get("reason") in REBOOTED_BY_DEFAULT else "Replace"
    return "Replace"


def _override(config: dict[str, Any], failing: dict[str, Any]) -> dict[str, Any] | None:
    for o in config.get("nodeRepairConfigOverrides") or []:
        if o["nodeMonitoringCondition"] == failing.get("type") and o[
            "nodeUnhealthyReason"
        ] == failing.get("reason"):
            return dict(o)
    return None


def repair(eks: Eks, now: float) -> None:
    """Node auto repair, for every ACTIVE node group that has it on (see the module's
    docstring). Called from ``Eks.advance``."""
    for (region, cluster, group), item in list(eks.nodegroups.items()):
        ng = item.data
        config = ng.get("nodeRepairConfig") or {}
        if item.gone_at is not None or ng.get("status") != "ACTIVE" or not config.get("enabled"):
            continue
        endpoint = eks.endpoints.get((region, cluster), "")
        repairing: dict[str, dict[str, Any]] = ng.setdefault("_repairs", {})
        _finish(eks, region, ng, repairing, now)
        nodes = eks.kube.nodes(endpoint, group)  # as the finished repairs left them
        unhealthy = [n for n in nodes if _failing(n) is not None]
        # Since when each node has failed, on the sandbox's clock (its waits are scaled).
        seen: dict[str, float] = ng.setdefault("_failing", {})
        names = {n["metadata"]["name"] for n in unhealthy}
        for name in list(seen):
            if name not in names:
                del seen[name]
        for name in names:
            seen.setdefault(name, now)
        # EKS halts a group's repairs past 20% unhealthy when it has more than five nodes.
        if len(nodes) > 5 and len(unhealthy) * 5 > len(nodes):
            continue
        limit = config.get("maxParallelNodesRepairedCount")
        for node in unhealthy:
            name = node["metadata"]["name"]
            if name in repairing or (limit is not None and len(repairing) >= int(limit)):
                continue
            failing = _failing(node) or {}
            override = _override(config, failing)
            minutes = (
                int(override["minRepairWaitTimeMins"])
                if override
                else WAIT_MINUTES.get(str(failing.get("type")), DEFAULT_WAIT_MINUTES)
            )
            if now < seen[name] + minutes * 60 * eks.scale:
                continue
            action = override["repairAction"] if override else _default_action(failing)
            if action == "NoAction":
                continue
            # "If a health check fails, the node is automatically cordoned."
            eks.kube.change_node(endpoint, name, _cordon)
            took = REPLACE_SECONDS if action == "Replace" else REBOOT_SECONDS
            repairing[name] = {"action": action, "done_at": now + took * eks.scale}


def _cordon(obj: dict[str, Any]) -> None:
    obj.setdefault("spec", {})["unschedulable"] = True


def _uncordon(obj: dict[str, Any]) -> None:
    obj.setdefault("spec", {}).pop("unschedulable", None)
    _clear(obj)


def _finish(
    eks: Eks, region: str, ng: dict[str, Any], repairing: dict[str, dict[str, Any]], now: float
) -> None:
    """Repairs whose time is up: a replaced node's instance goes and a new one takes the
    next place (as the group's Auto Scaling group replaces an instance); a rebooted node
    comes back with its conditions cleared."""
    endpoint = eks.endpoints.get((region, ng["clusterName"]), "")
    changed = False
    for name, repair_state in list(repairing.items()):
        if now < repair_state["done_at"]:
            continue
        del repairing[name]
        if repair_state["action"] == "Reboot":
            eks.kube.change_node(endpoint, name, _uncordon)
            continue
        nodes = {n["metadata"]["name"]: n for n in eks.kube.nodes(endpoint, ng["nodegroupName"])}
        provider = str((nodes.get(name) or {}).get("spec", {}).get("providerID", ""))
        instance = provider.rsplit("/", 1)[-1]
        base = 10 + 64 * (ng.get("_generation", 0) % 3)
        slots = dict((i, n) for n, i in node_slots(region, ng))
        if instance in slots:
            ng["_slots"].remove(slots[instance] - base)
            changed = True
    if changed:
        eks.sync_nodes(region, ng)
