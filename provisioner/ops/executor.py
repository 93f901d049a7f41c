"""`up` applies exactly what the plan says, in dependency order, with bounded parallelism.

Steps, read off the plan:
- ``ID``: create, update, wait for, or (replacements) make resource ``ID`` — after the steps
  of everything it refers to;
- ``-ID``: delete the old resource of a replacement that cannot hold two at once (most names
  and address ranges), before the new one is made; dependents being replaced go first;
- ``delete:KIND:AWS-ID``: delete what the spec no longer has, once everything else is done
  (nothing is taken away before its successor runs), dependents first.

A replacement that can hold two at once (node groups, blue/green) makes the new one, waits
until it is usable, then deletes the old one, in one step. `down` is the plan with nothing
desired: only delete steps, the mirror of creation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from provisioner.graph.graph import Graph
from provisioner.graph.runner import DEFAULT_PARALLELISM, RunResult, run
from provisioner.ops.planner import Action, Change, Plan, references, steps_seconds
from provisioner.resources.base import Owned, Request
from provisioner.resources.context import Context
from provisioner.resources.registry import kind_deletion_order, kinds, waits_for


@dataclass(frozen=True)
class Step:
    """One thing `up` does."""

    id: str
    change: Change
    verb: str  # create | update | wait | replace | delete


def _delete_first(plan: Plan) -> set[str]:
    """Replacements that delete the old resource first: every kind but those that can hold
    two at once, and those too when something they refer to is deleted first."""
    replaced = {c.resource: c for c in plan.changes if c.action == Action.REPLACE}
    out: set[str] = set()
    for wave in plan.blueprint.graph().waves():
        for rid in wave:
            if rid not in replaced:
                continue
            kind = kinds()[replaced[rid].kind]
            under = references(plan.blueprint[rid]) & out
            if not kind.create_before_delete or under:
                out.add(rid)
    return out


def steps(plan: Plan) -> tuple[dict[str, Step], Graph]:
    """The steps of ``plan`` and the order they run in."""
    first = _delete_first(plan)
    out: dict[str, Step] = {}
    for change in plan.changes:
        if change.action == Action.DELETE:
            assert change.owned is not None
            key = f"delete:{change.kind}:{change.owned.id}"
            out[key] = Step(key, change, "delete")
        elif change.action == Action.REPLACE:
            out[change.resource] = Step(change.resource, change, "replace")
            if change.resource in first:
                out[f"-{change.resource}"] = Step(f"-{change.resource}", change, "delete")
        elif change.action in (Action.CREATE, Action.UPDATE, Action.DRIFT, Action.WAIT):
            verb = {Action.CREATE: "create", Action.WAIT: "wait"}.get(change.action, "update")
            out[change.resource] = Step(change.resource, change, verb)
    deps: dict[str, set[str]] = {key: set() for key in out}
    makes = [k for k, s in out.items() if s.verb != "delete"]
    for key in makes:
        rid = out[key].change.resource
        deps[key] |= {t for t in references(plan.blueprint[rid]) if t in out}
        if f"-{rid}" in out:
            deps[key].add(f"-{rid}")
    order = kind_deletion_order()
    deletes = [k for k, s in out.items() if s.verb == "delete"]
    for key in deletes:
        blockers = waits_for(order, out[key].change.kind)
        deps[key] |= {k for k in deletes if k != key and out[k].change.kind in blockers}
        if key.startswith("delete:"):  # what the spec dropped goes once the rest is done
            deps[key] |= set(makes)
    return out, Graph.of(deps)


def critical_path(plan: Plan) -> tuple[float, list[str], list[list[str]], float]:
    """(seconds, chain, waves, serial seconds) of what `up` will run."""
    table, graph = steps(plan)
    seconds = steps_seconds(plan)
    per = {key: seconds(key) for key in table}
    total, chain = graph.critical_path(per)
    return total, chain, graph.waves(), sum(per.values())


def apply(
    plan: Plan,
    ctx: Context,
    parallelism: int = DEFAULT_PARALLELISM,
    on_step: Callable[[str, str], None] = lambda step, state: None,
) -> RunResult:
    """Run the plan's steps; outputs of what stays as it is are known from the plan."""
    table, graph = steps(plan)
    for rid, outputs in plan.outputs.items():
        ctx.record(rid, outputs)
    for change in plan.changes:
        if change.action in (Action.UNCHANGED, Action.USE):
            ctx.emit(change.resource, "exists", change.aws_id or "")

    def task(key: str) -> str:
        step = table[key]
        done = _run(ctx, plan, step)
        on_step(key, done)
        return done

    return run(graph, task, parallelism, lambda node, error: ctx.emit(node, "failed", str(error)))


def _run(ctx: Context, plan: Plan, step: Step) -> str:
    ctx.fence()  # a step of a run whose lease is gone never starts (pcluster included)
    change = step.change
    kind = kinds()[change.kind]
    rid = change.resource
    if step.verb == "delete":
        owned = change.owned or Owned(change.kind, rid, change.aws_id or "")
        kind.before_delete(ctx, owned)
        ctx.emit(rid, "deleting", owned.id)
        kind.delete(ctx, owned)
        ctx.emit(rid, "deleted", owned.id)
        return "deleted"
    req = Request(ctx, rid, plan.blueprint[rid].params)
    observed = plan.observed.get(rid)
    if step.verb == "create":
        ctx.emit(rid, "creating")
        out: Any = kind.create(req)
        verb = "created"
    elif step.verb == "wait":
        assert observed is not None
        ctx.emit(rid, "waiting", observed.pending or "")
        out = kind.wait(req, observed)
        verb = "existed"
    elif step.verb == "update":
        assert observed is not None
        if observed.pending:
            ctx.emit(rid, "waiting", observed.pending)
            kind.wait(req, observed)
        shown = sorted(
            {
                f.path.split(".")[0] if f.path.startswith("objects.") else f.path
                for f in change.fields
            }
        )
        paths = ", ".join(shown[:6]) + (f" and {len(shown) - 6} more" if len(shown) > 6 else "")
        if change.action == Action.DRIFT:
            paths = f"{observed.id}: restored what was changed outside fmctl: {paths}"
        ctx.emit(rid, "updating", paths)
        out = kind.update(req, observed, change.fields)
        verb = "updated"
    else:  # replace
        assert observed is not None
        if f"-{rid}" in steps_of(plan):
            ctx.emit(rid, "creating", "the replacement")
            out = kind.create(req)
        else:  # blue/green: the new one first, usable, then the old one goes
            renamed = getattr(kind, "renamed", None)
            fresh = renamed(req.params, observed) if renamed else req.params
            ctx.emit(rid, "creating", "the replacement, before the old one goes")
            out = kind.create(req.with_params(fresh))
            # Said in the order it happens: the new one usable, what must happen before the
            # old one goes (a drain, queues moved), then its deletion.
            ctx.emit(rid, "note", f"the replacement {getattr(out, 'id', '')} is ready")
            old = Owned(change.kind, rid, observed.id)
            kind.before_delete(ctx, old)
            ctx.emit(rid, "deleting", f"{observed.id} (replaced)")
            kind.delete(ctx, old)
        verb = "replaced"
    ctx.record(rid, out)
    ctx.emit(rid, "ready", str(getattr(out, "id", "")))
    return verb


def steps_of(plan: Plan) -> set[str]:
    """The step ids of a plan."""
    return set(steps(plan)[0])
