"""What of an object fmctl applied is no longer what it applied: the fields of the rendered
object compared with the live one, as server-side apply would see them.

Server-side apply merges: fields others added beside fmctl's (a label, a map key, a
container) stay theirs, and applying again would not remove them, so they are not drift.
What is drift is a field fmctl sets whose live value is another (a hand edit, often with
``kubectl apply --server-side --force-conflicts``, which takes the field over), or one it
sets that is gone. Lists of named items (containers, volumes, env, ports) are merged by
name, as Kubernetes' strategic merge keys them (the API reference's ``patchMergeKey:
name`` on those lists); other lists are compared whole.

The API server stores resource quantities in their canonical form (apimachinery's
``resource.Quantity``: ``0.5`` is kept as ``500m``, ``1024Mi`` as ``1Gi``), so quantities
are compared by value, not text. Fields the server fills in (defaults) are not in the
rendered object and are never compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any


@dataclass(frozen=True)
class Drift:
    """One changed field: its steps in the object (a key, or ``[name]`` / ``[index]`` in a
    list), the live value (None: not there) and fmctl's."""

    steps: tuple[str, ...]
    live: Any
    want: Any

    @property
    def path(self) -> str:
        """``data.prometheus.yml``, ``spec.template.spec.containers[grafana].image``."""
        out = ""
        for step in self.steps:
            out += step if step.startswith("[") else (f".{step}" if out else step)
        return out


_MISSING = object()

#: Metadata fmctl sets and therefore compares (name and namespace are the object's key).
_METADATA = ("labels", "annotations")

_SUFFIXES: dict[str, Decimal | int] = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+)?$"
)
#: Where quantities live in the objects fmctl applies: container resources, a volume's
#: capacity or size, a claim's storage request.
_QUANTITY_PARENTS = ("limits", "requests", "capacity")
_QUANTITY_KEYS = ("sizeLimit", "storage")

Steps = tuple[str, ...]

#: The lists of the core API that merge by a key, and the key: the Kubernetes API
#: reference's ``patch strategy: merge`` / ``patch merge key`` of PodSpec.containers,
#: initContainers, ephemeralContainers, volumes, imagePullSecrets and hostAliases,
#: Container.env, volumeMounts, volumeDevices and ports (by containerPort), and
#: ServiceSpec.ports (by port).
MERGE_KEYS = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "volumes": ("name",),
    "imagePullSecrets": ("name",),
    "hostAliases": ("ip",),
    "env": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "ports": ("containerPort", "port"),
}


def content_drift(desired: dict[str, Any], live: dict[str, Any]) -> list[Drift]:
    """Each field of ``desired`` whose live value differs."""
    out: list[Drift] = []
    meta_want, meta_have = desired.get("metadata") or {}, live.get("metadata") or {}
    for key in _METADATA:
        if key in meta_want:
            _compare(meta_want[key], meta_have.get(key, _MISSING), ("metadata", key), out)
    for key, value in desired.items():
        if key in ("apiVersion", "kind", "metadata", "status"):
            continue
        _compare(value, live.get(key, _MISSING), (key,), out)
    return out


def _compare(want: Any, have: Any, steps: Steps, out: list[Drift]) -> None:
    if have is _MISSING:
        # The API server leaves out empty values (omitempty): an empty map, list or a null
        # fmctl sends is not stored, and is not missing.
        if want not in ({}, [], None, ""):
            out.append(Drift(steps, None, want))
        return
    if isinstance(want, dict):
        if not isinstance(have, dict):
            out.append(Drift(steps, have, want))
            return
        for key, value in want.items():
            _compare(value, have.get(key, _MISSING), (*steps, str(key)), out)
        return
    if isinstance(want, list):
        _compare_list(want, have, steps, out)
        return
    if not _same(want, have, steps):
        out.append(Drift(steps, have, want))


def _compare_list(want: list[Any], have: Any, steps: Steps, out: list[Drift]) -> None:
    if not isinstance(have, list):
        out.append(Drift(steps, have, want))
        return
    key = _merge_key(steps[-1], want)
    if key is not None:
        by_key = {str(i.get(key)): i for i in have if isinstance(i, dict)}
        for item in want:
            label = str(item[key])
            _compare(item, by_key.get(label, _MISSING), (*steps, f"[{label}]"), out)
        return
    if len(want) != len(have):
        out.append(Drift(steps, have, want))
        return
    for index, (w, h) in enumerate(zip(want, have, strict=True)):
        _compare(w, h, (*steps, f"[{index}]"), out)


def _merge_key(field: str, items: list[Any]) -> str | None:
    """The key a list of that field merges by, when every item has it."""
    for key in MERGE_KEYS.get(field, ()):
        if items and all(isinstance(i, dict) and key in i for i in items):
            return key
    return None


def _same(want: Any, have: Any, steps: Steps) -> bool:
    if want == have:
        return True
    parent = steps[-2] if len(steps) > 1 else ""
    if parent in _QUANTITY_PARENTS or steps[-1] in _QUANTITY_KEYS:
        a, b = quantity(want), quantity(have)
        return a is not None and a == b
    return False


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity's value (``500m`` -> 0.5, ``1Gi`` -> 1073741824), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number) * (Decimal(10) ** int(suffix[1:]))
        return Decimal(number) * Decimal(_SUFFIXES[suffix])
    except (InvalidOperation, KeyError):
        return None


def managers_of(live: dict[str, Any], drift: Drift, own: str = "fmctl") -> list[str]:
    """The field managers other than ``own`` that own the drifted field (or one under it)
    in the live object's ``managedFields`` (FieldsV1: ``{"f:data": {"f:prometheus.yml":
    {}}}``). In a list, owning the list or any item of it counts (FieldsV1 names items by
    their whole merge key, ``k:{...}``, which the path does not keep)."""
    found = []
    for entry in live.get("metadata", {}).get("managedFields") or []:
        if entry.get("manager") == own:
            continue
        node: Any = entry.get("fieldsV1") or {}
        for step in drift.steps:
            if step.startswith("["):
                break
            node = node.get(f"f:{step}") if isinstance(node, dict) else None
            if node is None:
                break
        if node is not None and entry.get("manager"):
            found.append(str(entry["manager"]))
    return sorted(set(found))
