"""PCS's health monitoring on a sandbox node group's instances: a fault injected on an
instance (``fmctl sandbox fault``, the sandbox's InjectNodeFault) and what PCS does about it.

PCS documents what its monitoring does, not which faults it finds or how soon (botocore's
PCS model, HealthMonitoring: "continuously checks running instances for hardware and
software faults"). The sandbox takes the faults AWS's own GPU monitor treats as fatal (the
EKS node monitoring agent's: the XIDs of ``eks_repair.WELL_KNOWN_XIDS``, GPUs gone, an
uncorrectable ECC error; EFA errors and other XIDs are warnings) as the ones PCS finds, on
the next look after the fault, and acts by the group's ``repairAction``, as the model words
each:

- ``REPLACE``: "Replaces the instance after running jobs finish" — the sandbox runs no jobs:
  the instance is terminated and the group launches another in its place;
- ``AUTO`` (also the action when the group names none): "AWS PCS chooses the repair action
  based on the fault" — the sandbox cannot know PCS's choice and replaces;
- ``ISOLATE``: "Stops new jobs on the instance and keeps the instance running until you
  investigate" — the instance stays, marked isolated;
- ``NONE``: "Records the fault in Slurm and leaves the instance available for jobs".

Mode ``NONE`` (or no ``instanceHealthChecks``): nothing looks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from fmctl_sandbox.eks_repair import WELL_KNOWN_XIDS
from fmctl_sandbox.pcs_model import PcsError, Thing


@dataclass
class InstanceFault:
    """A fault on one instance, and what became of it."""

    what: str
    fatal: bool
    at: float
    #: ISOLATE / NONE: acted on, the instance kept.
    outcome: str = ""


class Pcs(Protocol):
    """What this module asks of the sandbox's PCS (``sandbox.pcs.Pcs``, which calls it)."""

    things: dict[tuple[str, str], Thing]
    faults: dict[tuple[str, str], InstanceFault]

    def advance(self, region: str, now: float) -> None: ...

    def terminate(self, region: str, group: Thing, instance: str) -> None: ...


def _cluster(pcs: Pcs, region: str, name: str) -> Thing:
    for (where, _), thing in pcs.things.items():
        if (
            where == region
            and thing.kind == "cluster"
            and thing.gone_at is None
            and name in (thing.data["name"], thing.data["id"])
        ):
            return thing
    raise PcsError("ResourceNotFoundException", f"no PCS cluster {name} in {region}", 404)


def _describe(fault: dict[str, Any]) -> tuple[str, bool]:
    """(what the instance shows, whether PCS's monitoring counts it as a fault)."""
    if "xid" in fault:
        code = int(fault["xid"])
        return f"XID {code}", code in WELL_KNOWN_XIDS
    if "gpuMissing" in fault:
        return f"{int(fault['gpuMissing'])} GPU(s) gone", True
    if "eccDbe" in fault:
        return "an uncorrectable ECC error", True
    if "efaDown" in fault:
        return f"{int(fault['efaDown'])} EFA device(s) with errors", False
    raise PcsError("ValidationException", f"not a fault: {sorted(fault)}")


def inject(pcs: Pcs, region: str, cluster: str, instance: str, fault: dict[str, Any]) -> str:
    """Put ``fault`` on ``instance`` of PCS cluster ``cluster`` (name or id); says what the
    group's health monitoring will do."""
    pcs.advance(region, time.monotonic())
    ident = _cluster(pcs, region, cluster).data["id"]
    group = next(
        (
            g
            for (where, _), g in pcs.things.items()
            if where == region
            and g.kind == "group"
            and g.data["clusterId"] == ident
            and instance in g.instances
        ),
        None,
    )
    if group is None:
        raise PcsError(
            "ResourceNotFoundException",
            f"no instance {instance} in a compute node group of {cluster}",
            404,
        )
    if fault.get("clear"):
        pcs.faults.pop((region, instance), None)
        return f"{instance}: healthy again"
    what, fatal = _describe(fault)
    pcs.faults[(region, instance)] = InstanceFault(what, fatal, time.monotonic())
    monitoring = (group.data.get("instanceHealthChecks") or {}).get("healthMonitoring") or {}
    if monitoring.get("mode") != "STANDARD":
        return f"{instance}: {what}; the node group's health monitoring is off: nothing acts"
    if not fatal:
        return f"{instance}: {what}, a warning: PCS's health monitoring leaves the instance"
    action = monitoring.get("repairAction", "AUTO")
    pcs.advance(region, time.monotonic())  # PCS's monitoring looks
    if instance not in group.instances:
        return (
            f"{instance}: {what}; PCS's health monitoring replaced it ({action}): the "
            "instance is terminated and the node group launched another in its place"
        )
    outcome = pcs.faults[(region, instance)].outcome
    return f"{instance}: {what}; PCS's health monitoring {outcome} it ({action})"


def repair(pcs: Pcs, region: str) -> None:
    """Each ACTIVE group's monitoring acts on its instances' fatal faults (see the module's
    docstring). Called from ``Pcs.advance``."""
    for (where, _), group in list(pcs.things.items()):
        if where != region or group.kind != "group" or group.data.get("status") != "ACTIVE":
            continue
        monitoring = (group.data.get("instanceHealthChecks") or {}).get("healthMonitoring") or {}
        if monitoring.get("mode") != "STANDARD":
            continue
        action = monitoring.get("repairAction", "AUTO")
        for instance in list(group.instances):
            fault = pcs.faults.get((region, instance))
            if fault is None or not fault.fatal or fault.outcome:
                continue
            if action in ("REPLACE", "AUTO"):
                del pcs.faults[(region, instance)]
                pcs.terminate(region, group, instance)
            else:
                fault.outcome = "isolated" if action == "ISOLATE" else "recorded"
