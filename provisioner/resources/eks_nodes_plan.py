"""What a managed node group's change does to its nodes, for the plan to say (and, where it
cannot be done as asked, to refuse): a rolling update with no room for its surge node
stops, a scale-in says what it drains, the verify gate's taint what it holds."""

from __future__ import annotations

import dataclasses

from provisioner.catalog.eks_repair import UNVERIFIED_TAINT
from provisioner.resources import eks_drain
from provisioner.resources.base import FieldChange, How, Observed
from provisioner.resources.context import Context
from provisioner.resources.eks_nodegroup_model import NodegroupLive, NodegroupOut, NodegroupParams
from provisioner.resources.eks_upgrade import no_surge
from provisioner.resources.kube_api import close, connect


def said(
    ctx: Context,
    params: NodegroupParams,
    observed: Observed[NodegroupOut, NodegroupLive],
    changes: list[FieldChange],
) -> list[FieldChange]:
    """``changes`` with what each does to the nodes. On a full UltraServer Capacity Block a
    rolling update has no room for its surge node: AWS's EKS guide for P6e-GB200 scales
    such a node group to 0 and back for a change that replaces nodes. Said in the plan;
    done only with --allow-replace."""
    out = [
        _scale_in_said(ctx, params, observed, c)
        if c.path == "scaling.desired_size"
        else _gate_said(c)
        if c.path == "taints"
        else c
        for c in changes
    ]
    rolling = [c for c in out if c.path in ROLLING and c.how == How.UPDATE]
    why = _NO_SURGE if _no_surge(params) else None
    if rolling and why is None:
        why = _full_reservation(ctx, params, observed)
    if why is None:
        return out
    return [
        FieldChange(c.path, c.before, c.after, How.STOP, why) if c in rolling else c for c in out
    ]


#: The changes EKS makes as a rolling update (UpdateNodegroupVersion: a surge node first).
ROLLING = ("version", "launch_template")
_NO_SURGE = (
    "scaled to 0 and back: a full UltraServer Capacity Block has no room for the rolling "
    "update's surge node (AWS's EKS guide for P6e-GB200); every node stops"
)


def _full_reservation(
    ctx: Context, params: NodegroupParams, observed: Observed[NodegroupOut, NodegroupLive]
) -> str | None:
    """Why a rolling update of this node group has no room, or None: EKS's update scales the
    group up before it drains old nodes (the EKS User Guide, "Managed node update behavior":
    the scale-up phase), and on an ODCR or a Capacity Block the group already fills, no new
    instance can start (the update fails with NodeCreationFailure)."""
    if params.reservation_id is None:
        return None
    found = ctx.aws.client("ec2").describe_capacity_reservations(
        CapacityReservationIds=[params.reservation_id]
    )["CapacityReservations"]
    if not found:
        return None
    total = int(found[0].get("TotalInstanceCount", 0))
    running = observed.live.scaling.desired_size
    if running < total:
        return None
    kind = "Capacity Block" if params.capacity_type == "CAPACITY_BLOCK" else "reservation"
    return (
        f"scaled to 0 and back: the group fills its {kind} {params.reservation_id} "
        f"({running} of {total} instances), so a rolling update has no room for its first "
        "new node (EKS's update adds nodes before it drains old ones); every node stops"
    )


def _no_surge(params: NodegroupParams) -> bool:
    """A node group on an UltraServer Capacity Block (``eks_upgrade.no_surge``)."""
    return no_surge(params.capacity_type, params.instance_type)


def _scale_in_said(
    ctx: Context,
    params: NodegroupParams,
    observed: Observed[NodegroupOut, NodegroupLive],
    change: FieldChange,
) -> FieldChange:
    """A scale-in, with what it moves: the nodes `up` will drain and their pods."""
    going = observed.live.scaling.desired_size - params.scaling.desired_size
    if going <= 0 or not ctx.known(params.cluster):
        return change
    cluster = ctx.get(params.cluster)
    try:
        api = connect(ctx, cluster.endpoint, cluster.ca)
        try:
            nodes, pods = eks_drain.affected(api, observed.id, going)
        finally:
            close(api)
    except Exception as exc:  # noqa: BLE001 - its API out of reach from here: said, the plan goes on
        moved = f"their pods could not be counted: {exc}"
    else:
        moved = f"{pods} pod(s) on {nodes} node(s) to move"
    note = (
        f"up first drains the {going} node(s) that go ({moved}, their disruption budgets "
        "respected, for at most compute.drain.timeout), then ends exactly those"
    )
    return dataclasses.replace(change, note=note)


def _gate_said(change: FieldChange) -> FieldChange:
    """A taint change that turns the verify gate on or off (health.verify.kubernetesGate),
    with what it does to the nodes the group has: EKS applies a node group's taint update
    to its nodes (README, the verify gate on EKS)."""
    before = {t[0] for t in change.before or ()}
    after = {t[0] for t in change.after or ()}
    if UNVERIFIED_TAINT in after - before:
        note = (
            "the verify gate goes on: every node the group has is tainted too, and takes no "
            "new work until it has passed (once its pods have ended and its devices are free); "
            "health.verify.kubernetesGate: false keeps it off"
        )
    elif UNVERIFIED_TAINT in before - after:
        note = "the verify gate goes off: the taint leaves every node, failed ones included"
    else:
        return change
    return dataclasses.replace(change, note=note)
