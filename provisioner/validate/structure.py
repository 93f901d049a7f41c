"""Shape and type checks: pydantic's errors turned into fmctl problems with hints.

To report every problem at once, a value that fails its type check (or an unknown key) is
dropped and the document validated again, so the offline rules can still run on the rest.
Problems that depend on a dropped value (their own path, or a ``related`` path) are
suppressed: they would be about a stand-in, not about what the user wrote.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from provisioner.spec.model import API_VERSION, KIND, ClusterSpec
from provisioner.spec.problems import Problem, SpecPath, format_path, suggest

#: How many rounds of dropping bad values before giving up on a partial model.
_MAX_ROUNDS = 4

_TYPE_NAMES = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
}


@dataclass
class StructureResult:
    """The model (when one could be built) and the problems found on the way."""

    spec: ClusterSpec | None
    problems: list[Problem] = field(default_factory=list)
    dropped: list[SpecPath] = field(default_factory=list)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _unwrap(annotation: Any) -> Any:
    """Strip Optional / list / dict wrappers down to the model class, if any."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _unwrap(arg)
    if origin in (list, dict):
        return _unwrap(typing.get_args(annotation)[-1])
    return annotation


def _model_at(path: SpecPath) -> type[BaseModel] | None:
    """The model class that validates the mapping at ``path`` (for did-you-mean on keys)."""
    model: Any = ClusterSpec
    for part in path:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        by_alias = {f.alias or n: f for n, f in model.model_fields.items()}
        info = by_alias.get(part)
        if info is None:
            return None
        model = _unwrap(info.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _field_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _translate(error: Any) -> Problem:
    kind: str = error["type"]
    path: SpecPath = tuple(p for p in error["loc"] if isinstance(p, str | int))
    value = error.get("input")
    if kind == "extra_forbidden":
        key = str(path[-1])
        model = _model_at(path[:-1])
        allowed = _field_keys(model) if model else []
        hint = suggest(key, allowed)
        if hint is None and allowed:
            hint = "allowed keys here: " + ", ".join(allowed)
        where = format_path(path[:-1]) or "the top level"
        return Problem("unknown-key", f"unknown key '{key}' in {where}", path, hint=hint)
    if kind == "missing":
        key = str(path[-1])
        hint = {
            "apiVersion": f"add 'apiVersion: {API_VERSION}'",
            "kind": f"add 'kind: {KIND}'",
        }.get(key, "see `fmctl init` for a complete example, or `fmctl schema`")
        return Problem("missing-key", f"'{key}' is required", path, hint=hint)
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        choices = [c.strip().strip("'") for c in expected.replace(" or ", ", ").split(",")]
        choices = [c for c in choices if c]
        hint = suggest(str(value), choices) if isinstance(value, str) else None
        return Problem(
            "bad-value",
            f"{_describe(value)} is not allowed; use one of: " + ", ".join(choices),
            path,
            hint=hint,
        )
    expected = _TYPE_NAMES.get(kind)
    if expected is not None:
        hint = None
        if expected == "a string" and isinstance(value, bool | int | float):
            hint = _quote_hint(path, value)
        elif expected in ("an integer", "a number", "true or false") and isinstance(value, str):
            hint = "write it without quotes"
        elif expected == "a mapping" and isinstance(value, list):
            hint = "remove the leading '- ': this key holds a mapping, not a list"
        elif expected == "a list" and isinstance(value, dict):
            hint = "start each item with '- '"
        return Problem(
            "wrong-type", f"expected {expected}, got {_describe(value)}", path, hint=hint
        )
    bounds = {
        "greater_than_equal": ("ge", "at least"),
        "less_than_equal": ("le", "at most"),
        "greater_than": ("gt", "more than"),
        "less_than": ("lt", "less than"),
    }
    if kind in bounds:
        key, words = bounds[kind]
        limit = error.get("ctx", {}).get(key)
        return Problem(
            "out-of-range",
            f"{_describe(value)} is out of range: it must be {words} {limit}",
            path,
            hint=f"use a value {words} {limit}",
        )
    return Problem("invalid", error.get("msg", "invalid value"), path)


def _parent(data: Any, path: SpecPath) -> dict[Any, Any] | None:
    """The mapping that holds ``path``'s last part, or None when there is none."""
    node = data
    for part in path[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node if isinstance(node, dict) and path else None


def _drop(data: Any, path: SpecPath) -> bool:
    """Remove ``path`` from ``data`` in place; False when it cannot be removed."""
    parent = _parent(data, path)
    if parent is None or path[-1] not in parent:
        return False
    del parent[path[-1]]
    return True


def _placeholder(path: SpecPath) -> tuple[bool, Any]:
    """A well-typed stand-in for a required value that was dropped as invalid.

    It lets the model build so the offline rules still run; problems next to it are suppressed.
    """
    model = _model_at(path[:-1])
    if model is None or not isinstance(path[-1], str):
        return False, None
    by_alias = {f.alias or n: f for n, f in model.model_fields.items()}
    info = by_alias.get(path[-1])
    if info is None:
        return False, None
    annotation = info.annotation
    if typing.get_origin(annotation) is typing.Literal:
        return True, typing.get_args(annotation)[0]
    stand_ins: dict[Any, Any] = {int: 1, float: 1.0, str: "placeholder", bool: False}
    if annotation in stand_ins:
        return True, stand_ins[annotation]
    origin = typing.get_origin(annotation)
    if origin in (list, dict):
        return True, origin()
    return False, None


def _put(data: Any, path: SpecPath, value: Any) -> bool:
    parent = _parent(data, path)
    if parent is None:
        return False
    parent[path[-1]] = value
    return True


def _copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_copy(v) for v in data]
    return data


def check_structure(data: dict[str, Any]) -> StructureResult:
    """Validate ``data`` against the spec model, collecting every structural problem."""
    result = StructureResult(spec=None)
    work = _copy(data)
    seen: set[tuple[str, SpecPath]] = set()
    for _ in range(_MAX_ROUNDS):
        try:
            result.spec = ClusterSpec.model_validate(work)
            return result
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
        progress = False
        for error in errors:
            problem = _translate(error)
            if problem.code == "missing-key" and problem.path in result.dropped:
                # We dropped it: the type error is reported; stand in for it and go on.
                ok, value = _placeholder(problem.path)
                progress = (ok and _put(work, problem.path, value)) or progress
                continue
            if (problem.code, problem.path) not in seen:
                seen.add((problem.code, problem.path))
                result.problems.append(problem)
            if problem.code != "missing-key" and _drop(work, problem.path):
                progress = True
                if problem.code != "unknown-key":  # an unknown key feeds no rule
                    result.dropped.append(problem.path)
        if not progress:
            break
    return result


def suppressed(problem: Problem, dropped: list[SpecPath]) -> bool:
    """True when ``problem`` is about, or depends on, a value that was dropped as invalid."""
    for path in dropped:
        for probe in (problem.path, *problem.related):
            if probe[: len(path)] == path:
                return True
    return False


def _quote_hint(path: SpecPath, value: object) -> str:
    """What to write instead of a number YAML read where a string belongs, in the terms of
    the field: a lifetime needs its unit, a version its quotes."""
    if path == ("metadata", "ttl"):
        return f'a lifetime needs its unit: ttl: "{value}h" (or days and minutes: 3d, 1h30m)'
    if path and str(path[-1]).lower().endswith("version"):
        # 1.30 reads as the number 1.3: the example shows the quotes, not the lost zero.
        return 'YAML read this as a number; quote it to keep it as written, e.g. "1.30"'
    return "YAML read this as a number or boolean; quote it to keep it as written"
