"""A CustomResourceDefinition's schema, applied as the Kubernetes API server applies it: what
the sandbox's API does with the CRDs the charts install, and what the tests check fmctl's
Kueue and ComputeDomain objects with.

What the API server does with an object of a CRD's version (the Kubernetes documentation,
"Extend the Kubernetes API with CustomResourceDefinitions": "Validation", "Defaulting",
"Field pruning", "Validation rules"; and ``apiextensions-apiserver``'s structural schema):

- defaults: a ``default`` fills a property that is missing, where its parent object exists,
  before validation;
- the OpenAPI v3 value checks: ``type`` (with ``nullable``, ``x-kubernetes-int-or-string``,
  ``x-kubernetes-preserve-unknown-fields``), ``properties``, ``additionalProperties``,
  ``required``, ``enum``, ``pattern``, ``minLength``/``maxLength``, ``minimum``/``maximum``
  (and their exclusive forms), ``multipleOf``, ``minItems``/``maxItems``, ``uniqueItems``,
  ``minProperties``/``maxProperties``, ``allOf``/``anyOf``/``oneOf``/``not``; a list's
  ``x-kubernetes-list-type`` of ``set`` (no duplicates) or ``map`` (no two items with the same
  ``x-kubernetes-list-map-keys``);
- unknown fields: with ``fieldValidation=Strict`` (kubectl's default) an error naming the
  field, otherwise dropped (pruned);
- ``x-kubernetes-validations``: each ``rule`` is a CEL expression over ``self`` (the value
  where the rule sits) and, for a transition rule, ``oldSelf`` (the value before an update:
  such rules are not evaluated on create, nor where there was no old value). Evaluated
  here with cel-python (PyPI ``cel-python``); Kubernetes' own CEL libraries (lists, regex,
  quantity, ...) beyond standard CEL are not provided, and none of the rules of the CRDs
  fmctl installs uses them (Kueue 0.19.2, the NVIDIA DRA driver 25.12.0).

Not done: ``format`` checks, the CEL cost budget, ``messageExpression`` (the rule's
``message``, or the rule itself, is reported), ``metadata`` beyond what the server checks
for every kind.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

Schema = dict[str, Any]


@dataclass(frozen=True)
class SchemaError:
    """One failed check: where (as the API server writes it) and why."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass(frozen=True)
class CrdVersion:
    """One version of a CRD: served, stored, and its schema."""

    name: str
    served: bool
    storage: bool
    schema: Schema
    #: The status subresource: writes to the object leave its status alone.
    status: bool


@dataclass(frozen=True)
class Crd:
    """What a CustomResourceDefinition defines."""

    group: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    versions: tuple[CrdVersion, ...]
    short_names: tuple[str, ...] = ()

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> Crd:
        """The CRD of a ``CustomResourceDefinition`` object (apiextensions.k8s.io/v1)."""
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        versions = tuple(
            CrdVersion(
                str(v["name"]),
                bool(v.get("served", True)),
                bool(v.get("storage", False)),
                (v.get("schema") or {}).get("openAPIV3Schema") or {},
                "status" in (v.get("subresources") or {}),
            )
            for v in spec.get("versions") or []
        )
        return cls(
            str(spec.get("group", "")),
            str(names.get("kind", "")),
            str(names.get("plural", "")),
            str(names.get("singular", "") or str(names.get("kind", "")).lower()),
            spec.get("scope", "Namespaced") == "Namespaced",
            versions,
            tuple(names.get("shortNames") or ()),
        )

    def version(self, name: str) -> CrdVersion | None:
        """The served version ``name``, if any."""
        return next((v for v in self.versions if v.name == name and v.served), None)

    @property
    def storage(self) -> CrdVersion:
        """The version objects are stored as."""
        return next((v for v in self.versions if v.storage), self.versions[0])


@dataclass
class _Walk:
    strict: bool
    errors: list[SchemaError] = field(default_factory=list)

    def fail(self, path: str, message: str) -> None:
        self.errors.append(SchemaError(path, message))


def validate(
    schema: Schema, obj: dict[str, Any], old: dict[str, Any] | None = None, strict: bool = True
) -> tuple[dict[str, Any], list[SchemaError]]:
    """Default, then check ``obj`` against a version's ``openAPIV3Schema`` (``old``: the
    object before this update, for transition rules). Returns the object as the server
    would store it (defaulted; unknown fields dropped unless ``strict``, where they are
    errors) and what failed."""
    value = copy.deepcopy(obj)
    _default(schema, value)
    walk = _Walk(strict)
    kept = _check(schema, value, old, "", walk, top=True)
    return kept, walk.errors


def _default(schema: Schema, value: Any) -> None:
    """Fill missing properties that have a default, depth first (a default is itself
    defaulted below)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                _default(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in props:
                    _default(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(schema["items"], item)


_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
}


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    wanted = _TYPES.get(kind)
    return wanted is None or isinstance(value, wanted)


def _check(schema: Schema, value: Any, old: Any, path: str, walk: _Walk, top: bool = False) -> Any:
    """Check ``value`` at ``path``; returns it as stored (unknown fields pruned)."""
    if value is None:
        if not schema.get("nullable"):
            walk.fail(
                path,
                f'Invalid value: "null": {path or "object"} in body must be of '
                f"type {schema.get('type', 'object')}",
            )
        return value
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _type_ok("integer", value)):
            walk.fail(path, f"Invalid value: {value!r}: must be an integer or a string")
    elif "type" in schema and not _type_ok(str(schema["type"]), value):
        walk.fail(
            path,
            f"Invalid value: {_show(value)}: {path or 'object'} in body must be of type "
            f'{schema["type"]}: "{_json_type(value)}"',
        )
        return value
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{e}"' for e in schema["enum"])
        walk.fail(path, f"Unsupported value: {_show(value)}: supported values: {allowed}")
    if isinstance(value, dict):
        value = _check_object(
            schema, value, old if isinstance(old, dict) else None, path, walk, top
        )
    elif isinstance(value, list):
        _check_array(schema, value, old if isinstance(old, list) else None, path, walk)
    elif isinstance(value, str):
        _check_string(schema, value, path, walk)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(schema, value, path, walk)
    _check_combinators(schema, value, path, walk)
    _check_rules(schema, value, old, path, walk)
    return value


def _check_object(
    schema: Schema,
    value: dict[str, Any],
    old: dict[str, Any] | None,
    path: str,
    walk: _Walk,
    top: bool,
) -> dict[str, Any]:
    props: dict[str, Schema] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
    out: dict[str, Any] = {}
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if top and key == "metadata":
            out[key] = item  # checked by the server for every kind, not by the schema
        elif key in props:
            out[key] = _check(props[key], item, (old or {}).get(key), where, walk)
        elif isinstance(extra, dict):
            out[key] = _check(extra, item, (old or {}).get(key), where, walk)
        elif keep_unknown or (top and key in ("apiVersion", "kind")):
            out[key] = item
        elif walk.strict:
            walk.fail("", f'unknown field "{where}"')
        # else: pruned, as the server does without fieldValidation=Strict
    for key in schema.get("required") or []:
        if key not in value:
            walk.fail(f"{path}.{key}" if path else key, "Required value")
    n = len(value)
    if "minProperties" in schema and n < schema["minProperties"]:
        walk.fail(
            path, f"Invalid value: {n}: should have at least {schema['minProperties']} properties"
        )
    if "maxProperties" in schema and n > schema["maxProperties"]:
        walk.fail(path, f"Too many: {n}: must have at most {schema['maxProperties']} items")
    return out


def _check_array(
    schema: Schema, value: list[Any], old: list[Any] | None, path: str, walk: _Walk
) -> None:
    items = schema.get("items")
    list_type = schema.get("x-kubernetes-list-type", "atomic")
    keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
    olds: dict[tuple[Any, ...], Any] = {}
    if list_type == "map" and old:
        olds = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
    if isinstance(items, dict):
        for i, item in enumerate(value):
            before = None
            if list_type == "map" and isinstance(item, dict):
                before = olds.get(tuple(item.get(k) for k in keys))
            value[i] = _check(items, item, before, f"{path}[{i}]", walk)
    n = len(value)
    if "minItems" in schema and n < schema["minItems"]:
        walk.fail(
            path,
            f"Invalid value: {n}: {path} in body should have at least {schema['minItems']} items",
        )
    if "maxItems" in schema and n > schema["maxItems"]:
        walk.fail(path, f"Too many: {n}: must have at most {schema['maxItems']} items")
    if list_type == "set" or schema.get("uniqueItems"):
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                walk.fail(f"{path}[{i}]", f"Duplicate value: {_show(item)}")
            seen.append(item)
    elif list_type == "map":
        seen_keys: set[tuple[Any, ...]] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = tuple(item.get(k) for k in keys)
            if key in seen_keys:
                shown = ", ".join(f'"{k}":{_show(v)}' for k, v in zip(keys, key, strict=True))
                walk.fail(f"{path}[{i}]", f"Duplicate value: map[string]interface {{}}{{{shown}}}")
            seen_keys.add(key)


def _check_string(schema: Schema, value: str, path: str, walk: _Walk) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        walk.fail(
            path,
            f"Invalid value: {_show(value)}: {path} in body should be at least "
            f"{schema['minLength']} chars long",
        )
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        walk.fail(path, f"Too long: may not be more than {schema['maxLength']} bytes")
    pattern = schema.get("pattern")
    if pattern is not None and not _regex(str(pattern)).search(value):
        walk.fail(path, f"Invalid value: {_show(value)}: {path} in body should match '{pattern}'")


def _check_number(schema: Schema, value: float, path: str, walk: _Walk) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and (value < low or (schema.get("exclusiveMinimum") and value == low)):
        walk.fail(
            path, f"Invalid value: {value}: {path} in body should be greater than or equal to {low}"
        )
    if high is not None and (value > high or (schema.get("exclusiveMaximum") and value == high)):
        walk.fail(
            path, f"Invalid value: {value}: {path} in body should be less than or equal to {high}"
        )
    step = schema.get("multipleOf")
    if step and value % step:
        walk.fail(path, f"Invalid value: {value}: {path} in body should be a multiple of {step}")


def _check_combinators(schema: Schema, value: Any, path: str, walk: _Walk) -> None:
    """allOf / anyOf / oneOf / not: value checks only (a structural schema declares every
    field outside them)."""

    def passes(sub: Schema) -> bool:
        probe = _Walk(strict=False)
        _check(
            {k: v for k, v in sub.items() if k != "x-kubernetes-validations"},
            copy.deepcopy(value),
            None,
            path,
            probe,
        )
        return not probe.errors

    for sub in schema.get("allOf") or []:
        if not passes(sub):
            walk.fail(path, "Invalid value: must validate all the schemas (allOf)")
    if schema.get("anyOf") and not any(passes(s) for s in schema["anyOf"]):
        walk.fail(path, "Invalid value: must validate at least one schema (anyOf)")
    if schema.get("oneOf") and sum(passes(s) for s in schema["oneOf"]) != 1:
        walk.fail(path, "Invalid value: must validate one and only one schema (oneOf)")
    if isinstance(schema.get("not"), dict) and passes(schema["not"]):
        walk.fail(path, "Invalid value: must not validate the schema (not)")


def _check_rules(schema: Schema, value: Any, old: Any, path: str, walk: _Walk) -> None:
    for rule in schema.get("x-kubernetes-validations") or []:
        text = str(rule["rule"])
        if "oldSelf" in text and old is None and not rule.get("optionalOldSelf"):
            continue  # a transition rule: only on an update of an existing value
        where = path + str(rule.get("fieldPath", "") or "")
        try:
            ok = evaluate(text, value, old)
        except RuleError as err:
            walk.fail(where, f"Invalid value: {_json_type(value)}: {err}")
            continue
        if not ok:
            message = rule.get("message") or f"failed rule: {text}"
            walk.fail(where, f'Invalid value: "{_json_type(value)}": {message}')


class RuleError(Exception):
    """A rule that cannot be evaluated on this value (CEL's error, e.g. no such key)."""


def evaluate(rule: str, value: Any, old: Any = None) -> bool:
    """Evaluate one CEL rule with ``self`` (and ``oldSelf``); True when it holds."""
    from celpy.adapter import json_to_cel
    from celpy.evaluation import CELEvalError

    program = compiled(rule)
    activation: dict[str, Any] = {"self": json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = json_to_cel(old)
    try:
        result = program.evaluate(activation)
    except CELEvalError as exc:
        raise RuleError(str(exc.args[0] if exc.args else exc)) from exc
    if isinstance(result, CELEvalError):
        raise RuleError(str(result.args[0] if result.args else result))
    return bool(result)


@lru_cache(maxsize=512)
def compiled(rule: str) -> Any:
    """A CEL expression compiled once (celpy: the sandbox's CEL, for CRDs' rules and
    admission policies)."""
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule))


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    """A CRD's pattern (Go's RE2 syntax, as the API server reads it) for Python's ``re``:
    RE2 lets a flag group such as ``(?i)`` stand mid-expression, where it holds to the end
    of its group (Kueue's ``^(?i)[a-z]...$``); Python wants flags first, or scoped
    ``(?i:...)``, which is what a top-level one becomes."""
    for flag in ("(?i)", "(?s)", "(?m)"):
        at = pattern.find(flag)
        if at > 0 and pattern[:at].count("(") == pattern[:at].count(")"):
            pattern = f"{pattern[:at]}(?{flag[2]}:{pattern[at + len(flag) :]})"
    return re.compile(pattern)


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)
