"""`fmctl plan / up / down`: the engine's use cases, over the sandbox or AWS.

`plan` reads (with clients that refuse any write) and compares; `up` takes the cluster's
lock, plans again, refuses what AWS cannot do or what would be replaced without leave
(located on the spec's line, before any call), asks, applies exactly that plan, and records
the spec only once it is applied; `down` deletes everything the cluster owns, found by tag.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from provisioner import FmctlError
from provisioner.blueprint import Blueprint, Where, build
from provisioner.estimate.cost import CostEstimate
from provisioner.graph.runner import RunResult
from provisioner.ops.executor import apply, critical_path
from provisioner.ops.planner import REFUSED_HINT, Action, Change, Plan, Planner, find_owned
from provisioner.ops.reservation_topology import ReservedPlace
from provisioner.ops.target import (
    Target,
    kubeconfig_path,
    make_context,
    pcluster_command,
    sandbox_validates_only,
)
from provisioner.resources import registry
from provisioner.resources.base import How, Owned
from provisioner.resources.context import Context, DrainSettings, Event
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem, SpecPath
from provisioner.state.store import ClusterState

#: How a waiting or taking-over run tells its user (a line on stderr).
Notice = Callable[[str], None]


class Refused(FmctlError):
    """`up` will not make these changes; each problem is located in the spec."""

    default_hint = "`fmctl plan` shows every change and why"

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


def where_for(spec: ClusterSpec, target: Target | None, state: str | None = None) -> Where:
    """The blueprint's view of this machine and target (``state``: the shared state's URL,
    which new resources carry)."""
    from pathlib import Path

    home = target.home if target else Path("~/.fmctl").expanduser()
    sandbox = target is not None and target.sandbox
    has_pcluster = target is not None and pcluster_command(target) is not None
    return Where(
        folder=home / "clusters" / spec.metadata.name,
        kubeconfig=kubeconfig_path(target, spec.metadata.name),
        token_args=target.token_args() if target is not None else (),
        parallelcluster=not sandbox or has_pcluster,
        validate_only=sandbox and target is not None and sandbox_validates_only(target),
        state=state,
    )


def blueprint_of(spec: ClusterSpec, target: Target | None, state: str | None = None) -> Blueprint:
    """The desired graph of ``spec`` on ``target`` (``state``: see ``where_for``)."""
    from provisioner.catalog import load_catalog

    return build(spec, load_catalog(), where_for(spec, target, state))


def _last_blueprint(spec: ClusterSpec, target: Target, state: ClusterState) -> Blueprint | None:
    """The blueprint of the spec `up` last applied (to tell drift from a change), if any."""
    from provisioner.spec.source import parse_source
    from provisioner.validate import validate_document

    text = state.spec_text()
    if not text:
        return None
    try:
        last = validate_document(parse_source(text)[0], spec.scheduler).resolved
        return blueprint_of(last, target, state.shared_url) if last is not None else None
    except Exception:  # noqa: BLE001 - an old spec this fmctl no longer reads: no drift, only changes
        return None


@dataclass
class PlanView:
    """`fmctl plan`: the changes, and the waves and critical path of what `up` runs."""

    plan: Plan
    offline: bool = False
    #: Where the spec's reservations sit (``reservation_topology.plan_places``): what it
    #: read, and why it could not.
    capacity: tuple[ReservedPlace, ...] = ()
    capacity_unread: str | None = None
    #: What the planned cluster costs (``estimate.cost``): the Price List online, the
    #: shipped table offline.
    cost: CostEstimate | None = None

    def as_data(self) -> dict[str, Any]:
        """The plan as JSON-able data."""
        from provisioner.ops.reservation_topology import describe

        seconds, chain, waves, serial = critical_path(self.plan)
        graph = self.plan.blueprint.graph()
        places = list(self.capacity)
        return {
            "cluster": self.plan.cluster,
            "region": self.plan.region,
            "offline": self.offline,
            "changes": [c.as_data() for c in self.plan.changes],
            "resources": [
                {
                    "id": item.id,
                    "kind": item.kind,
                    "dependsOn": sorted(graph.deps[item.id]),
                    "action": str(self.plan.change(item.id).action),
                }
                for item in self.plan.blueprint
            ],
            "counts": self.plan.counts(),
            # What `up` will refuse (AWS cannot make it): one entry per refused field.
            "refusals": [
                {
                    "resource": c.resource,
                    "field": f.path,
                    "reason": f.reason,
                    "spec": c.origin,
                    "hint": f.hint or REFUSED_HINT,
                }
                for c in self.plan.refused
                for f in c.refused
            ],
            "waves": waves,
            "critical_path": chain,
            "critical_path_s": seconds,
            "serial_s": serial,
            "notes": self.plan.notes,
            "capacity": {
                "reservations": [c.as_data() for c in places],
                "lines": describe(places),
                "unread": self.capacity_unread,
            },
            "cost": self.cost.as_data() if self.cost else None,
        }


def offline_plan(spec: ClusterSpec) -> Plan:
    """The plan when nothing is read: everything is to be created."""
    blueprint = blueprint_of(spec, None)
    changes = [Change(item.id, item.kind, Action.CREATE) for item in blueprint]
    return Plan(spec.metadata.name, spec.metadata.region, blueprint, changes)


def offline_view(spec: ClusterSpec) -> PlanView:
    """`fmctl plan --offline`: everything to create, priced from the shipped table."""
    from datetime import date

    from provisioner.estimate.cost import ShippedBook, estimate

    plan = offline_plan(spec)
    cost = estimate(
        spec, _kinds(plan.blueprint), ShippedBook(), date.today(), _eks_policy(plan.blueprint)
    )
    return PlanView(plan, offline=True, cost=cost)


def plan_view(spec: ClusterSpec, target: Target) -> PlanView:
    """`fmctl plan` online: the plan, where the spec's reservations sit, and what the cluster
    costs at today's prices (all read-only)."""
    from datetime import date

    from provisioner.estimate.cost import estimate
    from provisioner.ops.cost import PriceListBook, cache_for
    from provisioner.ops.reservation_topology import plan_places

    ctx = make_context(target, spec.metadata.name, read_only=True)
    places, unread = plan_places(ctx.aws, spec)
    plan = plan_cluster(spec, target, ctx)
    book = PriceListBook(ctx.aws, spec.network.availability_zone, cache_for(target.home))
    cost = estimate(spec, _kinds(plan.blueprint), book, date.today(), _eks_policy(plan.blueprint))
    return PlanView(plan, capacity=tuple(places), capacity_unread=unread, cost=cost)


def _kinds(blueprint: Blueprint) -> list[tuple[str, str]]:
    return [(item.id, item.kind) for item in blueprint]


def _eks_policy(blueprint: Blueprint) -> str:
    """The planned EKS cluster's upgradePolicy.supportType (what its rate depends on)."""
    found = [item.params.support_type for item in blueprint if item.kind == "eks-cluster"]
    return str(found[0]) if found else "STANDARD"


def plan_cluster(
    spec: ClusterSpec,
    target: Target,
    ctx: Context | None = None,
    state: ClusterState | None = None,
) -> Plan:
    """Read and compare (read-only clients: no write call can leave this machine; the
    state is read, never locked)."""
    from provisioner.ops import budget_guard
    from provisioner.ops.team import open_state

    ctx = ctx or make_context(target, spec.metadata.name, read_only=True)
    state = state or open_state(target, spec.metadata.name, spec)
    desired = blueprint_of(spec, target, state.shared_url)
    planner = Planner(desired, ctx, _last_blueprint(spec, target, state))
    plan = planner.plan()
    budget_guard.hold(plan)
    return plan


def _path(dotted: str) -> SpecPath:
    """``compute.gpuPools[0].count`` -> ("compute", "gpuPools", 0, "count")."""
    import re

    out: list[str | int] = []
    for part in dotted.split("."):
        name, *indexes = re.split(r"\[(\d+)\]", part)
        if name:
            out.append(name)
        out += [int(i) for i in indexes if i]
    return tuple(out)


def _causes(plan: Plan) -> dict[str, str | None]:
    """Per replaced resource, the spec path that forces it: its own change's, or (for one
    replaced because what it refers to is) that of the first replaced resource it refers
    to."""
    from provisioner.ops.planner import references

    replaced = {c.resource: c for c in plan.changes if c.action == Action.REPLACE}
    out: dict[str, str | None] = {}
    for wave in plan.blueprint.graph().waves():
        for rid in wave:
            if rid not in replaced:
                continue
            origin = replaced[rid].origin
            if origin is None:
                under = [out[t] for t in sorted(references(plan.blueprint[rid])) if out.get(t)]
                origin = under[0] if under else None
            out[rid] = origin
    return out


#: The kinds that are a scheduler's cluster: deleting one (a scheduler or provider switch)
#: ends every job on it, so it needs the same leave as a replacement.
SCHEDULER_KINDS = {
    "eks-cluster": "EKS",
    "parallelcluster": "ParallelCluster",
    "pcs-cluster": "AWS PCS",
}


def refusals(plan: Plan, allow_replace: bool) -> list[Problem]:
    """What stops `up` before any call: unreadable resources, changes AWS cannot make, and
    replacements without leave (one problem per spec setting, naming all it replaces and
    what is lost with them)."""
    problems = []
    for c in plan.unreadable:
        problems.append(Problem("plan-unreadable", f"{c.resource}: {c.reason}", hint=c.hint))
    for c in plan.changes:
        for f in c.refused:
            problems.append(
                Problem(
                    "change-refused",
                    f"{c.resource}: {f.path} cannot change from {f.before} to {f.after}: "
                    f"{f.reason}",
                    _path(c.origin) if c.origin else (),
                    hint=f.hint or REFUSED_HINT,
                )
            )
    if allow_replace:
        return problems
    for c in plan.changes:
        stops = [f for f in c.fields if f.how == How.STOP]
        if stops and not c.refused:
            problems.append(
                Problem(
                    "stop-refused",
                    f"this change stops every node of {c.resource} ({stops[0].path}: "
                    f"{stops[0].reason})",
                    _path(c.origin) if c.origin else (),
                    hint="change it back, or run `fmctl up --allow-replace` to stop and "
                    "restart the pool (its running jobs end)",
                )
            )
    for c in plan.changes:
        if c.action == Action.DELETE and c.kind in SCHEDULER_KINDS:
            problems.append(
                Problem(
                    "scheduler-switch-refused",
                    f"this change deletes the {SCHEDULER_KINDS[c.kind]} cluster {c.aws_id} "
                    f"({c.reason}): every node goes, with the jobs or pods running on it",
                    ("scheduler",),
                    hint="change scheduler (or slurm.provider) back, or run `fmctl up "
                    "--allow-replace` to delete it and make the new one",
                )
            )
    causes = _causes(plan)
    by_origin: dict[str | None, list[Change]] = {}
    for c in plan.changes:
        if c.action == Action.REPLACE and not c.refused:
            by_origin.setdefault(causes.get(c.resource), []).append(c)
    for origin, changes in by_origin.items():
        first = changes[0]
        names = ", ".join(c.resource for c in changes)
        lost = "; ".join(c.loses for c in changes if c.loses)
        problems.append(
            Problem(
                "replace-refused",
                f"this change replaces {names} ({first.resource}: {first.reason})"
                + (f"; lost with them: {lost}" if lost else ""),
                _path(origin) if origin else (),
                hint="change it back, or run `fmctl up --allow-replace` to replace them",
            )
        )
    return problems


@dataclass
class UpOutcome:
    """What `up` did."""

    plan: Plan
    result: RunResult
    ctx: Context
    applied: bool = False
    pending: list[Change] = field(default_factory=list)


def up(
    spec: ClusterSpec,
    spec_text: str,
    target: Target,
    on_event: Callable[[Event], None],
    confirm: Callable[[Plan], bool] = lambda plan: True,
    allow_replace: bool = False,
    wait: bool = False,
    notice: Notice = print,
) -> UpOutcome | None:
    """Plan under the cluster's lock, refuse or ask, apply; None when ``confirm`` declined.

    The spec is recorded as applied only when every step succeeded; otherwise the last
    applied spec stays, and the outcome lists the changes still pending. The audit log gets
    the run before its first change and its result after; a run whose lease is lost stops
    (LeaseLost) and writes nothing more."""
    from provisioner.ops.team import holder, note_location, open_state

    state = open_state(target, spec.metadata.name, spec)
    state.lock(holder(target, "up", spec_text), wait, notice)
    note_location(target, state)
    try:
        plan = plan_cluster(spec, target, state=state)
        problems = refusals(plan, allow_replace)
        if problems:
            raise Refused(problems)
        if not confirm(plan):
            return None

        def record(event: Event) -> None:
            state.log({"resource": event.resource, "state": event.state, "detail": event.detail})
            on_event(event)

        # The plan was read against the state as the lock found it: if the lease lapsed
        # while the user read the plan, another run may have changed both since, and
        # audit_start (fenced, as every state write) stops here.
        state.audit_start(tuple(c.summary() for c in plan.acting))
        state.save_region(spec.metadata.region)
        ctx = make_context(target, spec.metadata.name, record, fence=state.fence)
        ctx.drain = drain_settings(spec)
        result = apply(plan, ctx)
        outcome = UpOutcome(plan, result, ctx)
        state.save_outputs({k: _plain(v) for k, v in ctx.outputs.items()})
        if result.ok:
            state.save_spec(spec_text)
            outcome.applied = True
        else:
            finished = set(result.done)
            outcome.pending = [
                c
                for c in plan.acting
                if c.resource not in finished and f"delete:{c.kind}:{c.aws_id}" not in finished
            ]
        state.audit_finish("ok" if result.ok else "failed")
        return outcome
    finally:
        state.unlock()


def drain_settings(spec: ClusterSpec) -> DrainSettings | None:
    """The spec's ``compute.drain``, for the run context (None: timeout 0, no drain)."""
    from provisioner.validate.rules.general import parse_ttl

    drain = spec.compute.drain
    seconds = parse_ttl(drain.timeout)
    return DrainSettings(float(seconds), drain.jobs) if seconds else None


def _plain(outputs: Any) -> Any:
    import dataclasses

    from provisioner.resources.base import jsonable

    return jsonable(outputs) if dataclasses.is_dataclass(outputs) else outputs


def owned_by(target: Target, name: str, skip_kubernetes: bool = False) -> list[Owned]:
    """Everything tagged as cluster ``name``'s on ``target`` (tags only: no local state).
    ``skip_kubernetes``: what lives only in the cluster's Kubernetes API is not looked for
    (`down --skip-kubernetes-cleanup`, whose API may not be reachable)."""
    ctx = make_context(target, name, read_only=True)
    ctx.skip_kubernetes_cleanup = skip_kubernetes
    return find_owned(ctx)


def down(
    name: str,
    target: Target,
    on_event: Callable[[Event], None],
    skip_kubernetes_cleanup: bool = False,
    wait: bool = False,
    notice: Notice = print,
    keep: frozenset[str] = frozenset(),
) -> tuple[RunResult, list[Owned]]:
    """Delete everything tagged as the cluster's, dependents first (``skip_kubernetes_cleanup``:
    see ``Context.skip_kubernetes_cleanup``), under its lock, audited as `up` is. Resources
    of the kinds in ``keep`` (``down --keep-logs``: log groups) are released instead: no
    longer tagged as the cluster's, named to ``notice`` with how to delete them later."""
    from provisioner.ops.team import holder, open_state

    state = open_state(target, name)
    state.lock(holder(target, "down"), wait, notice)
    try:

        def record(event: Event) -> None:
            state.log({"resource": event.resource, "state": event.state, "detail": event.detail})
            on_event(event)

        ctx = make_context(target, name, record, fence=state.fence)
        ctx.skip_kubernetes_cleanup = skip_kubernetes_cleanup
        ctx.teardown = True
        from provisioner.ops.teardown import retained

        found = find_owned(ctx)
        kept = [o for o in found if o.kind in keep] + retained(ctx, found)
        found = [o for o in found if o not in kept]
        # The file system last: a run killed in between finds it still the cluster's (and
        # retained), so the next one keeps what it holds on to rather than deleting it.
        for o in sorted(kept, key=lambda o: (o.kind == "fsx", o.kind, o.id)):
            notice(registry.kinds()[o.kind].release(ctx, o))
        plan = Plan(name, target.region, Blueprint(()))
        plan.changes = [
            Change(o.resource, o.kind, Action.DELETE, aws_id=o.id, owned=o) for o in found
        ]
        state.audit_start(tuple(c.summary() for c in plan.changes))
        result = apply(plan, ctx)
        if result.ok:
            state.save_outputs({})
        state.audit_finish("ok" if result.ok else "failed")
        return result, found
    finally:
        state.unlock()


def refused_fields(plan: Plan) -> list[tuple[Change, Any]]:
    """(change, field) for each field AWS cannot change."""
    return [(c, f) for c in plan.changes for f in c.fields if f.how == How.IMMUTABLE]
