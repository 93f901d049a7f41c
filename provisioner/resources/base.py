"""The contract every resource kind follows, and what the verbs exchange.

A kind has typed ``Params`` (what the spec asks for; references to other resources are
``Ref``s) and ``Outputs`` (what later resources may use), and a ``Live`` view: the fields
AWS shows that fmctl manages. ``read`` finds the resource by its ownership tags and
describes it, never writing; ``desired`` is the ``Live`` view the params ask for, given what
was read; ``diff`` compares the two field by field and classifies each change by the kind's
``policy``: changed in place, replaced, or immutable (refused) — with the reason, from AWS's
API documentation. ``create`` / ``update`` / ``delete`` act; ``find_owned`` lists every
resource of the kind the cluster owns, from tags alone.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from provisioner.graph.ref import UNKNOWN
from provisioner.resources.errors import ResourceError
from provisioner.resources.tags import Tags, tag_change

if TYPE_CHECKING:
    from provisioner.resources.context import Context

P = TypeVar("P")
Out = TypeVar("Out")
L = TypeVar("L")


class How(enum.StrEnum):
    """How a change to a field is made."""

    UPDATE = "update"  # changed in place
    REPLACE = "replace"  # the resource is made again (what was on it is lost)
    IMMUTABLE = "immutable"  # cannot change, and fmctl will not replace it: refused
    #: changed in place, but only by stopping every node first (no room to roll them one by
    #: one): like a replacement, done only with --allow-replace
    STOP = "stop"


@dataclass(frozen=True)
class Policy:
    """How a change to one field is made, and why (from AWS's documentation)."""

    how: How
    reason: str


def policies(**fields: Policy) -> Mapping[str, Policy]:
    """A kind's policy table: live field (dotted path) -> how a change to it is made."""
    return MappingProxyType(fields)


@dataclass(frozen=True)
class FieldChange:
    """One field that differs between what AWS has and what the spec asks for."""

    path: str
    before: Any
    after: Any
    how: How
    reason: str
    #: For a refused change, the way out when it is not "change it back" (e.g. "later").
    hint: str | None = None
    #: Changed outside fmctl: the spec asks for what it asked for when last applied.
    drift: bool = False
    #: Where in the spec the value comes from (``compute.gpuPools[0].count``), when known.
    spec: str | None = None
    #: What the change does besides (what a scale-in drains first), for the plan to say.
    note: str | None = None

    def as_data(self) -> dict[str, Any]:
        """JSON-able form (``from``/``to``, as `plan -o json` prints it; ``path`` is the
        resource's own field, ``spec`` the spec's setting it comes from)."""
        data = {
            "path": self.path,
            "from": jsonable(self.before),
            "to": jsonable(self.after),
            "how": str(self.how),
            "reason": self.reason,
        }
        if self.hint:
            data["hint"] = self.hint
        if self.drift:
            data["drift"] = True
        if self.spec:
            data["spec"] = self.spec
        if self.note:
            data["note"] = self.note
        return data


@dataclass(frozen=True)
class Observed(Generic[Out, L]):
    """A resource as read: its outputs, its live view, and how far along it is."""

    outputs: Out
    live: L
    #: The AWS id (what `down` deletes).
    id: str
    #: Not usable yet: made by an earlier run and still on its way (e.g. "CREATING").
    pending: str | None = None
    #: What the read found that is not for `up` to change, for the plan to say (one line
    #: each): the folder Argo CD or Flux applies is out of date with the spec.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Owned:
    """A resource found by the cluster's ownership tag."""

    kind: str
    resource: str  # logical id (fmctl.dev/resource)
    id: str  # AWS id


def jsonable(value: Any) -> Any:
    """Plain JSON data for a live or desired value."""
    if value is UNKNOWN:
        return repr(UNKNOWN)
    if isinstance(value, Tags):
        return dict(value.items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list | frozenset | set):
        items = [jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, frozenset | set) else items
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def changed_fields(want: Any, have: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(path, live, desired) for every field of two views that differs; nested dataclasses
    are compared field by field (dotted paths), tags by ``tag_change``. A field declared
    ``compare=False`` is a fact read to judge a change (when it was last made), not a
    setting: it is never a change itself."""
    out: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(want):
        if not f.compare:
            continue
        path = f"{prefix}{f.name}"
        w, h = getattr(want, f.name), getattr(have, f.name)
        if isinstance(w, Tags):
            change = tag_change(w, h)
            if change is not None:
                out.append((path, change[0], change[1]))
        elif dataclasses.is_dataclass(w) and dataclasses.is_dataclass(h) and w is not UNKNOWN:
            out += changed_fields(w, h, f"{path}.")
        elif isinstance(w, frozenset) and isinstance(h, frozenset) and UNKNOWN not in w:
            if w != h:  # sets: what goes and what comes, not the whole set twice
                out.append((path, frozenset(h - w), frozenset(w - h)))
        elif w is UNKNOWN or w != h:
            out.append((path, h, w))
    return out


def has_unknown(value: Any) -> bool:
    """True when ``value`` is, or holds, a value not known yet."""
    if value is UNKNOWN:
        return True
    if isinstance(value, tuple | list | frozenset | set):
        return any(has_unknown(v) for v in value)
    if isinstance(value, Mapping):
        return any(has_unknown(v) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(has_unknown(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


@dataclass(frozen=True)
class Request(Generic[P]):
    """What every verb on one resource is asked with: the run's context, the resource's
    logical id (its ``fmctl.dev/resource`` tag) and its typed params. One object instead of
    the same three arguments on every verb of every kind (the verbs add only what is theirs:
    what was read, the changes to make)."""

    ctx: Context
    rid: str
    params: P

    def with_params(self, params: P) -> Request[P]:
        """The same resource asked with other params (a replacement made from a fresh
        plan)."""
        return dataclasses.replace(self, params=params)


class Kind(Generic[P, Out, L]):
    """Base of every resource kind; subclasses set the class attributes and the verbs."""

    name: ClassVar[str] = ""
    params: ClassVar[type]
    outputs: ClassVar[type]
    #: False for what the spec names and fmctl only uses (an existing VPC): read, never
    #: created, changed or deleted.
    owned: ClassVar[bool] = True
    #: Typical seconds, from AWS's documentation (critical path, pacing).
    create_seconds: ClassVar[float] = 2.0
    update_seconds: ClassVar[float] = 2.0
    delete_seconds: ClassVar[float] = 2.0
    #: Live field (or dotted path; the longest match wins) -> how a change is made.
    policy: ClassVar[Mapping[str, Policy]] = {}
    #: A replacement makes the new resource before deleting the old one (blue/green); the
    #: default deletes first (most names and address ranges cannot be held twice).
    create_before_delete: ClassVar[bool] = False

    # -- reading ------------------------------------------------------------------------
    def read(self, req: Request[P]) -> Observed[Out, L] | None:
        """The resource as AWS has it, or None when it does not exist. Never writes."""
        raise NotImplementedError

    def desired(self, req: Request[P], observed: Observed[Out, L]) -> L:
        """The live view ``params`` ask for (references resolved; ``UNKNOWN`` where they
        point at something not made yet)."""
        raise NotImplementedError

    def diff(self, req: Request[P], observed: Observed[Out, L]) -> list[FieldChange]:
        """Each field that differs, with how it changes and why."""
        want = self.desired(req, observed)
        return [
            FieldChange(path, before, after, *self.rule(path))
            for path, before, after in changed_fields(want, observed.live)
        ]

    def rule(self, path: str) -> tuple[How, str]:
        """The policy of ``path`` (the longest matching prefix), update in place by default."""
        if path == "tags" or path.endswith(".tags"):
            return How.UPDATE, "tags change in place"
        parts = path.split(".")
        for n in range(len(parts), 0, -1):
            found = self.policy.get(".".join(parts[:n]))
            if found is not None:
                return found.how, found.reason
        return How.UPDATE, "changes in place"

    def missing(self, req: Request[P]) -> Exception:
        """What to say when a resource the spec names (one fmctl does not own) is not there."""
        return ResourceError(f"{req.rid} ({self.name}), named by the spec, does not exist")

    # -- acting -------------------------------------------------------------------------
    def create(self, req: Request[P]) -> Out:
        """Make the resource and wait until it is usable (idempotent: client tokens, or a
        look by tag before trying again)."""
        raise NotImplementedError

    def wait(self, req: Request[P], observed: Observed[Out, L]) -> Out:
        """Wait for a resource an earlier run left on its way (``observed.pending``)."""
        return observed.outputs

    def update(
        self, req: Request[P], observed: Observed[Out, L], changes: Sequence[FieldChange]
    ) -> Out:
        """Make the in-place ``changes``; returns the outputs after."""
        raise ResourceError(
            f"{req.rid}: {self.name} has no in-place update for "
            + ", ".join(c.path for c in changes)
        )

    def before_delete(self, ctx: Context, owned: Owned) -> None:
        """What must happen before ``delete`` starts, said in its own events first: the
        work on a node group drained (`up` only: ``ctx.drain``), the queues moved off
        it."""

    def delete(self, ctx: Context, owned: Owned) -> None:
        """Delete it and wait until it is gone; one already gone is not an error."""
        raise NotImplementedError

    def find_owned(self, ctx: Context) -> list[Owned]:
        """Every resource of this kind the cluster owns (by tag; no local state)."""
        return []

    def displaces(self, ctx: Context, owned: Owned) -> str | None:
        """What deleting ``owned`` in `up` takes from the work running on it (a node group's
        pods, a Slurm pool's jobs), said in the plan and the prompt; None: nothing runs
        there. Reads only."""
        return None

    def release(self, ctx: Context, owned: Owned) -> str:
        """Keep it past `down`: no longer tagged as the cluster's (so no later `down` or `gc`
        finds it); returns the line that names it and how to delete it. Only kinds a user
        may keep implement it."""
        raise NotImplementedError(f"{self.name} resources are not kept by down")

    # -- helpers for subclasses ---------------------------------------------------------
    def owned_item(self, resource: str, aws_id: str) -> Owned:
        """An ``Owned`` of this kind."""
        return Owned(self.name, resource, aws_id)


@dataclass(frozen=True)
class NoLive:
    """Nothing fmctl manages of it: a data source's or a check's live view."""


class DataSource(Kind[P, Out, NoLive]):
    """What the spec names and fmctl only looks up (an existing VPC, subnet or file system,
    AWS's image): read, never created, changed or deleted, never found as the cluster's.
    A data source says how to look it up and, through ``missing``, what to say when the
    spec names one that is not there (the plan refuses before any write)."""

    owned: ClassVar[bool] = False

    def look_up(self, req: Request[P]) -> tuple[Out, str] | None:
        """Its outputs and AWS id, or None when it does not exist. Never writes."""
        raise NotImplementedError

    def read(self, req: Request[P]) -> Observed[Out, NoLive] | None:
        found = self.look_up(req)
        return None if found is None else Observed(found[0], NoLive(), found[1])

    def desired(self, req: Request[P], observed: Observed[Out, NoLive]) -> NoLive:
        return NoLive()

    def create(self, req: Request[P]) -> Out:
        raise self.missing(req)


class Check(Kind[P, Out, NoLive]):
    """A step of the plan that makes nothing in AWS: it runs once, before what it guards
    (ParallelCluster's validators before the file system and the cluster), and passes for
    good once ``passed`` says what it guards exists. Nothing to update, find or delete."""

    delete_seconds: ClassVar[float] = 0.0

    def passed(self, req: Request[P]) -> tuple[Out, str] | None:
        """The outputs and an id when the step need not run (again), else None. Reads only."""
        raise NotImplementedError

    def run(self, req: Request[P]) -> Out:
        """Run the step; raises when it fails."""
        raise NotImplementedError

    def read(self, req: Request[P]) -> Observed[Out, NoLive] | None:
        found = self.passed(req)
        return None if found is None else Observed(found[0], NoLive(), found[1])

    def desired(self, req: Request[P], observed: Observed[Out, NoLive]) -> NoLive:
        return NoLive()

    def create(self, req: Request[P]) -> Out:
        return self.run(req)

    def delete(self, ctx: Context, owned: Owned) -> None:
        """Nothing was made: nothing to delete."""


@dataclass(frozen=True)
class Planned:
    """A kind's resource in the desired graph: its logical id, params, and where in the
    spec each live field comes from (for errors located on the spec's line)."""

    id: str
    kind: str
    params: Any
    origins: Mapping[str, str] = field(default_factory=dict)
