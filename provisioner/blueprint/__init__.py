"""The desired resource graph of a spec: one builder for `plan` and `up`.

``build`` turns a resolved spec and the catalog into typed resources (``Planned``): each
kind's params, with references (``Ref``) where a value is another resource's output, and
where in the spec each setting comes from (so a change AWS cannot make is refused on the
spec's own line). The graph's edges are read off the references.
"""

from __future__ import annotations

from provisioner.blueprint.model import Blueprint, BlueprintError, Where
from provisioner.catalog import Catalog
from provisioner.spec.model import ClusterSpec

__all__ = ["Blueprint", "BlueprintError", "Where", "build"]


def build(spec: ClusterSpec, catalog: Catalog, where: Where) -> Blueprint:
    """The desired graph of a resolved spec (``provisioner.spec.resolve.resolve``)."""
    from provisioner.blueprint import blocks, budget, eks, expiry, infra, pcs, slurm
    from provisioner.render.context import build_context

    context = build_context(spec, catalog)
    parts = infra.Parts(spec, context, state=where.state)
    infra.network(parts)
    infra.shared(parts)
    notes: list[str] = []
    if spec.scheduler == "kubernetes":
        infra.storage(parts)
        eks.cluster(parts, where)
    elif spec.slurm.provider == "pcs":
        infra.storage(parts)
        pcs.cluster(parts)
    elif where.parallelcluster:
        infra.storage(parts, slurm.check(parts, where))
        slurm.cluster(parts, where)
    else:
        infra.storage(parts)
        notes.append(
            "the sandbox has no ParallelCluster here (`fmctl setup parallelcluster`): the "
            "Slurm cluster itself is left out, the infrastructure is planned"
        )
    expiry.expiry(parts)
    notes += blocks.blocks(parts, where)
    budget.budget(parts)
    return Blueprint(tuple(parts.items), tuple(notes))
