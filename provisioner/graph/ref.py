"""References between nodes of a graph: a typed pointer at another node's outputs.

A node's parameters say what they need of other nodes by holding a ``Ref`` to them; the
graph's edges are read off the parameters (``refs_in``), never written by hand. ``Ref[T]``
names the type ``T`` of the outputs its target produces, so the kinds of node one kind can
depend on are also readable off its parameters' annotations (``ref_types``), with no
instance at hand: that is what orders a teardown found by tags alone.

``After`` is the one other relation: made after its target, like a ``Ref``, but also deleted
after it (a Ref's referrer is deleted first). It is for things that must exist while the
target is being torn down (an EKS add-on that releases network interfaces while the node
group it first ran on drains).
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Ref(Generic[T]):
    """The outputs, of type ``outputs``, of the node ``target``."""

    target: str
    outputs: type[T] = field(compare=False, repr=False)

    def __str__(self) -> str:
        return f"<{self.target}>"


@dataclass(frozen=True)
class After(Ref[T]):
    """A reference whose referrer is made after ``target`` and deleted after it too."""


class _Unknown:
    """A value only known once what it refers to has been made (again)."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "(known after apply)"


#: What a reference resolves to while its target is not made (or made again) yet.
UNKNOWN: Any = _Unknown()


def refs_in(value: object) -> Iterator[Ref[Any]]:
    """Every reference held by ``value``: through dataclass fields, tuples, lists, sets and
    mapping values, in order."""
    if isinstance(value, Ref):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from refs_in(getattr(value, f.name))
    elif isinstance(value, tuple | list | frozenset | set):
        for item in value:
            yield from refs_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from refs_in(item)


def ref_types(cls: type) -> tuple[set[type], set[type]]:
    """The output types a dataclass ``cls`` may hold references to, read off its field
    annotations (nested dataclasses, tuples and unions included): (by ``Ref``, by ``After``)."""
    refs: set[type] = set()
    afters: set[type] = set()
    _walk_class(cls, refs, afters, set())
    return refs, afters


def _walk_class(cls: type, refs: set[type], afters: set[type], seen: set[type]) -> None:
    if cls in seen:
        return
    seen.add(cls)
    module = sys.modules.get(cls.__module__)
    hints = typing.get_type_hints(cls, globalns=vars(module) if module else None)
    for f in dataclasses.fields(cls):
        _walk_type(hints[f.name], refs, afters, seen)


def _walk_type(tp: Any, refs: set[type], afters: set[type], seen: set[type]) -> None:
    origin = typing.get_origin(tp)
    if origin in (Ref, After):
        (target,) = typing.get_args(tp)
        (afters if origin is After else refs).add(target)
        return
    if origin is not None or isinstance(tp, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is not Ellipsis:
                _walk_type(arg, refs, afters, seen)
        return
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        _walk_class(tp, refs, afters, seen)
