"""The plan as data: resources with logical ids, dependencies and expected durations.

A ``Kind`` knows how to discover (by ownership tags), create, wait for and delete one sort of
AWS resource; a ``Node`` is one resource of the cluster. ``up`` runs nodes once their
dependencies are done; ``down`` runs the mirror: a resource goes once everything that
depends on it is gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from provisioner.plan.context import Engine

Outputs = dict[str, Any]


@dataclass(frozen=True)
class Found:
    """A resource that exists: its kind, logical id, AWS id, and what else delete needs."""

    kind: str
    logical_id: str
    id: str
    data: dict[str, Any] = field(default_factory=dict, compare=False)


class Kind(Protocol):
    """One sort of resource (VPC, subnet, FSx file system, ...)."""

    @property
    def name(self) -> str:
        """The kind's name (``vpc``, ``fsx``, ...)."""

    @property
    def after(self) -> tuple[str, ...]:
        """Kinds a resource of this kind may depend on (the mirror orders ``down``)."""

    @property
    def create_seconds(self) -> float:
        """Typical seconds to create, from AWS's documentation (critical path, pacing)."""

    @property
    def delete_seconds(self) -> float:
        """Typical seconds to delete."""

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        """The node's outputs if it exists already (found by its ownership tags)."""

    def create(self, engine: Engine, node: Node) -> Outputs:
        """Create it (idempotently: client tokens where the API takes them)."""

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        """Wait until usable; returns final outputs."""

    def find_all(self, engine: Engine) -> list[Found]:
        """Every resource of this kind owned by the cluster (tags only: no local state)."""

    def delete(self, engine: Engine, found: Found) -> None:
        """Delete it and wait until it is gone; a resource already gone is not an error."""


@dataclass(frozen=True)
class Node:
    """One resource of the plan."""

    id: str
    kind: str
    deps: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict, compare=False)
    #: False for resources the cluster uses but does not own (an existing VPC).
    owned: bool = True


@dataclass
class Plan:
    """Nodes in dependency order."""

    nodes: dict[str, Node]

    def __post_init__(self) -> None:
        for node in self.nodes.values():
            missing = [d for d in node.deps if d not in self.nodes]
            assert not missing, f"{node.id} depends on unknown {missing}"
        self.levels()  # raises on a cycle

    def levels(self) -> list[list[str]]:
        """Waves of nodes: each wave depends only on earlier waves (what runs in parallel)."""
        done: set[str] = set()
        waves: list[list[str]] = []
        remaining = dict(self.nodes)
        while remaining:
            wave = sorted(n for n, node in remaining.items() if set(node.deps) <= done)
            if not wave:
                raise ValueError(f"dependency cycle among {sorted(remaining)}")
            waves.append(wave)
            done.update(wave)
            for n in wave:
                del remaining[n]
        return waves

    def critical_path(self, seconds: dict[str, float]) -> tuple[float, list[str]]:
        """The longest chain by ``seconds`` per node: the floor for a parallel run."""
        finish: dict[str, float] = {}
        via: dict[str, str | None] = {}
        for wave in self.levels():
            for n in wave:
                deps = self.nodes[n].deps
                prev = max(deps, key=lambda d: finish[d]) if deps else None
                finish[n] = (finish[prev] if prev else 0.0) + seconds.get(n, 0.0)
                via[n] = prev
        if not finish:
            return 0.0, []
        last = max(finish, key=lambda n: finish[n])
        total = finish[last]
        end: str | None = last
        chain = []
        while end is not None:
            chain.append(end)
            end = via[end]
        return total, chain[::-1]


def deletion_order(found: Iterable[Found], kinds: dict[str, Kind]) -> Plan:
    """The mirror of create for resources found by tag: each waits for its dependents.

    A resource of kind K is deleted after every found resource whose kind lists K (directly
    or through other kinds) in ``after``.
    """
    items = list(found)
    nodes: dict[str, Node] = {}
    key = {f: f"{f.kind}:{f.id}" for f in items}
    for f in items:
        blockers = [key[g] for g in items if g is not f and f.kind in _closure(g.kind, kinds)]
        nodes[key[f]] = Node(key[f], f.kind, tuple(sorted(blockers)), {"found": f})
    return Plan(nodes)


def _closure(kind: str, kinds: dict[str, Kind]) -> set[str]:
    seen: set[str] = set()
    todo = list(kinds[kind].after) if kind in kinds else []
    while todo:
        k = todo.pop()
        if k not in seen:
            seen.add(k)
            todo.extend(kinds[k].after if k in kinds else ())
    return seen
