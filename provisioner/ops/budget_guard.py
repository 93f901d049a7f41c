"""A spent budget holds: once a cluster's budget (``cost.budget`` with ``actions: stop``) is
spent and its stop function has scaled the node groups to zero, `up` refuses to bring nodes
back (a node group grown, or a new one made) until the spec raises the limit above what is
spent, or the budget's period starts again. A re-run of `up`, a pipeline applying the same
spec, would otherwise undo the stop within minutes and spend on."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

from provisioner.ops.planner import Action, Change, Plan
from provisioner.resources.base import FieldChange, How
from provisioner.resources.budgets import BudgetParams, usd

#: The node groups a stop scales to zero, and the fields whose growth brings nodes back.
GROWS: dict[str, tuple[str, ...]] = {
    "eks-nodegroup": ("scaling.desired_size", "scaling.min_size"),
    "pcs-node-group": ("min_count", "max_count"),
}


def _grows(change: Change) -> list[FieldChange]:
    watched = GROWS.get(change.kind, ())
    return [
        f
        for f in change.fields
        if f.path in watched
        and isinstance(f.before, int)
        and isinstance(f.after, int)
        and f.after > f.before
    ]


def hold(plan: Plan) -> None:
    """Refuse the changes that would bring nodes back while the budget is spent."""
    budget = next((i for i in plan.blueprint if i.kind == "budget" and i.params.stop_topic), None)
    if budget is None or budget.id not in plan.observed:
        return
    params: BudgetParams = budget.params
    spent = Decimal(plan.observed[budget.id].live.spent)
    if spent < Decimal(usd(params.limit)):
        return
    reason = (
        f"up will refuse this: the budget is spent ({spent} USD of {usd(params.limit)} this "
        "period) and its stop function has scaled the cluster to zero"
    )
    hint = (
        f"raise cost.budget above {spent} USD (or wait for the budget's next period), then "
        "`fmctl up`"
    )
    for index, change in enumerate(plan.changes):
        moving = change.action in (Action.UPDATE, Action.DRIFT)
        growing: list[Any] = _grows(change) if moving else []
        made = change.action == Action.CREATE and change.kind in GROWS
        if not (growing or made):
            continue
        fields = tuple(
            dataclasses.replace(f, how=How.IMMUTABLE, reason="the budget is spent", hint=hint)
            if f in growing
            else f
            for f in change.fields
        )
        if made:  # a new node group: refused as a whole
            fields += (FieldChange("nodes", 0, "new", How.IMMUTABLE, "the budget is spent", hint),)
        plan.changes[index] = dataclasses.replace(
            change,
            action=Action.REFUSE,
            fields=fields,
            reason=reason,
            hint=hint,
            origin="cost.budget",
        )
