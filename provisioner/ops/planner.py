"""`fmctl plan`: read every resource of the desired graph, compare it with the spec, and say
per resource what `up` will do — create, update (field by field), replace (why), delete
(owned, no longer in the spec), drift (changed outside fmctl), wait (left on its way by an
earlier run), or nothing. Reading changes nothing: the clients are read-only.

A read that fails is reported against its resource, never the end of the plan.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from provisioner.blueprint import Blueprint
from provisioner.drivers.aws import translate
from provisioner.graph.graph import Graph
from provisioner.graph.ref import UNKNOWN, refs_in
from provisioner.graph.runner import run
from provisioner.resources.base import (
    FieldChange,
    How,
    Observed,
    Owned,
    Planned,
    Request,
    has_unknown,
    jsonable,
)
from provisioner.resources.context import Context
from provisioner.resources.registry import kinds
from provisioner.resources.tags import Tags


class Action(enum.StrEnum):
    """What `up` does to one resource."""

    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    DRIFT = "drift"
    WAIT = "wait"
    UNCHANGED = "unchanged"
    USE = "use"  # named by the spec, not fmctl's: read, never changed
    UNREADABLE = "unreadable"
    #: A change AWS cannot make (and fmctl will not replace around): `up` refuses the plan.
    REFUSE = "refuse"


#: Actions that make `up` do something.
#: What to do about a change AWS cannot make, when its field says nothing better.
REFUSED_HINT = "change it back in the spec, or make a new cluster with the new value"
ACTING = {Action.CREATE, Action.UPDATE, Action.REPLACE, Action.DELETE, Action.DRIFT, Action.WAIT}
#: What a spec edit makes of a resource (drift and waits are not the spec's doing).
SPEC_CHANGES = {Action.CREATE, Action.UPDATE, Action.REPLACE, Action.REFUSE}


@dataclass(frozen=True)
class Change:
    """What `up` will do to one resource, and why."""

    resource: str
    kind: str
    action: Action
    fields: tuple[FieldChange, ...] = ()
    reason: str = ""
    aws_id: str | None = None
    hint: str | None = None
    #: Where in the spec the change that forces a replacement (or is refused) comes from.
    origin: str | None = None
    #: Delete-first replacements and deletes: what AWS holds now.
    owned: Owned | None = None
    #: What is lost with the old resource (a file system's data), for replacements.
    loses: str | None = None

    @property
    def refused(self) -> list[FieldChange]:
        """Changes AWS cannot make (and fmctl will not replace around)."""
        return [f for f in self.fields if f.how == How.IMMUTABLE]

    def summary(self) -> str:
        """One line for the audit log: ``update nodegroup/p5en: scaling.desiredSize``."""
        paths = ", ".join(f.path for f in self.fields[:8])
        more = f" and {len(self.fields) - 8} more" if len(self.fields) > 8 else ""
        target = f" {self.aws_id}" if self.action == Action.DELETE and self.aws_id else ""
        return f"{self.action} {self.resource}{target}" + (f": {paths}{more}" if paths else "")

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        data: dict[str, Any] = {
            "resource": self.resource,
            "kind": self.kind,
            "action": str(self.action),
            "fields": [f.as_data() for f in self.fields],
            "reason": self.reason,
        }
        for key in ("aws_id", "hint", "origin", "loses"):
            if getattr(self, key):
                data[key] = getattr(self, key)
        return data


@dataclass
class Plan:
    """The changes `up` will make, in the desired graph's order, deletes last."""

    cluster: str
    region: str
    blueprint: Blueprint
    changes: list[Change] = field(default_factory=list)
    #: What was read, by logical id (existing resources only).
    observed: dict[str, Observed[Any, Any]] = field(default_factory=dict)
    #: Outputs known once planned (resources that stay as they are).
    outputs: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def change(self, rid: str) -> Change:
        """The change of one desired resource."""
        return next(c for c in self.changes if c.resource == rid and c.action != Action.DELETE)

    @property
    def acting(self) -> list[Change]:
        """Changes that make `up` do something."""
        return [c for c in self.changes if c.action in ACTING]

    @property
    def refused(self) -> list[Change]:
        """Changes `up` refuses (AWS cannot make them): with one, `up` changes nothing."""
        return [c for c in self.changes if c.action == Action.REFUSE]

    @property
    def unreadable(self) -> list[Change]:
        """Resources whose read failed."""
        return [c for c in self.changes if c.action == Action.UNREADABLE]

    def counts(self) -> dict[str, int]:
        """How many resources per action."""
        out: dict[str, int] = {}
        for c in self.changes:
            out[str(c.action)] = out.get(str(c.action), 0) + 1
        return out


def _value_at(view: Any, path: str) -> Any:
    """The value at ``path`` of a live view (dotted fields; ``data.`` leaves of a flattened
    launch template)."""
    head, _, rest = path.partition(".")
    value = getattr(view, head, UNKNOWN)
    if head == "data" and isinstance(value, tuple):
        return dict(value).get(rest, UNKNOWN)
    for part in rest.split(".") if rest else ():
        value = getattr(value, part, UNKNOWN)
    return value


def _spec_of(item: Planned, path: str) -> str | None:
    """The spec setting a live field comes from (the longest of its prefixes the builder
    named), or None."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        found = item.origins.get(".".join(parts[:n]))
        if found:
            return found
    return None


def _origin(item: Planned, changes: list[FieldChange]) -> str | None:
    """The spec path of the first change that forces a replacement or is refused."""
    for change in changes:
        if change.how != How.UPDATE:
            found = _spec_of(item, change.path)
            if found:
                return found
    return None


@dataclass
class Planner:
    """Reads and compares one blueprint against what exists."""

    blueprint: Blueprint
    ctx: Context
    #: The blueprint of the spec last applied, to tell drift from a spec change.
    last: Blueprint | None = None
    parallelism: int = 8
    observed: dict[str, Observed[Any, Any]] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)
    #: The changes compared so far (a resource is compared after what it refers to).
    _changes: dict[str, Change] = field(default_factory=dict)

    def plan(self) -> Plan:
        """Read, compare, and list what the cluster owns that the spec no longer has."""
        graph = self.blueprint.graph()
        self._read(graph)
        plan = Plan(self.ctx.cluster, self.ctx.region, self.blueprint, observed=self.observed)
        plan.notes.extend(self.blueprint.notes)
        diff_ctx = dataclasses.replace(self.ctx, outputs={})
        changes = self._changes = {}

        def task(rid: str) -> str:
            change, outputs = self._compare(diff_ctx, self.blueprint[rid])
            with self.ctx.lock:
                changes[rid] = change
            if outputs is not None:
                diff_ctx.record(rid, outputs)
            return str(change.action)

        result = run(graph, task, self.parallelism)
        for rid, error in result.failed.items():  # a compare that failed: say so, go on
            changes[rid] = self._unreadable(self.blueprint[rid], error)
        for rid in result.skipped:
            changes[rid] = Change(
                rid, self.blueprint[rid].kind, Action.UNREADABLE, reason="not compared"
            )
        plan.notes.extend(
            f"{rid}: {note}"
            for rid in self.blueprint.ids
            if rid in self.observed
            for note in self.observed[rid].notes
        )
        plan.changes = [changes[rid] for rid in self.blueprint.ids]
        plan.changes += self._deletes()
        plan.outputs = dict(diff_ctx.outputs)
        return plan

    # -- reading ------------------------------------------------------------------------
    def _read(self, graph: Graph) -> None:
        def task(rid: str) -> str:
            item = self.blueprint[rid]
            try:
                observed = kinds()[item.kind].read(Request(self.ctx, rid, item.params))
            except Exception as exc:  # noqa: BLE001 - every kind's failure is kept and said per resource
                with self.ctx.lock:
                    self.errors[rid] = exc
                return "unreadable"
            if observed is None:
                return "absent"
            with self.ctx.lock:
                self.observed[rid] = observed
            self.ctx.record(rid, observed.outputs)
            return "read"

        run(graph, task, self.parallelism)

    def _unreadable(self, item: Planned, error: BaseException) -> Change:
        translated = translate(error, f"reading {item.id}")
        return Change(
            item.id,
            item.kind,
            Action.UNREADABLE,
            reason=str(translated),
            hint=translated.hint or "check the credentials' read permissions, then plan again",
        )

    # -- comparing ----------------------------------------------------------------------
    def _compare(self, ctx: Context, item: Planned) -> tuple[Change, Any]:
        kind = kinds()[item.kind]
        if item.id in self.errors:
            return self._unreadable(item, self.errors[item.id]), None
        observed = self.observed.get(item.id)
        if observed is None:
            if not kind.owned:
                missing = kind.missing(Request(ctx, item.id, item.params))
                change = self._unreadable(item, missing)
                return dataclasses.replace(change, reason=str(missing)), None
            return Change(item.id, item.kind, Action.CREATE), None
        if not kind.owned:
            return Change(item.id, item.kind, Action.USE, aws_id=observed.id), observed.outputs
        fields = kind.diff(Request(ctx, item.id, item.params), observed)
        fields = self._mark_drift(ctx, item, observed, fields)
        fields = [dataclasses.replace(f, spec=f.spec or _spec_of(item, f.path)) for f in fields]
        replaces = [f for f in fields if f.how == How.REPLACE]
        if replaces:
            change = Change(
                item.id,
                item.kind,
                Action.REPLACE,
                tuple(fields),
                "; ".join(f"{f.path}: {f.reason}" for f in replaces),
                observed.id,
                origin=_origin(item, fields),
                owned=Owned(item.kind, item.id, observed.id),
                loses=self._loses(item, observed),
            )
            return change, None
        if fields:
            drift = all(f.drift for f in fields)
            action = Action.DRIFT if drift else Action.UPDATE
            reason = "changed outside fmctl; up puts it back" if drift else ""
            if observed.pending:
                reason = f"{observed.pending} since an earlier run; up waits, then updates"
            refused = [f for f in fields if f.how == How.IMMUTABLE]
            if refused:
                action = Action.REFUSE
                reason = f"up will refuse this: {refused[0].path}: {refused[0].reason}"
            after = getattr(kind, "outputs_after", None)
            outputs = after(observed, fields) if after else observed.outputs
            return (
                Change(
                    item.id,
                    item.kind,
                    action,
                    tuple(fields),
                    reason,
                    observed.id,
                    hint=(refused[0].hint or REFUSED_HINT) if refused else None,
                    origin=_origin(item, refused) if refused else None,
                ),
                outputs,
            )
        if observed.pending:
            reason = f"{observed.pending}: left on its way by an earlier run; up waits for it"
            return Change(
                item.id, item.kind, Action.WAIT, (), reason, observed.id
            ), observed.outputs
        return Change(item.id, item.kind, Action.UNCHANGED, aws_id=observed.id), observed.outputs

    def _mark_drift(
        self, ctx: Context, item: Planned, observed: Observed[Any, Any], fields: list[FieldChange]
    ) -> list[FieldChange]:
        """A change the spec did not make (the last applied spec asked for the same value)
        is drift: someone changed the resource by hand. Not when something it refers to
        changes with this spec: its new value (a launch template's version, an id) is a
        consequence of the edit, however the old spec's params read it."""
        if self.last is None or item.id not in self.last or not fields:
            return fields
        with self.ctx.lock:
            under = [self._changes.get(rid) for rid in references(item)]
        if any(c is not None and c.action in SPEC_CHANGES for c in under):
            return fields
        old = self.last[item.id]
        if old.kind != item.kind:
            return fields
        try:
            before = kinds()[item.kind].desired(Request(ctx, item.id, old.params), observed)
            now = kinds()[item.kind].desired(Request(ctx, item.id, item.params), observed)
        except Exception:  # noqa: BLE001 - the old spec no longer makes sense: not drift, a change
            return fields
        out = []
        for f in fields:
            old_value, new_value = _value_at(before, f.path), _value_at(now, f.path)
            known = not has_unknown(old_value) and not has_unknown(new_value)
            same = known and _plain(old_value) == _plain(new_value)
            out.append(dataclasses.replace(f, drift=True) if same else f)
        return out

    def _loses(self, item: Planned, observed: Observed[Any, Any]) -> str | None:
        if item.kind == "fsx":
            live = observed.live
            return (
                f"FSx for Lustre {observed.id} and every file on it "
                f"({getattr(live, 'capacity_gib', '?')} GiB)"
            )
        if item.kind == "eks-cluster":
            return f"EKS cluster {observed.id} and everything running in it"
        if item.kind == "vpc":
            return f"VPC {observed.id} and everything in it"
        return None

    # -- what the spec no longer has ----------------------------------------------------
    def _deletes(self) -> list[Change]:
        wanted = {item.id: item for item in self.blueprint}
        out = []
        found: list[Owned] = []
        only = scheduler_kinds(self.blueprint)
        for name, kind in kinds().items():
            if only is not None and name not in only:
                continue
            try:
                found += kind.find_owned(self.ctx)
            except Exception as exc:  # noqa: BLE001 - say so; the resources of the kind read already did
                translated = translate(exc, f"listing the cluster's {name} resources")
                out.append(
                    Change(
                        f"({name})",
                        name,
                        Action.UNREADABLE,
                        reason=str(translated),
                        hint=translated.hint or "check the credentials' read permissions",
                    )
                )
        for owned in found:
            item = wanted.get(owned.resource)
            if item is None:
                reason = "owned by the cluster, no longer in the spec"
                displaced = _displaced(self.ctx, owned)
                if displaced:
                    reason += f"; {displaced}"
            elif item.kind == owned.kind and owned.resource in self.observed:
                if self.observed[owned.resource].id == owned.id:
                    continue
                reason = f"a second {owned.kind} tagged {owned.resource}: left by a replacement"
            else:
                continue
            out.append(
                Change(
                    owned.resource,
                    owned.kind,
                    Action.DELETE,
                    reason=reason,
                    aws_id=owned.id,
                    owned=owned,
                    loses=_lost_on_delete(owned),
                )
            )
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Tags):
        return value.items
    return jsonable(value)


def _displaced(ctx: Context, owned: Owned) -> str | None:
    """What the delete takes from running work, as its kind counts it; a count that cannot
    be read is said, not fatal to the plan."""
    try:
        return kinds()[owned.kind].displaces(ctx, owned)
    except Exception as exc:  # noqa: BLE001 - its cluster's API out of reach from here: the plan goes on
        return f"the work on it could not be counted ({translate(exc, 'counting')})"


def _lost_on_delete(owned: Owned) -> str | None:
    if owned.kind == "fsx":
        return f"FSx for Lustre {owned.id} and every file on it"
    return None


def scheduler_kinds(blueprint: Blueprint) -> set[str] | None:
    """Kinds worth listing for what a cluster owns (None: all). ParallelCluster's are asked
    through a subprocess each: only for Slurm clusters."""
    if any(item.kind.startswith("eks-") for item in blueprint):
        return {k for k in kinds() if not k.startswith("parallelcluster")}
    return None


def find_owned(ctx: Context, only: set[str] | None = None) -> list[Owned]:
    """Everything tagged as the cluster's, in every kind (tags only, no local state)."""
    found: list[Owned] = []
    for name, kind in kinds().items():
        if only is not None and name not in only:
            continue
        found += kind.find_owned(ctx)
    return found


def steps_seconds(plan: Plan) -> Callable[[str], float]:
    """The documented duration of a step of ``plan`` (``-ID`` deletes, ``ID`` the rest)."""
    by_id = {c.resource: c for c in plan.changes if c.action != Action.DELETE}

    def seconds(step: str) -> float:
        if step.startswith("delete:"):
            return kinds()[step.split(":")[1]].delete_seconds
        if step.startswith("-"):
            return kinds()[by_id[step[1:]].kind].delete_seconds
        change = by_id[step]
        kind = kinds()[change.kind]
        if change.action in (Action.UPDATE, Action.DRIFT):
            return kind.update_seconds
        if change.action == Action.REPLACE and kind.create_before_delete:
            return kind.create_seconds + kind.delete_seconds
        return kind.create_seconds

    return seconds


def references(item: Planned) -> set[str]:
    """The logical ids ``item``'s params refer to."""
    return {ref.target for ref in refs_in(item.params)}
