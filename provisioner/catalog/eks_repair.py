"""EKS node auto repair's own actions on a GPU node, and the overrides that make it act as
fmctl's fault table and the spec's ``health.repair`` say.

The Amazon EKS User Guide lists, for each NVIDIA reason the node monitoring agent reports
under the ``AcceleratedHardwareReady`` condition, the action node auto repair takes by
default, ten minutes after the fault ("Detect node health issues", NVIDIA node health issues:
awsdocs/amazon-eks-user-guide latest/ug/nodes/node-health.adoc at 4d52b4d0). Where that
action is not fmctl's, the node group gets a ``nodeRepairConfigOverrides`` entry (botocore's
EKS model: condition, reason, wait and action, all four given, as the API reference asks):

- an XID NVIDIA's catalog leaves to the job (13, 31, 63, 94, 121: RESTART_APP, IGNORE) gets
  ``NoAction``: EKS would reboot or replace a node for a fault of the application's;
- with ``health.repair: replace``, every fault gets ``Replace`` (EKS reboots for 48, 64, 95);
- with ``health.repair: reboot``, a fault a reboot cures (NVIDIA's RESET_GPU, RESTART_BM,
  RESTART_VM) gets ``Reboot`` (EKS replaces for 79, 119, 120, 140), the rest ``Replace``.

``drain-only`` has no EKS form: ``NoAction`` leaves the node schedulable (validation refuses
it on Kubernetes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from provisioner.catalog.faults import Action, rule

EKS_REPAIR_SOURCE: Final = (
    "Amazon EKS User Guide, Detect node health issues: NVIDIA node health issues "
    "(awsdocs/amazon-eks-user-guide latest/ug/nodes/node-health.adoc at 4d52b4d0)"
)
#: The node monitoring agent's condition for GPU faults.
CONDITION: Final = "AcceleratedHardwareReady"
#: "the repair actions that are listed start 10 minutes after the issue is detected".
WAIT_MINUTES: Final = 10

EksAction = Literal["Replace", "Reboot", "NoAction"]

#: The guide's reasons under AcceleratedHardwareReady and EKS's default action for each.
EKS_DEFAULT_ACTIONS: Final[dict[str, EksAction]] = {
    "NvidiaDoubleBitError": "Replace",
    "NvidiaNVLinkError": "Replace",
    "NvidiaXID13Error": "Reboot",
    "NvidiaXID31Error": "Reboot",
    "NvidiaXID48Error": "Reboot",
    "NvidiaXID63Error": "Reboot",
    "NvidiaXID64Error": "Reboot",
    "NvidiaXID74Error": "Replace",
    "NvidiaXID79Error": "Replace",
    "NvidiaXID94Error": "Reboot",
    "NvidiaXID95Error": "Reboot",
    "NvidiaXID119Error": "Replace",
    "NvidiaXID120Error": "Replace",
    "NvidiaXID121Error": "Replace",
    "NvidiaXID140Error": "Replace",
}


@dataclass(frozen=True)
class RepairOverride:
    """One ``nodeRepairConfigOverrides`` entry."""

    condition: str
    reason: str
    wait_minutes: int
    action: EksAction


def fmctl_action(reason: str, repair: str) -> EksAction:
    """What fmctl wants done for ``reason`` under ``health.repair`` (replace or reboot)."""
    if reason.startswith("NvidiaXID") and reason.endswith("Error"):
        row = rule(f"xid:{reason[len('NvidiaXID') : -len('Error')]}")
        action = row.action if row else Action.REPLACE
    else:  # a double-bit ECC error, NVLink errors: the hardware is suspect
        action = Action.REPLACE
    if action is Action.NONE:
        return "NoAction"
    if action is Action.REBOOT and repair == "reboot":
        return "Reboot"
    return "Replace"


def overrides(repair: str) -> tuple[RepairOverride, ...]:
    """The overrides a GPU node group needs for ``health.repair`` (only where EKS's own
    action differs), in the guide's order."""
    return tuple(
        RepairOverride(CONDITION, reason, WAIT_MINUTES, want)
        for reason, default in EKS_DEFAULT_ACTIONS.items()
        if (want := fmctl_action(reason, repair)) != default
    )
