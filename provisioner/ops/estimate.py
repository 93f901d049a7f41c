"""`fmctl estimate`: where a training step's time goes on one of the spec's pools, from the
catalog's figures alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.estimate.calc import EstimateError
from provisioner.estimate.models import MODELS
from provisioner.spec.model import ClusterSpec

__all__ = ["MODEL_NAMES", "EstimateError", "Sized", "size"]

#: The models `--model` may name.
MODEL_NAMES = tuple(sorted(MODELS))


@dataclass(frozen=True)
class Sized:
    """An estimate and what it was made for."""

    pool: str
    count: int
    instance_type: Any
    estimate: Any


def size(
    spec: ClusterSpec,
    model: str,
    pool: str | None,
    parallel: str,
    **knobs: Any,
) -> Sized:
    """The estimate for ``model`` on ``pool`` (the first pool when None); EstimateError when
    the pool or the parallel layout does not fit."""
    from provisioner.catalog import load_catalog
    from provisioner.estimate.calc import estimate, parse_parallel

    pools = {p.name: p for p in spec.compute.gpu_pools}
    chosen = pools.get(pool) if pool else spec.compute.gpu_pools[0]
    if chosen is None:
        raise EstimateError(f"no GPU pool {pool!r} (pools: {', '.join(pools)})")
    itype = load_catalog()[chosen.instance_type]
    gpus = chosen.count * (itype.gpu.count if itype.gpu else 0)
    result = estimate(MODELS[model], itype, chosen.count, parse_parallel(parallel, gpus), **knobs)
    return Sized(chosen.name, chosen.count, itype, result)
