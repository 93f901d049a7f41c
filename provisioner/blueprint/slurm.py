"""The ParallelCluster cluster on the infrastructure fmctl made: its validators as early as
they can run (before the file system, the first slow and billed resource), then the cluster
on the final config (the file system by its id)."""

from __future__ import annotations

from provisioner.blueprint.infra import Parts, placement_ref, way_out
from provisioner.blueprint.model import Where
from provisioner.graph.ref import Ref
from provisioner.resources.compute import SgOut
from provisioner.resources.fsx import FsxOut
from provisioner.resources.fsx_dra import DraOut
from provisioner.resources.iam import PolicyOut
from provisioner.resources.network import SubnetOut, VpcOut
from provisioner.resources.parallelcluster import ParallelClusterKind, PclusterParams
from provisioner.resources.pcluster_check import (
    CheckOut,
    CheckParams,
    ConfigRefs,
    ParallelClusterCheck,
)
from provisioner.resources.storage import ArtifactsOut, BucketOut


def _refs(p: Parts, nodes: bool) -> ConfigRefs:
    """What the config is filled from; with ``nodes``, also the private subnet's way out
    (the nodes download at bootstrap; the validators need none of it)."""
    routes, endpoint = way_out(p) if nodes else ((), None)
    groups = tuple(ref for pool in p.c.pools if (ref := placement_ref(p, pool.name)) is not None)
    return ConfigRefs(
        vpc=p.ref("vpc", VpcOut),
        private_subnet=p.ref("subnet/private", SubnetOut),
        public_subnet=p.maybe("subnet/public", SubnetOut) or p.ref("subnet/private", SubnetOut),
        efa_group=p.ref("sg/efa", SgOut),
        bucket=p.ref("bucket", BucketOut),
        artifacts=p.ref("artifacts", ArtifactsOut),
        placement_groups=groups,
        amp_policy=p.maybe("iam/amp-write", PolicyOut),
        routes=routes,
        endpoint=endpoint,
    )


def check(p: Parts, where: Where) -> Ref[CheckOut]:
    """ParallelCluster's validators on the config as ``render`` writes it (a new file system
    in ParallelCluster's own settings: it does not exist yet)."""
    from provisioner.render.slurm import render_slurm

    early = render_slurm(p.c, early=True)["parallelcluster/cluster-config.yaml"]
    params = CheckParams(early, str(where.folder / "cluster-config.checked.yaml"), _refs(p, False))
    p.add("parallelcluster/check", ParallelClusterCheck, params)
    return p.ref("parallelcluster/check", CheckOut)


def cluster(p: Parts, where: Where) -> None:
    """The cluster, on the final config: the file system fmctl made, by id."""
    from provisioner.render.slurm import render_slurm

    # ParallelCluster mounts the file system fmctl made, by id, and never owns it.
    final = render_slurm(p.c)["parallelcluster/cluster-config.yaml"]
    links = tuple(p.ref(i.id, DraOut) for i in p.items if i.id.startswith("dra/"))
    params = PclusterParams(
        config=final,
        config_path=str(where.folder / "cluster-config.yaml"),
        refs=_refs(p, True),
        check=p.ref("parallelcluster/check", CheckOut),
        fsx=p.maybe("fsx", FsxOut),
        links=links,
        validate_only=where.validate_only,
    )
    p.add("parallelcluster", ParallelClusterKind, params)
