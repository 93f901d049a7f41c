"""Server-side apply for the sandbox's Kubernetes API: field ownership per manager
(``managedFields``, FieldsV1), conflicts with other managers, removal of the fields a manager
stopped applying, and the merge. Lists are atomic here (Kubernetes merges some by key)."""

from __future__ import annotations

import copy
from typing import Any

from fmctl_sandbox.kube_model import ApiError, Path


def owned(obj: dict[str, Any], prefix: Path = ()) -> dict[Path, Any]:
    """Leaf paths of an applied object -> values (lists are leaves: atomic)."""
    out: dict[Path, Any] = {}
    for key, value in obj.items():
        if prefix == () and key in ("apiVersion", "kind", "status"):
            continue
        if prefix == ("metadata",) and key in ("name", "namespace", "managedFields"):
            continue
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            out.update(owned(value, path))
        else:
            out[path] = value
    return out


def owners_of(live: dict[str, Any]) -> dict[str, set[Path]]:
    """Paths each manager owns, read back from managedFields."""
    out: dict[str, set[Path]] = {}
    for entry in live["metadata"].get("managedFields", []):
        out[entry["manager"]] = _paths_v1(entry.get("fieldsV1", {}))
    return out


def merge(
    live: dict[str, Any], body: dict[str, Any], manager: str, force: bool
) -> tuple[dict[str, Any], dict[str, set[Path]]]:
    """Apply ``body`` for ``manager`` onto ``live``: conflicts, removal of fields the manager
    no longer applies, merge; returns the object and the new ownership."""
    owners = owners_of(live)
    applied = owned(body)
    current = owned(live)
    conflicts = [
        (m, path)
        for m, paths in owners.items()
        if m != manager
        for path in paths & set(applied)
        if current.get(path) != applied[path]
    ]
    if conflicts and not force:
        detail = "; ".join(f'conflict with "{m}": .{".".join(p)}' for m, p in conflicts)
        raise ApiError(409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s): {detail}")
    for m, _ in conflicts:
        owners[m] -= set(applied)
    others = set().union(*(p for m, p in owners.items() if m != manager))
    obj = copy.deepcopy(live)
    for path in owners.get(manager, set()) - set(applied) - others:
        _remove(obj, path)
    _deep_merge(obj, body)
    owners[manager] = set(applied)
    return obj, owners


def _remove(obj: dict[str, Any], path: Path) -> None:
    parent: Any = obj
    for key in path[:-1]:
        parent = parent.get(key)
        if not isinstance(parent, dict):
            return
    parent.pop(path[-1], None)


def _deep_merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict) and value:
            _deep_merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def fields_v1(paths: set[Path]) -> dict[str, Any]:
    """Paths as Kubernetes' FieldsV1 tree (``{"f:spec": {"f:replicas": {}}}``)."""
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return root


def _paths_v1(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, sub in tree.items():
        path = (*prefix, key[2:])
        out |= _paths_v1(sub, path) if sub else {path}
    return out


def record(
    obj: dict[str, Any],
    live: dict[str, Any] | None,
    owners: dict[str, set[tuple[str, ...]]],
    now: dict[str, str],
    api_version: str,
) -> None:
    """Write ``managedFields`` (each manager's operation as before, ``now``'s as given) and
    bump ``generation`` when the spec changed."""
    before = {
        e["manager"]: e.get("operation", "Apply")
        for e in (live or {}).get("metadata", {}).get("managedFields", [])
    }
    operations = {**before, **now}
    obj["metadata"]["managedFields"] = [
        {
            "manager": m,
            "operation": operations.get(m, "Apply"),
            "apiVersion": api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(paths),
        }
        for m, paths in sorted(owners.items())
        if paths
    ]
    if live is not None and obj.get("spec") != live.get("spec"):
        obj["metadata"]["generation"] = live["metadata"].get("generation", 1) + 1
