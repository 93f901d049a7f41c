"""What the in-cluster stack and the upstream charts share: how fmctl stamps the objects it
applies (its labels and the digest of what it sent), applies them server-side in order, and
tells a hand edit (drift) from its own."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from provisioner.drivers.kube import KubeApi, KubeError
from provisioner.resources.base import FieldChange, How
from provisioner.resources.errors import ResourceError
from provisioner.resources.tags import OWNER_TAG

MANAGED_BY = "app.kubernetes.io/managed-by"
DIGEST = "fmctl.dev/applied-digest"
#: Kinds applied first: what other objects need to exist (CRDs, namespaces, storage).
FIRST = ("CustomResourceDefinition", "Namespace", "StorageClass", "PersistentVolume")


def key_of(obj: dict[str, Any]) -> str:
    """kind/namespace/name."""
    meta = obj["metadata"]
    return f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"


def stamp(doc: dict[str, Any], cluster: str, labels: dict[str, str] | None = None) -> None:
    """Label ``doc`` as fmctl's and the cluster's (and with ``labels``), then record the
    digest of what fmctl sends, in place."""
    meta = doc.setdefault("metadata", {})
    if meta.get("labels") is None:  # a chart may write `labels:` with nothing under it
        meta["labels"] = {}
    meta["labels"][MANAGED_BY] = "fmctl"
    meta["labels"][OWNER_TAG] = cluster
    meta["labels"].update(labels or {})
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    if meta.get("annotations") is None:
        meta["annotations"] = {}
    meta["annotations"][DIGEST] = digest


def first_then_rest(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CRDs, namespaces and storage first (what the rest needs), in a stable order."""
    return sorted(objects, key=lambda o: FIRST.index(o["kind"]) if o["kind"] in FIRST else 9)


def apply_all(
    api: KubeApi,
    objects: list[dict[str, Any]],
    parallelism: int = 8,
    taken: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Apply what others need first (CRDs, namespaces, storage) in order, then the rest in
    parallel: server-side apply of independent objects commutes. The objects of ``taken``
    (keys) are applied with force: the plan showed their fields changed in the cluster,
    and `up` was asked to put them back."""
    from concurrent.futures import ThreadPoolExecutor

    first = [o for o in objects if o["kind"] in FIRST]
    rest = [o for o in objects if o["kind"] not in FIRST]
    for obj in first:
        _apply(api, obj, key_of(obj) in taken)
    with ThreadPoolExecutor(parallelism, thread_name_prefix="fmctl-apply") as pool:
        list(pool.map(lambda o: _apply(api, o, key_of(o) in taken), rest))


def _apply(api: KubeApi, obj: dict[str, Any], force: bool = False) -> None:
    """Apply one object; a field someone else took over since the plan is reported, never
    overwritten (``force``: one the plan showed, taken back)."""
    try:
        api.apply(obj, force=force)
    except KubeError as err:
        if err.status != 409:
            raise
        meta = obj["metadata"]
        raise ResourceError(
            f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']} was changed outside "
            f"fmctl ({err.message}); fmctl does not overwrite it silently",
            hint="undo the change, or hand the fields back with `kubectl apply --server-side "
            "--force-conflicts --field-manager fmctl` on the rendered file",
        ) from err


#: How a FieldChange of an object changed in the cluster begins (what `up` takes back).
CHANGED_IN_CLUSTER = "changed in the cluster"


def drifted(key: str, rendered: dict[str, Any], live: dict[str, Any]) -> list[FieldChange]:
    """The object's fields whose live values are not what fmctl applied, as one change:
    before and after by field path, and who changed them."""
    from provisioner.resources.kube_drift import content_drift, managers_of

    drifts = content_drift(rendered, live)
    if not drifts:
        return []
    who = sorted({m for d in drifts for m in managers_of(live, d)})
    by = f" by {', '.join(who)}" if who else ""
    return [
        FieldChange(
            f"objects.{key}",
            {d.path: d.live for d in drifts},
            {d.path: d.want for d in drifts},
            How.UPDATE,
            f"{CHANGED_IN_CLUSTER}{by}: up applies fmctl's fields again",
            drift=True,
        )
    ]
