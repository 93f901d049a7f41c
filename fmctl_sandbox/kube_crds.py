"""Custom resources in the sandbox's Kubernetes API, as the API server handles them: a
CustomResourceDefinition applied makes its kind served (discovery lists it at its served
versions), every write of one of its objects is defaulted and checked against the version's
schema and CEL rules (``crd_schema``: 422 Invalid with the reasons, as the server answers),
deleting the CRD deletes its objects; and label selectors as the API reads them.

Left out, on purpose: conversion between versions (an object is kept as written: Kueue's
v1beta1 and v1beta2 differ, and fmctl writes v1beta2 only), status subresources (a write
keeps what it sends), ``messageExpression``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fmctl_sandbox.crd_schema import Crd, validate
from fmctl_sandbox.kube_model import ApiError, Cluster
from fmctl_sandbox.kube_resources import Served


def define(c: Cluster, obj: dict[str, Any]) -> None:
    """A CustomResourceDefinition was written: its kind is served from now on."""
    crd = Crd.from_object(obj)
    if crd.plural:
        c.crds[crd.plural] = crd


def undefine(c: Cluster, obj: dict[str, Any]) -> None:
    """A CustomResourceDefinition was deleted: its kind and every object of it go."""
    plural = ((obj.get("spec") or {}).get("names") or {}).get("plural", "")
    c.crds.pop(plural, None)
    for key in [k for k in c.objects if k[0] == plural]:
        del c.objects[key]


def checked(
    res: Served, version: str, obj: dict[str, Any], live: dict[str, Any] | None, strict: bool
) -> dict[str, Any]:
    """``obj`` as stored (defaulted; unknown fields dropped unless ``strict``), or 422 with
    every reason when it fails its CRD's schema. Built-in kinds pass as they are."""
    if res.crd is None:
        return obj
    schema = next((v.schema for v in res.crd.versions if v.name == version), None)
    if not schema:
        return obj
    stored, errors = validate(schema, obj, live, strict=strict)
    if errors:
        name = (obj.get("metadata") or {}).get("name", "")
        reasons = ", ".join(str(e) for e in errors)
        raise ApiError(
            422,
            "Invalid",
            f'{res.kind}.{res.group} "{name}" is invalid: [{reasons}]',
        )
    return stored


_TERM = re.compile(r"^(!)?([A-Za-z0-9_./-]+)(?:\s*(==|=|!=)\s*([A-Za-z0-9_.-]*))?$")


def selects(selector: str) -> Callable[[dict[str, str]], bool]:
    """A label selector's test (the API's equality-based terms: ``k=v``, ``k==v``, ``k!=v``,
    ``k`` (exists) and ``!k`` (does not)); 400 for what it cannot read."""
    tests: list[tuple[str, str, str | None]] = []
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        match = _TERM.match(term)
        if match is None:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
        negate, key, op, value = match.groups()
        if negate and op:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
        tests.append(("!" if negate else (op or "exists").replace("==", "="), key, value))

    def test(labels: dict[str, str]) -> bool:
        for op, key, value in tests:
            if op == "!" and key in labels:
                return False
            if op == "exists" and key not in labels:
                return False
            if op == "=" and labels.get(key) != value:
                return False
            if op == "!=" and labels.get(key) == value:
                return False
        return True

    return test
