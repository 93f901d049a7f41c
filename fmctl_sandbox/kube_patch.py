"""The patches kubectl sends besides server-side apply: JSON merge patch (RFC 7386,
``application/merge-patch+json``) and strategic merge patch
(``application/strategic-merge-patch+json``, Kubernetes' "Update API Objects in Place Using
kubectl patch").

A merge patch merges maps, replaces lists and removes the keys it sets to null. A strategic
merge patch does the same but merges the lists Kubernetes gives a patch merge key (the
``patchMergeKey`` of the API's Go types: containers, env, volumes and ports by name, volume
mounts by mount path, a container's ports by container port, and the others below) item
by item, and honours ``$patch: delete`` on such an item and ``$patch: replace`` on a map.

Both are ``Update`` operations for field ownership: the fields they change become the
patching manager's and leave the others', and they never conflict (only apply does).
"""

from __future__ import annotations

import copy
from typing import Any

from fmctl_sandbox.kube_apply import owned
from fmctl_sandbox.kube_model import ApiError, Path

#: List field -> the key its items merge by (k8s.io/api's patchMergeKey tags).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "conditions": "type",
    "ownerReferences": "uid",
    "taints": "key",
}
#: Lists keyed by port: a container's ports by containerPort, a Service's by port.
PORT_KEYS = ("containerPort", "port")


def merge_patch(live: Any, patch: Any) -> Any:
    """RFC 7386: the result of applying ``patch`` to ``live``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(live) if isinstance(live, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _list_key(field: str, items: list[Any]) -> str | None:
    if field in MERGE_KEYS:
        return MERGE_KEYS[field]
    if field == "ports":
        for key in PORT_KEYS:
            if all(isinstance(i, dict) and key in i for i in items):
                return key
    return None


def strategic_patch(live: Any, patch: Any, field: str = "") -> Any:
    """A strategic merge patch of ``live``."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        out = copy.deepcopy(live) if isinstance(live, dict) else {}
        for key, value in patch.items():
            if key.startswith("$"):
                continue
            if value is None:
                out.pop(key, None)
            else:
                out[key] = strategic_patch(out.get(key), value, key)
        return out
    if isinstance(patch, list) and isinstance(live, list):
        key = _list_key(field, [*live, *patch])
        if key is None:
            return copy.deepcopy(patch)
        merged = copy.deepcopy(live)
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                raise ApiError(422, "Invalid", f"{field}: every item needs its merge key {key}")
            at = next((i for i, old in enumerate(merged) if old.get(key) == item[key]), None)
            if item.get("$patch") == "delete":
                if at is not None:
                    del merged[at]
            elif at is None:
                merged.append({k: v for k, v in item.items() if k != "$patch"})
            else:
                merged[at] = strategic_patch(merged[at], item, field)
        return merged
    return copy.deepcopy(patch)


def update_owners(
    live: dict[str, Any], patched: dict[str, Any], owners: dict[str, set[Path]], manager: str
) -> dict[str, set[Path]]:
    """Ownership after ``manager`` updated ``live`` into ``patched``: what changed is now
    its alone; what it removed is nobody's."""
    before, after = owned(live), owned(patched)
    changed = {p for p, v in after.items() if before.get(p) != v}
    gone = set(before) - set(after)
    out = {m: paths - changed - gone for m, paths in owners.items() if m != manager}
    out[manager] = (owners.get(manager, set()) - gone) | changed
    return out
