"""Slurm on AWS Parallel Computing Service: the cluster (AWS runs slurmctld), its compute node
groups (fmctl's launch templates) and its queues, through boto3's ``pcs`` client.

Lifecycles are PCS's (botocore's ``ClusterStatus``/``ComputeNodeGroupStatus``/``QueueStatus``):
CREATING -> ACTIVE, UPDATING -> ACTIVE, DELETING -> gone; a ``*_FAILED`` status is an error
with PCS's ``errorInfo``. What may change in place is what PCS's Update* requests take
(UpdateCluster: slurmConfiguration; UpdateComputeNodeGroup: AMI, subnets, launch template,
purchase option, scaling, instance profile, SSH key; UpdateQueue: its node groups). A node
group's instance types are fixed at creation (UpdateComputeNodeGroup has no
``instanceConfigs``): such a change makes a new group, moves the queue onto it, then deletes
the old one. A newer Slurm version is UpdateCluster's ``scheduler`` (in place; the node
groups then move to the new version's AMI); an older one, the size and the networking are
fixed, and replacing the cluster would take every node group and queue with it: refused.

PCS answers ConflictException while a resource it depends on is changing (a node group made
while the cluster is UPDATING, two updates at once): fmctl waits and tries again.
CreateCluster answers ServiceQuotaExceededException while another cluster of the account is
Creating in the region (one at a time, the CreateCluster reference): fmctl waits behind it,
and says which.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.catalog.pcs import CLUSTER_TAG, SAMPLE_AMI_OWNER, sample_ami_name, version_key
from provisioner.drivers.aws_errors import Conflict, QuotaExceeded
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.resources.base import (
    DataSource,
    FieldChange,
    How,
    Kind,
    Observed,
    Owned,
    Policy,
    Request,
    policies,
)
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.errors import ResourceError
from provisioner.resources.network import SubnetOut
from provisioner.resources.pcs_api import (
    FAILED,
    client,
    digest,
    errors_of,
    patiently,
    retag,
    sweep,
    tags_of,
    unless_gone,
)
from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
)


def request_of_networking(ctx: Context, params: PcsClusterParams) -> dict[str, Any]:
    """The cluster's subnets and groups by id (what a new cluster after a `down` differs in)."""
    return {
        "subnets": [ctx.get(s).id for s in params.subnets],
        "groups": [ctx.get(g).id for g in params.security_groups],
    }


@dataclass(frozen=True)
class NodeGroupOut:
    """A compute node group by id (resources.pcs_nodes; here, as queues point at them)."""

    id: str


# -- the cluster ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PcsClusterOut:
    """A PCS cluster: its id (pcs_...), ARN and the controller's endpoint."""

    id: str
    arn: str
    endpoint: str


@dataclass(frozen=True)
class PcsClusterParams:
    """CreateCluster, as ``render`` writes it in pcs/cluster.json."""

    cluster_name: str
    slurm_version: str
    size: str
    subnets: tuple[Ref[SubnetOut], ...]
    security_groups: tuple[Ref[SgOut], ...]
    scale_down_seconds: int
    custom_settings: tuple[tuple[str, str], ...]
    accounting: str
    tags: DesiredTags


@dataclass(frozen=True)
class PcsClusterLive:
    """What fmctl manages of a cluster."""

    slurm_version: str
    size: str
    subnets: Any
    security_groups: Any
    scale_down_seconds: int
    custom_settings: Any
    accounting: str
    tags: Tags


_CLUSTER_FIXED = "fixed at creation (UpdateCluster cannot change it; CloudFormation: Replacement)"


class PcsCluster(Kind[PcsClusterParams, PcsClusterOut, PcsClusterLive]):
    """The PCS cluster: AWS runs its Slurm controller."""

    name, params, outputs = "pcs-cluster", PcsClusterParams, PcsClusterOut
    # PCS documents no figures ("several minutes"): the orders its getting-started tutorial
    # gives, the same as the sandbox's shim (sandbox.pcs.DURATIONS).
    create_seconds, update_seconds, delete_seconds = 600.0, 120.0, 300.0
    policy = policies(
        slurm_version=Policy(
            How.UPDATE, "UpdateCluster scheduler.version: PCS upgrades the controller in place"
        ),
        size=Policy(How.IMMUTABLE, f"the controller size is {_CLUSTER_FIXED}"),
        subnets=Policy(How.IMMUTABLE, f"the controller's subnet is {_CLUSTER_FIXED}"),
        security_groups=Policy(How.IMMUTABLE, f"the security groups are {_CLUSTER_FIXED}"),
        scale_down_seconds=Policy(How.UPDATE, "UpdateCluster slurmConfiguration"),
        custom_settings=Policy(How.UPDATE, "UpdateCluster slurmConfiguration"),
        accounting=Policy(How.UPDATE, "UpdateCluster slurmConfiguration accounting"),
    )

    def diff(
        self, req: Request[PcsClusterParams], observed: Observed[PcsClusterOut, PcsClusterLive]
    ) -> list[FieldChange]:
        """A newer Slurm is an upgrade in place (UpdateCluster's scheduler; the node groups
        then take the new version's AMI); PCS takes no older one ("You can only update to a
        newer version", botocore's UpdateSchedulerRequest)."""
        out = []
        for change in super().diff(req, observed):
            if change.path == "slurm_version" and version_key(change.after) <= version_key(
                change.before
            ):
                change = FieldChange(
                    change.path,
                    change.before,
                    change.after,
                    How.IMMUTABLE,
                    "PCS cannot downgrade a cluster's Slurm (UpdateCluster takes only a newer "
                    "version)",
                )
            out.append(change)
        return out

    def mine(self, ctx: Context) -> list[dict[str, Any]]:
        """Every PCS cluster carrying the cluster's tag (GetCluster of each)."""

        def load() -> list[dict[str, Any]]:
            pcs = client(ctx)
            out = []
            for page in pcs.get_paginator("list_clusters").paginate():
                for summary in page["clusters"]:
                    if tags_of(ctx, summary["arn"]).get(OWNER_TAG) != ctx.cluster:
                        continue
                    found = unless_gone(
                        functools.partial(pcs.get_cluster, clusterIdentifier=summary["id"])
                    )
                    if found is not None:
                        out.append(dict(found["cluster"]))
            return out

        return ctx.cached("pcs:clusters", load)

    def read(
        self, req: Request[PcsClusterParams]
    ) -> Observed[PcsClusterOut, PcsClusterLive] | None:
        mine = [c for c in self.mine(req.ctx) if c["status"] != "DELETING"]
        if not mine:
            return None
        item = mine[0]
        if item["status"] in FAILED:
            raise ResourceError(
                f"PCS cluster {item['name']} is {item['status']}: {errors_of(item)}",
                hint=f"`fmctl down {req.ctx.cluster}` and `fmctl up` again",
            )
        slurm = item.get("slurmConfiguration") or {}
        net = item.get("networking") or {}
        live = PcsClusterLive(
            str(item["scheduler"]["version"]),
            str(item["size"]),
            frozenset(net.get("subnetIds") or []),
            frozenset(net.get("securityGroupIds") or []),
            int(slurm.get("scaleDownIdleTimeInSeconds") or 0),
            frozenset(
                (s["parameterName"], s["parameterValue"])
                for s in slurm.get("slurmCustomSettings") or []
            ),
            str((slurm.get("accounting") or {}).get("mode", "NONE")),
            tags_of(req.ctx, item["arn"]),
        )
        pending = None if item["status"] == "ACTIVE" else str(item["status"])
        return Observed(self.outputs_of(item), live, str(item["id"]), pending)

    @staticmethod
    def outputs_of(item: dict[str, Any]) -> PcsClusterOut:
        ctld = [e for e in item.get("endpoints") or [] if e.get("type") == "SLURMCTLD"]
        endpoint = f"{ctld[0]['privateIpAddress']}:{ctld[0]['port']}" if ctld else ""
        return PcsClusterOut(str(item["id"]), str(item["arn"]), endpoint)

    def desired(
        self, req: Request[PcsClusterParams], observed: Observed[PcsClusterOut, PcsClusterLive]
    ) -> PcsClusterLive:
        def ids(refs: tuple[Ref[Any], ...]) -> Any:
            if not all(req.ctx.known(r) for r in refs):
                return UNKNOWN
            return frozenset(req.ctx.resolve(r) for r in refs)

        return PcsClusterLive(
            req.params.slurm_version,
            req.params.size,
            ids(req.params.subnets),
            ids(req.params.security_groups),
            req.params.scale_down_seconds,
            frozenset(req.params.custom_settings),
            req.params.accounting,
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    @staticmethod
    def _slurm(params: PcsClusterParams) -> dict[str, Any]:
        return {
            "scaleDownIdleTimeInSeconds": params.scale_down_seconds,
            "slurmCustomSettings": [
                {"parameterName": k, "parameterValue": v} for k, v in params.custom_settings
            ],
            "accounting": {"mode": params.accounting},
        }

    def create(self, req: Request[PcsClusterParams]) -> PcsClusterOut:
        pcs = client(req.ctx)
        request = {
            "clusterName": req.params.cluster_name,
            "scheduler": {"type": "SLURM", "version": req.params.slurm_version},
            "size": req.params.size,
            "networking": {
                "subnetIds": [req.ctx.get(s).id for s in req.params.subnets],
                "securityGroupIds": [req.ctx.get(g).id for g in req.params.security_groups],
            },
            "slurmConfiguration": self._slurm(req.params),
            # The same request, again after a crash, is the same create; a cluster made anew
            # after a `down` has a new subnet and group, so PCS never answers with the old.
            "clientToken": req.ctx.token(
                f"{req.rid}/{digest(request_of_networking(req.ctx, req.params))}"
            ),
            "tags": req.params.tags.at_creation(),
        }
        try:
            item = pcs.create_cluster(**request)["cluster"]
        except QuotaExceeded:
            item = self._behind(req.ctx, req.rid, request)
        except Conflict:
            item = self._found(req.ctx, req.params.cluster_name)
        return self._active(req.ctx, req.rid, str(item["id"]), self.create_seconds)

    def _found(self, ctx: Context, name: str) -> dict[str, Any]:
        """Our own cluster of that name (a create whose answer was lost), or the conflict."""
        item = unless_gone(lambda: client(ctx).get_cluster(clusterIdentifier=name)["cluster"])
        if item is None or tags_of(ctx, item["arn"]).get(OWNER_TAG) != ctx.cluster:
            raise ResourceError(
                f"a PCS cluster named {name} exists in {ctx.region} and is not {ctx.cluster}'s",
                hint="delete it, or name this cluster differently (metadata.name)",
            )
        return dict(item)

    def _behind(self, ctx: Context, rid: str, request: dict[str, Any]) -> dict[str, Any]:
        """Wait until no other cluster of the account is Creating in the region, then create."""
        pcs = client(ctx)

        def creating() -> list[str]:
            names = []
            for page in pcs.get_paginator("list_clusters").paginate():
                names += [c["name"] for c in page["clusters"] if c["status"] == "CREATING"]
            return names

        said: set[str] = set()

        def say(names: list[str]) -> None:
            """Name what fmctl waits behind, once each (the Creating cluster changes as
            others make theirs)."""
            fresh = [n for n in names if n not in said] if names else ([] if said else ["?"])
            if not fresh:
                return
            said.update(fresh)
            behind = ", ".join(n for n in fresh if n != "?") or "another cluster"
            ctx.emit(
                rid,
                "note",
                "PCS creates one cluster at a time per region and account: waiting behind "
                f"{behind} (Creating in {ctx.region})",
            )

        say(creating())

        def attempt() -> dict[str, Any] | None:
            names = creating()
            if names:
                say(names)
                return None
            try:
                return dict(pcs.create_cluster(**request)["cluster"])
            except QuotaExceeded:
                return None

        return ctx.wait_until(
            f"the PCS cluster being created in {ctx.region} to finish",
            attempt,
            self.create_seconds,
            7200,
            rid,
        )

    def _active(self, ctx: Context, rid: str, cluster_id: str, expected: float) -> PcsClusterOut:
        pcs = client(ctx)

        def probe() -> PcsClusterOut | None:
            item = unless_gone(lambda: pcs.get_cluster(clusterIdentifier=cluster_id)["cluster"])
            if item is None:
                raise ResourceError(f"PCS cluster {cluster_id} disappeared while being made")
            if item["status"] in FAILED:
                raise ResourceError(
                    f"PCS cluster {item['name']} is {item['status']}: {errors_of(item)}"
                )
            return self.outputs_of(item) if item["status"] == "ACTIVE" else None

        ctx.forget("pcs:clusters")
        return ctx.wait_until(f"PCS cluster {cluster_id} to be ACTIVE", probe, expected, 7200, rid)

    def wait(
        self, req: Request[PcsClusterParams], observed: Observed[PcsClusterOut, PcsClusterLive]
    ) -> PcsClusterOut:
        return self._active(req.ctx, req.rid, observed.id, self.create_seconds)

    def update(
        self,
        req: Request[PcsClusterParams],
        observed: Observed[PcsClusterOut, PcsClusterLive],
        changes: Sequence[FieldChange],
    ) -> PcsClusterOut:
        paths = {c.path.split(".")[0] for c in changes}
        if "slurm_version" in paths:
            # The controller first, alone: the settings may name what only the new Slurm
            # knows, and PCS takes one update at a time.
            req.ctx.emit(
                req.rid,
                "updating",
                f"Slurm {observed.live.slurm_version} -> {req.params.slurm_version} "
                "(UpdateCluster)",
            )
            scheduler = {"version": req.params.slurm_version}
            patiently(
                req.ctx,
                req.rid,
                f"the upgrade to Slurm {req.params.slurm_version}",
                lambda: client(req.ctx).update_cluster(
                    clusterIdentifier=observed.id,
                    scheduler=scheduler,
                    clientToken=req.ctx.token(
                        f"{req.rid}/upgrade/{observed.id}/{req.params.slurm_version}"
                    ),
                ),
            )
            self._active(req.ctx, req.rid, observed.id, self.update_seconds)
        if paths - {"tags", "slurm_version"}:
            req.ctx.emit(req.rid, "updating", ", ".join(sorted(paths - {"tags", "slurm_version"})))
            patiently(
                req.ctx,
                req.rid,
                "the cluster's Slurm settings",
                lambda: client(req.ctx).update_cluster(
                    clusterIdentifier=observed.id,
                    slurmConfiguration=self._slurm(req.params),
                    clientToken=req.ctx.token(
                        f"{req.rid}/update/{digest(self._slurm(req.params))}"
                    ),
                ),
            )
            self._active(req.ctx, req.rid, observed.id, self.update_seconds)
        retag(req.ctx, observed.outputs.arn, changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(tags_of(ctx, c["arn"]).get(RESOURCE_TAG) or "pcs/cluster", c["id"])
            for c in self.mine(ctx)
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        pcs = client(ctx)
        if unless_gone(lambda: pcs.get_cluster(clusterIdentifier=owned.id)) is None:
            return
        patiently(
            ctx,
            owned.resource,
            f"the deletion of PCS cluster {owned.id}",
            lambda: unless_gone(
                lambda: pcs.delete_cluster(
                    clusterIdentifier=owned.id,
                    clientToken=ctx.token(f"{owned.resource}/delete/{owned.id}"),
                )
            ),
        )

        def absent() -> bool | None:
            item = unless_gone(lambda: pcs.get_cluster(clusterIdentifier=owned.id)["cluster"])
            if item is not None and item["status"] == "DELETE_FAILED":
                raise ResourceError(f"PCS cluster {owned.id} is DELETE_FAILED: {errors_of(item)}")
            return True if item is None else None

        ctx.wait_until(
            f"PCS cluster {owned.id} to be deleted",
            absent,
            self.delete_seconds,
            3600,
            owned.resource,
        )
        sweep(ctx, owned.resource, CLUSTER_TAG, owned.id)


def cluster_id(ctx: Context) -> str | None:
    """The id of the cluster's PCS cluster, if there is one (for its node groups' and
    queues' reads, and for teardown by tags)."""
    mine = [c for c in PcsCluster().mine(ctx) if c["status"] != "DELETING"]
    return str(mine[0]["id"]) if mine else None


def split_id(ctx: Context, owned: Owned) -> tuple[str | None, str]:
    """(cluster, child) of a node group's or queue's owned id: CLUSTER/CHILD from teardown by
    tags, or the child alone from a plan (the cluster's own then)."""
    if "/" in owned.id:
        cluster, child = owned.id.split("/", 1)
        return cluster, child
    return cluster_id(ctx), owned.id


def children(
    ctx: Context, key: str, lister: str, field: str, getter: str, arg: str
) -> list[dict[str, Any]]:
    """The cluster's node groups or queues carrying its tag (Get of each, for its status)."""

    def load() -> list[dict[str, Any]]:
        pcs = client(ctx)
        out = []
        for cluster in PcsCluster().mine(ctx):

            def listed(c: str = cluster["id"]) -> list[dict[str, Any]]:
                pages = pcs.get_paginator(lister).paginate(clusterIdentifier=c)
                return [item for page in pages for item in page[field]]

            for summary in unless_gone(listed) or []:
                if tags_of(ctx, summary["arn"]).get(OWNER_TAG) != ctx.cluster:
                    continue
                get = functools.partial(
                    getattr(pcs, getter), clusterIdentifier=cluster["id"], **{arg: summary["id"]}
                )
                item = unless_gone(get)
                if item is not None:
                    out.append(next(v for k, v in item.items() if k != "ResponseMetadata"))
        return out

    return ctx.cached(key, load)


# -- AWS's sample AMI ----------------------------------------------------------------------
@dataclass(frozen=True)
class PcsAmiOut:
    """An AMI by id."""

    id: str


@dataclass(frozen=True)
class PcsAmiParams:
    """AWS's PCS sample AMI for a Slurm version and architecture, found by name."""

    slurm_version: str
    architecture: str


class PcsSampleAmi(DataSource[PcsAmiParams, PcsAmiOut]):
    """AWS's newest PCS sample AMI of a name (looked up; never made or deleted)."""

    name, params, outputs = "pcs-sample-ami", PcsAmiParams, PcsAmiOut
    create_seconds = 1.0

    def look_up(self, req: Request[PcsAmiParams]) -> tuple[PcsAmiOut, str] | None:
        name = sample_ami_name(req.params.slurm_version, req.params.architecture)
        images = req.ctx.aws.client("ec2").describe_images(
            Owners=[SAMPLE_AMI_OWNER],
            Filters=[
                {"Name": "name", "Values": [f"{name}*"]},
                {"Name": "architecture", "Values": [req.params.architecture]},
                {"Name": "state", "Values": ["available"]},
            ],
        )["Images"]
        if not images:
            return None
        newest = max(images, key=lambda i: str(i.get("CreationDate", "")))
        return PcsAmiOut(str(newest["ImageId"])), str(newest["ImageId"])

    def missing(self, req: Request[PcsAmiParams]) -> Exception:
        name = sample_ami_name(req.params.slurm_version, req.params.architecture)
        return ResourceError(
            f"AWS's PCS sample AMI {name} is not offered in this region",
            hint="set slurm.amiId to an AMI built for PCS (AWS's PCS AMI recipes), or another "
            "slurm.pcs.slurmVersion",
        )
