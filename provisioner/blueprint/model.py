"""What the builder makes: the desired resources, and what it needs of the machine."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import FmctlBug
from provisioner.graph.graph import Graph
from provisioner.graph.ref import refs_in
from provisioner.resources.base import Planned


class BlueprintError(FmctlBug):
    """The rendered files and the resource model disagree (a bug in fmctl, not the spec)."""


@dataclass(frozen=True)
class Where:
    """What the builder needs of this machine and target."""

    #: The cluster's local folder (HOME/clusters/NAME): rendered configs `up` sends.
    folder: Path
    #: Where `up` writes the kubeconfig entry.
    kubeconfig: Path
    #: What the kubeconfig's `fmctl token` needs besides cluster and region to reach this
    #: target (``Target.token_args``).
    token_args: tuple[str, ...] = ()
    #: Include the ParallelCluster cluster (False: the sandbox without ParallelCluster).
    parallelcluster: bool = True
    #: The sandbox with ParallelCluster installed: its create is validated, not run.
    validate_only: bool = False
    #: Where the cluster's state is shared (``s3://BUCKET/PREFIX``), None for local state.
    state: str | None = None


@dataclass(frozen=True)
class Blueprint:
    """The desired resources, by logical id, in the order they were planned."""

    resources: tuple[Planned, ...]
    notes: tuple[str, ...] = field(default=())

    def __iter__(self) -> Iterator[Planned]:
        return iter(self.resources)

    def __getitem__(self, rid: str) -> Planned:
        for item in self.resources:
            if item.id == rid:
                return item
        raise KeyError(rid)

    def __contains__(self, rid: object) -> bool:
        return any(item.id == rid for item in self.resources)

    @property
    def ids(self) -> list[str]:
        """Logical ids, in order."""
        return [item.id for item in self.resources]

    def graph(self) -> Graph:
        """Resource -> the resources its params refer to."""
        ids = set(self.ids)
        deps = {}
        for item in self.resources:
            targets = {ref.target for ref in refs_in(item.params)}
            missing = sorted(targets - ids)
            if missing:
                raise BlueprintError(f"{item.id} refers to {missing}, which the plan lacks")
            deps[item.id] = targets
        return Graph.of(deps)
