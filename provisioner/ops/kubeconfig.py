"""`fmctl kubeconfig` and what `down` leaves of a cluster on this machine.

`up` merges a kubeconfig entry for an EKS cluster (an exec credential: `fmctl token` mints
each token, none is written down); `kubeconfig` writes it again from the cluster as EKS
describes it (someone deleted it, or a teammate's cluster), or prints a kubeconfig holding it
alone. `down` takes the entry out again and removes the cluster's local folder (its saved
spec, state and event log), unless asked to keep it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from provisioner.ops.target import Target, kubeconfig_path, make_context
from provisioner.resources.errors import ResourceError


def _entry(target: Target, name: str) -> dict[str, Any]:
    """The entry for fmctl's EKS cluster ``name``, from EKS's description of it."""
    from provisioner.drivers.eks_auth import kubeconfig_entry
    from provisioner.resources.eks import EksCluster
    from provisioner.resources.tags import OWNER_TAG

    cluster = EksCluster().describe(make_context(target, name, read_only=True))
    if cluster is None or (cluster.get("tags") or {}).get(OWNER_TAG) != name:
        raise ResourceError(
            f"no EKS cluster {name} of fmctl's in {target.region}",
            f"`fmctl list --region {target.region}` shows fmctl's clusters there",
        )
    if cluster.get("status") != "ACTIVE" or not cluster.get("endpoint"):
        raise ResourceError(
            f"EKS cluster {name} is {cluster.get('status')}: it has no API to point at yet",
            "`fmctl up` again finishes it; `fmctl status` shows where it is",
        )
    return kubeconfig_entry(
        name,
        target.region,
        str(cluster["endpoint"]),
        str((cluster.get("certificateAuthority") or {}).get("data", "")),
        target.token_args(),
    )


def write_kubeconfig(target: Target, name: str) -> Path:
    """Merge the cluster's entry into the kubeconfig `up` writes (0600, others kept, its
    context current); the file's path."""
    from provisioner.drivers.eks_auth import merge_kubeconfig

    path = kubeconfig_path(target, name)
    merge_kubeconfig(path, _entry(target, name))
    return path


def kubeconfig_text(target: Target, name: str) -> str:
    """A kubeconfig holding the cluster's entry alone, as YAML (nothing written)."""
    import yaml

    from provisioner.drivers.eks_auth import kubeconfig_of

    return str(yaml.safe_dump(kubeconfig_of(_entry(target, name)), sort_keys=False))


def forget_locally(
    target: Target, name: str, keep_state: bool, found_nothing: bool = False
) -> list[str]:
    """After `down`: the kubeconfig entry out, the local folder gone (``keep_state``: kept);
    what was removed, one line each. When the `down` found nothing (``found_nothing``), a
    cluster recorded in another region, or whose state is shared, keeps both and says so:
    nothing found here says nothing of it."""
    from provisioner.drivers.eks_auth import remove_kubeconfig_entry
    from provisioner.ops.region import recorded_region
    from provisioner.ops.team import POINTER

    folder = target.folder(name)
    recorded = recorded_region(target.home, name)
    if recorded is not None and recorded != target.region:
        # Nothing of the cluster in this region says nothing of the one recorded: a typo'd
        # --region must not wipe a live cluster's spec, events, audit log and kubeconfig.
        return [
            f"kept the local state {folder} and its kubeconfig entry: {name} was applied in "
            f"{recorded}, not {target.region} (`fmctl down {name} --region {recorded}`)"
        ]
    shared = _shared_url(target, folder / POINTER)
    if found_nothing and shared is not None:
        # Its spec, lock and history are the team's: this machine's note of where they are
        # (and its kubeconfig entry) is all it has, and a teammate's cluster may be
        # elsewhere than this run looked.
        return [
            f"kept the local state {folder} and its kubeconfig entry: {name}'s state lives "
            f"in {shared} (`fmctl history {name}` shows where its runs were made)"
        ]
    lines = []
    path = kubeconfig_path(target, name)
    if remove_kubeconfig_entry(path, name, target.region):
        lines.append(f"removed {name}'s entry from {path}")
    if not keep_state and folder.is_dir():
        shutil.rmtree(folder)
        lines.append(f"removed the local state {folder} (--keep-state keeps it)")
    return lines


def _shared_url(target: Target, pointer: Path) -> str | None:
    """The team state's URL the cluster uses from this machine, None when it is local."""
    if target.state is not None and not target.state.local:
        return target.state.url
    try:
        text = pointer.read_text().strip()
    except OSError:
        return None
    return text if text.startswith("s3://") else None
