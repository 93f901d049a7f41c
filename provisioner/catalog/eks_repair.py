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

EKS waits ten minutes before it acts on the condition. A driver's Xid line or a double-bit
error is a fault that has happened, not a state that may pass, and the job on the node is
already lost: for those, fmctl's overrides wait one minute (the least the API takes), so a
node leaves service in about a minute, as on Slurm. Node states (a GPU count, NVLink) keep
EKS's ten minutes. The node monitoring agent raises the condition for more Xids than the
guide's table lists (its fatal set: monitors/nvidia/dcgm/dcgm_policies.go WellKnownXidCodes,
aws/eks-node-monitoring-agent at 51af549); those get an override too, their action fmctl's.

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
#: minRepairWaitTimeMins for a fault that has happened: "Minimum value of 1" (the API
#: reference, NodeRepairConfigOverrides).
FAULT_WAIT_MINUTES: Final = 1
#: The Xids the node monitoring agent sets the condition for (NvidiaXID<code>Error).
AGENT_FATAL_XIDS: Final = (
    46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158
)  # fmt: skip

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


def _reasons() -> tuple[str, ...]:
    """The guide's reasons, then the agent's other fatal Xids."""
    more = (f"NvidiaXID{code}Error" for code in AGENT_FATAL_XIDS)
    return (*EKS_DEFAULT_ACTIONS, *(r for r in more if r not in EKS_DEFAULT_ACTIONS))


def overrides(repair: str) -> tuple[RepairOverride, ...]:
    """The overrides a GPU node group needs for ``health.repair``: wherever EKS's own action
    or wait is not fmctl's (see the module's docstring)."""
    out = []
    for reason in _reasons():
        want = fmctl_action(reason, repair)
        happened = reason.startswith("NvidiaXID") or reason == "NvidiaDoubleBitError"
        wait = FAULT_WAIT_MINUTES if happened and want != "NoAction" else WAIT_MINUTES
        if EKS_DEFAULT_ACTIONS.get(reason) == want and wait == WAIT_MINUTES:
            continue
        out.append(RepairOverride(CONDITION, reason, wait, want))
    return tuple(out)


#: The verify gate's startup taint (health.verify.kubernetesGate): a GPU node joins with it
#: and takes work once the verify controller has lifted it.
UNVERIFIED_TAINT: Final = "fmctl.dev/unverified"
#: The tag fmctl puts on each GPU pool's Auto Scaling group when its verify gate replaces
#: the nodes that fail it (value: the cluster's name): the verify controller's role may
#: terminate instances only in groups that carry it (the Auto Scaling User Guide, "Tags for
#: security": ``autoscaling:ResourceTag/KEY``).
VERIFY_REPAIR_TAG: Final = "fmctl.dev/verify-repair"
#: fmctl's node agent on EKS (health.kubernetesAgent): the node condition it keeps, False
#: for a node-level fault (templates/kubernetes/health-verify/node_agent.py), and the taint
#: the verify controller takes such a node out of service with.
AGENT_CONDITION: Final = "FmctlHealthy"
UNHEALTHY_TAINT: Final = "fmctl.dev/unhealthy"
#: The verify controller's service account, the one its pod identity association names.
VERIFY_NAMESPACE: Final = "fmctl-system"
VERIFY_SERVICE_ACCOUNT: Final = "fmctl-verify"


def verify_repair_policy(cluster: str) -> dict[str, object]:
    """The verify controller's role policy: TerminateInstanceInAutoScalingGroup, the one
    call it makes, in the Auto Scaling groups tagged for this cluster's gate only."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReplaceNodesThatFailTheGate",
                "Effect": "Allow",
                "Action": ["autoscaling:TerminateInstanceInAutoScalingGroup"],
                "Resource": "*",
                "Condition": {
                    "StringEquals": {f"autoscaling:ResourceTag/{VERIFY_REPAIR_TAG}": cluster}
                },
            }
        ],
    }
