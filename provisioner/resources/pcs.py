"""Slurm on AWS Parallel Computing Service: the cluster (AWS runs slurmctld), its compute node
groups (fmctl's launch templates) and its queues, through boto3's ``pcs`` client.

Lifecycles are PCS's (botocore's ``ClusterStatus``/``ComputeNodeGroupStatus``/``QueueStatus``):
CREATING -> ACTIVE, UPDATING -> ACTIVE, DELETING -> gone; a ``*_FAILED`` status is an error
with PCS's ``errorInfo``. What may change in place is what PCS's Update* requests take
(UpdateCluster: slurmConfiguration; UpdateComputeNodeGroup: AMI, subnets, launch template,
purchase option, scaling, instance profile, SSH key; UpdateQueue: its node groups). A node
group's instance types are fixed at creation (UpdateComputeNodeGroup has no
``instanceConfigs``): such a change makes a new group, moves the queue onto it, then deletes
the old one. A cluster's scheduler, size and networking are fixed too, and replacing the
cluster would take every node group and queue with it: refused.

PCS answers ConflictException while a resource it depends on is changing (a node group made
while the cluster is UPDATING, two updates at once): fmctl waits and tries again.
CreateCluster answers ServiceQuotaExceededException while another cluster of the account is
Creating in the region (one at a time, the CreateCluster reference): fmctl waits behind it,
and says which.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from provisioner.catalog.pcs import CLUSTER_TAG, NODE_GROUP_TAG, SAMPLE_AMI_OWNER, sample_ami_name
from provisioner.drivers.aws import error_code
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.resources.base import FieldChange, How, Kind, Observed, Owned, Policy, policies
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.errors import ResourceError
from provisioner.resources.iam import RoleOut
from provisioner.resources.launch_template import LtOut
from provisioner.resources.network import SubnetOut
from provisioner.resources.routes import EndpointOut, RouteTableOut
from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
    tag_updates,
)

T = TypeVar("T")
_FAILED = ("CREATE_FAILED", "DELETE_FAILED", "UPDATE_FAILED", "SUSPENDING", "SUSPENDED")


def _client(ctx: Context) -> Any:
    return ctx.aws.client("pcs")


def unless_gone(call: Callable[[], T]) -> T | None:
    """``call()``, or None when PCS answers that what it names does not exist."""
    try:
        return call()
    except Exception as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise


def _errors(item: dict[str, Any]) -> str:
    found = item.get("errorInfo") or []
    return "; ".join(f"{e.get('code')}: {e.get('message')}" for e in found) or "no details"


def _retag(ctx: Context, arn: str, changes: Sequence[FieldChange]) -> None:
    for change in changes:
        if change.path != "tags":
            continue
        add, remove = tag_updates(change.before, change.after)
        if add:
            _client(ctx).tag_resource(resourceArn=arn, tags=add)
        if remove:
            _client(ctx).untag_resource(resourceArn=arn, tagKeys=remove)


def _digest(value: Any) -> str:
    """A short digest of a request's content: in a client token, a different request is a
    different token (PCS answers a token it knows with what that request made)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def request_of_networking(ctx: Context, params: PcsClusterParams) -> dict[str, Any]:
    """The cluster's subnets and groups by id (what a new cluster after a `down` differs in)."""
    return {
        "subnets": [ctx.get(s).id for s in params.subnets],
        "groups": [ctx.get(g).id for g in params.security_groups],
    }


def _tags(ctx: Context, arn: str) -> Tags:
    found = unless_gone(lambda: _client(ctx).list_tags_for_resource(resourceArn=arn))
    return Tags.of((found or {}).get("tags") or {})


def _patiently(ctx: Context, rid: str, what: str, call: Callable[[], T]) -> T:
    """``call()``, again while PCS answers ConflictException (what it depends on is
    changing: it clears when that change lands)."""
    try:
        return call()
    except Exception as exc:
        if error_code(exc) != "ConflictException":
            raise
        ctx.emit(rid, "note", f"PCS refused {what} for now ({exc}); trying again")

    def again() -> tuple[T] | None:
        try:
            return (call(),)
        except Exception as exc:
            if error_code(exc) == "ConflictException":
                return None
            raise

    return ctx.wait_until(f"PCS to accept {what}", again, 30.0, 3600, rid)[0]


def sweep(ctx: Context, rid: str, key: str, value: str) -> None:
    """Terminate what PCS launched and left (tagged ``key``=``value`` by PCS and carrying the
    cluster's own tag from fmctl's launch template), and wait until it is gone: deleting a
    node group terminates its instances, and any it did not must not outlive the cluster."""
    ec2 = ctx.aws.client("ec2")
    alive = ["pending", "running", "stopping", "stopped"]
    filters = [
        {"Name": f"tag:{key}", "Values": [value]},
        {"Name": f"tag:{OWNER_TAG}", "Values": [ctx.cluster]},
        {"Name": "instance-state-name", "Values": alive},
    ]

    def left() -> list[str]:
        found = ec2.describe_instances(Filters=filters)["Reservations"]
        return [i["InstanceId"] for r in found for i in r["Instances"]]

    ids = left()
    if not ids:
        return
    ctx.emit(rid, "note", f"terminating {len(ids)} instance(s) PCS left: {', '.join(ids)}")
    ec2.terminate_instances(InstanceIds=ids)
    ctx.wait_until(
        f"{len(ids)} instance(s) to terminate", lambda: True if not left() else None, 60, 1800, rid
    )


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
        slurm_version=Policy(How.IMMUTABLE, f"the Slurm version is {_CLUSTER_FIXED} here"),
        size=Policy(How.IMMUTABLE, f"the controller size is {_CLUSTER_FIXED}"),
        subnets=Policy(How.IMMUTABLE, f"the controller's subnet is {_CLUSTER_FIXED}"),
        security_groups=Policy(How.IMMUTABLE, f"the security groups are {_CLUSTER_FIXED}"),
        scale_down_seconds=Policy(How.UPDATE, "UpdateCluster slurmConfiguration"),
        custom_settings=Policy(How.UPDATE, "UpdateCluster slurmConfiguration"),
        accounting=Policy(How.UPDATE, "UpdateCluster slurmConfiguration accounting"),
    )

    def mine(self, ctx: Context) -> list[dict[str, Any]]:
        """Every PCS cluster carrying the cluster's tag (GetCluster of each)."""

        def load() -> list[dict[str, Any]]:
            pcs = _client(ctx)
            out = []
            for page in pcs.get_paginator("list_clusters").paginate():
                for summary in page["clusters"]:
                    if _tags(ctx, summary["arn"]).get(OWNER_TAG) != ctx.cluster:
                        continue
                    found = unless_gone(
                        functools.partial(pcs.get_cluster, clusterIdentifier=summary["id"])
                    )
                    if found is not None:
                        out.append(dict(found["cluster"]))
            return out

        return ctx.cached("pcs:clusters", load)

    def read(
        self, ctx: Context, rid: str, params: PcsClusterParams
    ) -> Observed[PcsClusterOut, PcsClusterLive] | None:
        mine = [c for c in self.mine(ctx) if c["status"] != "DELETING"]
        if not mine:
            return None
        item = mine[0]
        if item["status"] in _FAILED:
            raise ResourceError(
                f"PCS cluster {item['name']} is {item['status']}: {_errors(item)}",
                hint=f"`fmctl down {ctx.cluster}` and `fmctl up` again",
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
            _tags(ctx, item["arn"]),
        )
        pending = None if item["status"] == "ACTIVE" else str(item["status"])
        return Observed(self.outputs_of(item), live, str(item["id"]), pending)

    @staticmethod
    def outputs_of(item: dict[str, Any]) -> PcsClusterOut:
        ctld = [e for e in item.get("endpoints") or [] if e.get("type") == "SLURMCTLD"]
        endpoint = f"{ctld[0]['privateIpAddress']}:{ctld[0]['port']}" if ctld else ""
        return PcsClusterOut(str(item["id"]), str(item["arn"]), endpoint)

    def desired(
        self,
        ctx: Context,
        rid: str,
        params: PcsClusterParams,
        observed: Observed[PcsClusterOut, PcsClusterLive],
    ) -> PcsClusterLive:
        def ids(refs: tuple[Ref[Any], ...]) -> Any:
            if not all(ctx.known(r) for r in refs):
                return UNKNOWN
            return frozenset(ctx.resolve(r) for r in refs)

        return PcsClusterLive(
            params.slurm_version,
            params.size,
            ids(params.subnets),
            ids(params.security_groups),
            params.scale_down_seconds,
            frozenset(params.custom_settings),
            params.accounting,
            params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
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

    def create(self, ctx: Context, rid: str, params: PcsClusterParams) -> PcsClusterOut:
        pcs = _client(ctx)
        request = {
            "clusterName": params.cluster_name,
            "scheduler": {"type": "SLURM", "version": params.slurm_version},
            "size": params.size,
            "networking": {
                "subnetIds": [ctx.get(s).id for s in params.subnets],
                "securityGroupIds": [ctx.get(g).id for g in params.security_groups],
            },
            "slurmConfiguration": self._slurm(params),
            # The same request, again after a crash, is the same create; a cluster made anew
            # after a `down` has a new subnet and group, so PCS never answers with the old.
            "clientToken": ctx.token(f"{rid}/{_digest(request_of_networking(ctx, params))}"),
            "tags": params.tags.at_creation(),
        }
        try:
            item = pcs.create_cluster(**request)["cluster"]
        except Exception as exc:
            code = error_code(exc)
            if code == "ServiceQuotaExceededException":
                item = self._behind(ctx, rid, request)
            elif code == "ConflictException":
                item = self._found(ctx, params.cluster_name)
            else:
                raise
        return self._active(ctx, rid, str(item["id"]), self.create_seconds)

    def _found(self, ctx: Context, name: str) -> dict[str, Any]:
        """Our own cluster of that name (a create whose answer was lost), or the conflict."""
        item = unless_gone(lambda: _client(ctx).get_cluster(clusterIdentifier=name)["cluster"])
        if item is None or _tags(ctx, item["arn"]).get(OWNER_TAG) != ctx.cluster:
            raise ResourceError(
                f"a PCS cluster named {name} exists in {ctx.region} and is not {ctx.cluster}'s",
                hint="delete it, or name this cluster differently (metadata.name)",
            )
        return dict(item)

    def _behind(self, ctx: Context, rid: str, request: dict[str, Any]) -> dict[str, Any]:
        """Wait until no other cluster of the account is Creating in the region, then create."""
        pcs = _client(ctx)

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
            except Exception as exc:
                if error_code(exc) == "ServiceQuotaExceededException":
                    return None
                raise

        return ctx.wait_until(
            f"the PCS cluster being created in {ctx.region} to finish",
            attempt,
            self.create_seconds,
            7200,
            rid,
        )

    def _active(self, ctx: Context, rid: str, cluster_id: str, expected: float) -> PcsClusterOut:
        pcs = _client(ctx)

        def probe() -> PcsClusterOut | None:
            item = unless_gone(lambda: pcs.get_cluster(clusterIdentifier=cluster_id)["cluster"])
            if item is None:
                raise ResourceError(f"PCS cluster {cluster_id} disappeared while being made")
            if item["status"] in _FAILED:
                raise ResourceError(
                    f"PCS cluster {item['name']} is {item['status']}: {_errors(item)}"
                )
            return self.outputs_of(item) if item["status"] == "ACTIVE" else None

        ctx.forget("pcs:clusters")
        return ctx.wait_until(f"PCS cluster {cluster_id} to be ACTIVE", probe, expected, 7200, rid)

    def wait(
        self,
        ctx: Context,
        rid: str,
        params: PcsClusterParams,
        observed: Observed[PcsClusterOut, PcsClusterLive],
    ) -> PcsClusterOut:
        return self._active(ctx, rid, observed.id, self.create_seconds)

    def update(
        self,
        ctx: Context,
        rid: str,
        params: PcsClusterParams,
        observed: Observed[PcsClusterOut, PcsClusterLive],
        changes: Sequence[FieldChange],
    ) -> PcsClusterOut:
        paths = {c.path.split(".")[0] for c in changes}
        if paths - {"tags"}:
            ctx.emit(rid, "updating", ", ".join(sorted(paths - {"tags"})))
            _patiently(
                ctx,
                rid,
                "the cluster's Slurm settings",
                lambda: _client(ctx).update_cluster(
                    clusterIdentifier=observed.id,
                    slurmConfiguration=self._slurm(params),
                    clientToken=ctx.token(f"{rid}/update/{_digest(self._slurm(params))}"),
                ),
            )
            self._active(ctx, rid, observed.id, self.update_seconds)
        _retag(ctx, observed.outputs.arn, changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(_tags(ctx, c["arn"]).get(RESOURCE_TAG) or "pcs/cluster", c["id"])
            for c in self.mine(ctx)
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        pcs = _client(ctx)
        if unless_gone(lambda: pcs.get_cluster(clusterIdentifier=owned.id)) is None:
            return
        _patiently(
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
                raise ResourceError(f"PCS cluster {owned.id} is DELETE_FAILED: {_errors(item)}")
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


def _children(
    ctx: Context, key: str, lister: str, field: str, getter: str, arg: str
) -> list[dict[str, Any]]:
    """The cluster's node groups or queues carrying its tag (Get of each, for its status)."""

    def load() -> list[dict[str, Any]]:
        pcs = _client(ctx)
        out = []
        for cluster in PcsCluster().mine(ctx):

            def listed(c: str = cluster["id"]) -> list[dict[str, Any]]:
                pages = pcs.get_paginator(lister).paginate(clusterIdentifier=c)
                return [item for page in pages for item in page[field]]

            for summary in unless_gone(listed) or []:
                if _tags(ctx, summary["arn"]).get(OWNER_TAG) != ctx.cluster:
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


@dataclass(frozen=True)
class NoLive:
    """Nothing to manage: the image is AWS's."""


class PcsSampleAmi(Kind[PcsAmiParams, PcsAmiOut, NoLive]):
    """AWS's newest PCS sample AMI of a name (looked up; never made or deleted)."""

    name, params, outputs, owned = "pcs-sample-ami", PcsAmiParams, PcsAmiOut, False
    create_seconds = 1.0

    def read(
        self, ctx: Context, rid: str, params: PcsAmiParams
    ) -> Observed[PcsAmiOut, NoLive] | None:
        name = sample_ami_name(params.slurm_version, params.architecture)
        images = ctx.aws.client("ec2").describe_images(
            Owners=[SAMPLE_AMI_OWNER],
            Filters=[
                {"Name": "name", "Values": [f"{name}*"]},
                {"Name": "architecture", "Values": [params.architecture]},
                {"Name": "state", "Values": ["available"]},
            ],
        )["Images"]
        if not images:
            return None
        newest = max(images, key=lambda i: str(i.get("CreationDate", "")))
        return Observed(PcsAmiOut(str(newest["ImageId"])), NoLive(), str(newest["ImageId"]))

    def desired(
        self, ctx: Context, rid: str, params: PcsAmiParams, observed: Observed[PcsAmiOut, NoLive]
    ) -> NoLive:
        return NoLive()

    def missing(self, rid: str, params: PcsAmiParams) -> Exception:
        name = sample_ami_name(params.slurm_version, params.architecture)
        return ResourceError(
            f"AWS's PCS sample AMI {name} is not offered in this region",
            hint="set slurm.amiId to an AMI built for PCS (AWS's PCS AMI recipes), or another "
            "slurm.pcs.slurmVersion",
        )

    def create(self, ctx: Context, rid: str, params: PcsAmiParams) -> PcsAmiOut:
        raise self.missing(rid, params)


# -- compute node groups -------------------------------------------------------------------
@dataclass(frozen=True)
class NodeGroupOut:
    """A compute node group by id."""

    id: str


@dataclass(frozen=True)
class NodeGroupParams:
    """CreateComputeNodeGroup, as ``render`` writes it in pcs/compute-node-groups/NAME.json."""

    cluster: Ref[PcsClusterOut]
    group_name: str
    ami: str | Ref[PcsAmiOut]
    subnets: tuple[Ref[SubnetOut], ...]
    purchase_option: str
    launch_template: Ref[LtOut]
    instance_profile: Ref[RoleOut]
    min_count: int
    max_count: int
    instance_type: str
    tags: DesiredTags
    ssh_key: str | None = None
    #: The private subnet's way out and the S3 endpoint: nodes download at bootstrap.
    routes: tuple[Ref[RouteTableOut], ...] = ()
    endpoint: Ref[EndpointOut] | None = None


@dataclass(frozen=True)
class NodeGroupLive:
    """What fmctl manages of a compute node group."""

    ami: Any
    subnets: Any
    purchase_option: str
    launch_template: Any
    instance_profile: Any
    min_count: int
    max_count: int
    instance_type: str
    ssh_key: str | None
    tags: Tags


def profile_arn(role_arn: str) -> str:
    """The instance profile of a node role (fmctl names each profile after its role, on the
    same path)."""
    return role_arn.replace(":role/", ":instance-profile/", 1)


class PcsNodeGroup(Kind[NodeGroupParams, NodeGroupOut, NodeGroupLive]):
    """A compute node group: the login nodes, or one per GPU pool."""

    name, params, outputs = "pcs-node-group", NodeGroupParams, NodeGroupOut
    create_seconds, update_seconds, delete_seconds = 300.0, 180.0, 180.0
    create_before_delete = True
    policy = policies(
        instance_type=Policy(
            How.REPLACE,
            "instance types are fixed at creation (UpdateComputeNodeGroup has no "
            "instanceConfigs): a new group takes the queue over, then the old one goes",
        ),
        ami=Policy(How.UPDATE, "UpdateComputeNodeGroup amiId: PCS replaces idle nodes"),
        subnets=Policy(How.UPDATE, "UpdateComputeNodeGroup subnetIds"),
        purchase_option=Policy(How.UPDATE, "UpdateComputeNodeGroup purchaseOption"),
        launch_template=Policy(How.UPDATE, "UpdateComputeNodeGroup customLaunchTemplate"),
        instance_profile=Policy(How.UPDATE, "UpdateComputeNodeGroup iamInstanceProfileArn"),
        min_count=Policy(How.UPDATE, "UpdateComputeNodeGroup scalingConfiguration"),
        max_count=Policy(How.UPDATE, "UpdateComputeNodeGroup scalingConfiguration"),
        ssh_key=Policy(How.UPDATE, "UpdateComputeNodeGroup sshKeyName"),
    )

    def groups(self, ctx: Context) -> list[dict[str, Any]]:
        return _children(
            ctx,
            "pcs:node-groups",
            "list_compute_node_groups",
            "computeNodeGroups",
            "get_compute_node_group",
            "computeNodeGroupIdentifier",
        )

    def _observed(self, ctx: Context, ng: dict[str, Any]) -> Observed[NodeGroupOut, NodeGroupLive]:
        scaling = ng.get("scalingConfiguration") or {}
        template = ng.get("customLaunchTemplate") or {}
        types = [i.get("instanceType", "") for i in ng.get("instanceConfigs") or []]
        live = NodeGroupLive(
            ng.get("amiId"),
            frozenset(ng.get("subnetIds") or []),
            str(ng.get("purchaseOption", "ONDEMAND")),
            f"{template.get('id')}:{template.get('version')}" if template else None,
            ng.get("iamInstanceProfileArn"),
            int(scaling.get("minInstanceCount", 0)),
            int(scaling.get("maxInstanceCount", 0)),
            str(types[0]) if types else "",
            ng.get("sshKeyName"),
            _tags(ctx, ng["arn"]),
        )
        if ng["status"] in _FAILED:
            raise ResourceError(
                f"PCS node group {ng['name']} is {ng['status']}: {_errors(ng)}",
                hint=f"`fmctl down {ctx.cluster}` and `fmctl up` again",
            )
        pending = None if ng["status"] == "ACTIVE" else str(ng["status"])
        # CLUSTER/GROUP, as find_owned names it: PCS ids are unique only within a cluster.
        aws_id = f"{ng['clusterId']}/{ng['id']}"
        return Observed(NodeGroupOut(str(ng["id"])), live, aws_id, pending)

    def read(
        self, ctx: Context, rid: str, params: NodeGroupParams
    ) -> Observed[NodeGroupOut, NodeGroupLive] | None:
        mine = [
            ng
            for ng in self.groups(ctx)
            if _tags(ctx, ng["arn"]).get(RESOURCE_TAG) == rid
            and ng["status"] not in ("DELETING", "DELETED")
        ]
        if not mine:
            return None
        observed = [self._observed(ctx, ng) for ng in mine]
        # While a replacement runs two groups carry the pool's tag: the one with the
        # instance type the spec asks for is the pool.
        for candidate in observed:
            if candidate.live.instance_type == params.instance_type:
                return candidate
        return observed[0]

    def desired(
        self,
        ctx: Context,
        rid: str,
        params: NodeGroupParams,
        observed: Observed[NodeGroupOut, NodeGroupLive],
    ) -> NodeGroupLive:
        lt_id = ctx.resolve(params.launch_template)
        lt_version = ctx.resolve(params.launch_template, "version")
        template = UNKNOWN if UNKNOWN in (lt_id, lt_version) else f"{lt_id}:{lt_version}"
        subnets = (
            frozenset(ctx.resolve(s) for s in params.subnets)
            if all(ctx.known(s) for s in params.subnets)
            else UNKNOWN
        )
        role_arn = ctx.resolve(params.instance_profile, "arn")
        return NodeGroupLive(
            params.ami if isinstance(params.ami, str) else ctx.resolve(params.ami),
            subnets,
            params.purchase_option,
            template,
            UNKNOWN if role_arn is UNKNOWN else profile_arn(str(role_arn)),
            params.min_count,
            params.max_count,
            params.instance_type,
            params.ssh_key,
            params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def renamed(self, params: NodeGroupParams, observed: Observed[Any, Any]) -> NodeGroupParams:
        """A replacement's params: a name of its own (unique per cluster), stable for what
        it is made of, so a re-run finds it."""
        digest = hashlib.sha256(params.instance_type.encode()).hexdigest()[:5]
        base = (
            params.group_name.rsplit("-g", 1)[0]
            if "-g" in params.group_name
            else (params.group_name)
        )
        return dataclasses.replace(params, group_name=f"{base[:18]}-g{digest}")

    def _image(self, ctx: Context, params: NodeGroupParams) -> str:
        return params.ami if isinstance(params.ami, str) else ctx.get(params.ami).id

    def _body(self, ctx: Context, params: NodeGroupParams) -> dict[str, Any]:
        template = ctx.get(params.launch_template)
        body: dict[str, Any] = {
            "amiId": self._image(ctx, params),
            "subnetIds": [ctx.get(s).id for s in params.subnets],
            "purchaseOption": params.purchase_option,
            "customLaunchTemplate": {"id": template.id, "version": str(template.version)},
            "iamInstanceProfileArn": profile_arn(ctx.get(params.instance_profile).arn),
            "scalingConfiguration": {
                "minInstanceCount": params.min_count,
                "maxInstanceCount": params.max_count,
            },
        }
        if params.ssh_key:
            body["sshKeyName"] = params.ssh_key
        return body

    def create(self, ctx: Context, rid: str, params: NodeGroupParams) -> NodeGroupOut:
        pcs = _client(ctx)
        cluster = ctx.get(params.cluster).id
        request = {
            **self._body(ctx, params),
            "clusterIdentifier": cluster,
            "computeNodeGroupName": params.group_name,
            "instanceConfigs": [{"instanceType": params.instance_type}],
            "clientToken": ctx.token(f"{rid}/{cluster}/{params.group_name}"),
            "tags": params.tags.at_creation(),
        }
        try:
            item = _patiently(
                ctx,
                rid,
                f"node group {params.group_name}",
                lambda: pcs.create_compute_node_group(**request)["computeNodeGroup"],
            )
        except Exception as exc:
            if error_code(exc) != "ConflictException":
                raise
            item = self._by_name(ctx, cluster, params.group_name)
        return self._active(ctx, rid, cluster, str(item["id"]), self.create_seconds)

    def _by_name(self, ctx: Context, cluster: str, name: str) -> dict[str, Any]:
        item = unless_gone(
            lambda: _client(ctx).get_compute_node_group(
                clusterIdentifier=cluster, computeNodeGroupIdentifier=name
            )["computeNodeGroup"]
        )
        if item is None or _tags(ctx, item["arn"]).get(OWNER_TAG) != ctx.cluster:
            raise ResourceError(f"PCS node group {name} exists and is not {ctx.cluster}'s")
        return dict(item)

    def _active(
        self, ctx: Context, rid: str, cluster: str, group: str, expected: float
    ) -> NodeGroupOut:
        pcs = _client(ctx)

        def probe() -> NodeGroupOut | None:
            ng = unless_gone(
                lambda: pcs.get_compute_node_group(
                    clusterIdentifier=cluster, computeNodeGroupIdentifier=group
                )["computeNodeGroup"]
            )
            if ng is None:
                raise ResourceError(f"PCS node group {group} disappeared while being made")
            if ng["status"] in _FAILED:
                raise ResourceError(f"PCS node group {ng['name']} is {ng['status']}: {_errors(ng)}")
            return NodeGroupOut(group) if ng["status"] == "ACTIVE" else None

        ctx.forget("pcs:node-groups")
        return ctx.wait_until(f"PCS node group {group} to be ACTIVE", probe, expected, 3600, rid)

    def wait(
        self,
        ctx: Context,
        rid: str,
        params: NodeGroupParams,
        observed: Observed[NodeGroupOut, NodeGroupLive],
    ) -> NodeGroupOut:
        cluster = ctx.get(params.cluster).id
        return self._active(ctx, rid, cluster, observed.outputs.id, self.create_seconds)

    def update(
        self,
        ctx: Context,
        rid: str,
        params: NodeGroupParams,
        observed: Observed[NodeGroupOut, NodeGroupLive],
        changes: Sequence[FieldChange],
    ) -> NodeGroupOut:
        paths = {c.path.split(".")[0] for c in changes} - {"tags"}
        cluster = ctx.get(params.cluster).id
        group = observed.outputs.id
        if paths:
            ctx.emit(rid, "updating", ", ".join(sorted(paths)))
            body = self._body(ctx, params)
            _patiently(
                ctx,
                rid,
                f"the update of node group {group}",
                lambda: _client(ctx).update_compute_node_group(
                    clusterIdentifier=cluster,
                    computeNodeGroupIdentifier=group,
                    clientToken=ctx.token(f"{rid}/update/{group}/{_digest(body)}"),
                    **body,
                ),
            )
            self._active(ctx, rid, cluster, group, self.update_seconds)
        arn = self._arn(ctx, cluster, group)
        if arn:
            _retag(ctx, arn, changes)
        return observed.outputs

    def _arn(self, ctx: Context, cluster: str, group: str) -> str | None:
        ng = unless_gone(
            lambda: _client(ctx).get_compute_node_group(
                clusterIdentifier=cluster, computeNodeGroupIdentifier=group
            )["computeNodeGroup"]
        )
        return None if ng is None else str(ng["arn"])

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(
                _tags(ctx, ng["arn"]).get(RESOURCE_TAG) or "?", f"{ng['clusterId']}/{ng['id']}"
            )
            for ng in self.groups(ctx)
            if ng["status"] != "DELETED"
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        pcs = _client(ctx)
        cluster, group = self._split(ctx, owned)
        if cluster is None:
            return
        self._hand_over(ctx, owned, cluster, group)
        _patiently(
            ctx,
            owned.resource,
            f"the deletion of node group {group}",
            lambda: unless_gone(
                lambda: pcs.delete_compute_node_group(
                    clusterIdentifier=cluster,
                    computeNodeGroupIdentifier=group,
                    clientToken=ctx.token(f"{owned.resource}/delete/{cluster}/{group}"),
                )
            ),
        )

        def absent() -> bool | None:
            ng = unless_gone(
                lambda: pcs.get_compute_node_group(
                    clusterIdentifier=cluster, computeNodeGroupIdentifier=group
                )["computeNodeGroup"]
            )
            if ng is not None and ng["status"] == "DELETE_FAILED":
                raise ResourceError(f"PCS node group {group} is DELETE_FAILED: {_errors(ng)}")
            return True if ng is None or ng["status"] == "DELETED" else None

        ctx.wait_until(
            f"PCS node group {group} to be deleted",
            absent,
            self.delete_seconds,
            3600,
            owned.resource,
        )
        ctx.forget("pcs:node-groups")
        sweep(ctx, owned.resource, NODE_GROUP_TAG, group)

    def _hand_over(self, ctx: Context, owned: Owned, cluster: str, group: str) -> None:
        """Queues on ``group`` move to its replacement (another ACTIVE group with its logical
        id), or leave it when they have other groups: PCS deletes no node group a queue still
        uses (DeleteComputeNodeGroup: "You must delete all queues associated with the compute
        node group first"). A queue on nothing else is deleted before it by its own step."""
        pcs = _client(ctx)
        ctx.forget("pcs:node-groups")
        heirs = [
            str(ng["id"])
            for ng in self.groups(ctx)
            if ng["clusterId"] == cluster
            and ng["id"] != group
            and ng["status"] == "ACTIVE"
            and _tags(ctx, ng["arn"]).get(RESOURCE_TAG) == owned.resource
        ]
        ctx.forget("pcs:queues")
        for q in PcsQueue().queues(ctx):
            ids = [
                c.get("computeNodeGroupId") for c in q.get("computeNodeGroupConfigurations") or []
            ]
            if q["clusterId"] != cluster or group not in ids:
                continue
            kept = [i for i in ids if i != group] + heirs[:1]
            if not kept:
                continue
            ctx.emit(owned.resource, "updating", f"queue {q['name']} onto {', '.join(kept)}")
            move = functools.partial(
                pcs.update_queue,
                clusterIdentifier=cluster,
                queueIdentifier=q["id"],
                computeNodeGroupConfigurations=[{"computeNodeGroupId": i} for i in kept],
                clientToken=ctx.token(f"{owned.resource}/hand-over/{q['id']}/{kept}"),
            )
            _patiently(
                ctx, owned.resource, f"moving queue {q['name']} off node group {group}", move
            )
            PcsQueue()._active(ctx, owned.resource, cluster, str(q["id"]), 60.0)

    @staticmethod
    def _split(ctx: Context, owned: Owned) -> tuple[str | None, str]:
        """(cluster, group) of an owned id: CLUSTER/GROUP from teardown by tags, or the group
        alone from a plan (the cluster's own then)."""
        if "/" in owned.id:
            cluster, group = owned.id.split("/", 1)
            return cluster, group
        return cluster_id(ctx), owned.id


# -- queues --------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueOut:
    """A queue by id."""

    id: str


@dataclass(frozen=True)
class QueueParams:
    """CreateQueue, as ``render`` writes it in pcs/queues/NAME.json."""

    cluster: Ref[PcsClusterOut]
    queue_name: str
    node_groups: tuple[Ref[NodeGroupOut], ...]
    tags: DesiredTags


@dataclass(frozen=True)
class QueueLive:
    """What fmctl manages of a queue."""

    node_groups: Any
    tags: Tags


class PcsQueue(Kind[QueueParams, QueueOut, QueueLive]):
    """A queue (Slurm partition) on its pool's node group."""

    name, params, outputs = "pcs-queue", QueueParams, QueueOut
    create_seconds, update_seconds, delete_seconds = 30.0, 30.0, 30.0
    policy = policies(
        node_groups=Policy(How.UPDATE, "UpdateQueue computeNodeGroupConfigurations"),
    )

    def queues(self, ctx: Context) -> list[dict[str, Any]]:
        return _children(ctx, "pcs:queues", "list_queues", "queues", "get_queue", "queueIdentifier")

    def read(
        self, ctx: Context, rid: str, params: QueueParams
    ) -> Observed[QueueOut, QueueLive] | None:
        mine = [
            q
            for q in self.queues(ctx)
            if _tags(ctx, q["arn"]).get(RESOURCE_TAG) == rid and q["status"] != "DELETING"
        ]
        if not mine:
            return None
        q = mine[0]
        if q["status"] in _FAILED:
            raise ResourceError(f"PCS queue {q['name']} is {q['status']}: {_errors(q)}")
        live = QueueLive(
            frozenset(
                c.get("computeNodeGroupId") for c in q.get("computeNodeGroupConfigurations") or []
            ),
            _tags(ctx, q["arn"]),
        )
        pending = None if q["status"] == "ACTIVE" else str(q["status"])
        return Observed(QueueOut(str(q["id"])), live, f"{q['clusterId']}/{q['id']}", pending)

    def desired(
        self, ctx: Context, rid: str, params: QueueParams, observed: Observed[QueueOut, QueueLive]
    ) -> QueueLive:
        groups = (
            frozenset(ctx.resolve(g) for g in params.node_groups)
            if all(ctx.known(g) for g in params.node_groups)
            else UNKNOWN
        )
        return QueueLive(groups, params.tags.resolve(observed.live.tags.get(CREATED_TAG)))

    def _configs(self, ctx: Context, params: QueueParams) -> list[dict[str, str]]:
        return [{"computeNodeGroupId": ctx.get(g).id} for g in params.node_groups]

    def create(self, ctx: Context, rid: str, params: QueueParams) -> QueueOut:
        pcs = _client(ctx)
        cluster = ctx.get(params.cluster).id
        request = {
            "clusterIdentifier": cluster,
            "queueName": params.queue_name,
            "computeNodeGroupConfigurations": self._configs(ctx, params),
            "clientToken": ctx.token(f"{rid}/{cluster}"),
            "tags": params.tags.at_creation(),
        }
        item = _patiently(
            ctx, rid, f"queue {params.queue_name}", lambda: pcs.create_queue(**request)["queue"]
        )
        return self._active(ctx, rid, cluster, str(item["id"]), self.create_seconds)

    def _active(
        self, ctx: Context, rid: str, cluster: str, queue: str, expected: float
    ) -> QueueOut:
        pcs = _client(ctx)

        def probe() -> QueueOut | None:
            q = unless_gone(
                lambda: pcs.get_queue(clusterIdentifier=cluster, queueIdentifier=queue)["queue"]
            )
            if q is None:
                raise ResourceError(f"PCS queue {queue} disappeared while being made")
            if q["status"] in _FAILED:
                raise ResourceError(f"PCS queue {q['name']} is {q['status']}: {_errors(q)}")
            return QueueOut(queue) if q["status"] == "ACTIVE" else None

        ctx.forget("pcs:queues")
        return ctx.wait_until(f"PCS queue {queue} to be ACTIVE", probe, expected, 3600, rid)

    def wait(
        self, ctx: Context, rid: str, params: QueueParams, observed: Observed[QueueOut, QueueLive]
    ) -> QueueOut:
        cluster = ctx.get(params.cluster).id
        return self._active(ctx, rid, cluster, observed.outputs.id, self.create_seconds)

    def update(
        self,
        ctx: Context,
        rid: str,
        params: QueueParams,
        observed: Observed[QueueOut, QueueLive],
        changes: Sequence[FieldChange],
    ) -> QueueOut:
        cluster = ctx.get(params.cluster).id
        queue = observed.outputs.id
        pcs = _client(ctx)
        if any(c.path == "node_groups" for c in changes):
            ctx.emit(rid, "updating", "node groups")
            configs = self._configs(ctx, params)
            _patiently(
                ctx,
                rid,
                f"the update of queue {queue}",
                lambda: pcs.update_queue(
                    clusterIdentifier=cluster,
                    queueIdentifier=queue,
                    computeNodeGroupConfigurations=configs,
                    clientToken=ctx.token(f"{rid}/update/{queue}/{_digest(configs)}"),
                ),
            )
            self._active(ctx, rid, cluster, queue, self.update_seconds)
        q = unless_gone(
            lambda: pcs.get_queue(clusterIdentifier=cluster, queueIdentifier=queue)["queue"]
        )
        if q is not None:
            _retag(ctx, str(q["arn"]), changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(
                _tags(ctx, q["arn"]).get(RESOURCE_TAG) or "?", f"{q['clusterId']}/{q['id']}"
            )
            for q in self.queues(ctx)
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        pcs = _client(ctx)
        cluster, queue = PcsNodeGroup._split(ctx, owned)
        if cluster is None:
            return
        _patiently(
            ctx,
            owned.resource,
            f"the deletion of queue {queue}",
            lambda: unless_gone(
                lambda: pcs.delete_queue(
                    clusterIdentifier=cluster,
                    queueIdentifier=queue,
                    clientToken=ctx.token(f"{owned.resource}/delete/{cluster}/{queue}"),
                )
            ),
        )

        def absent() -> bool | None:
            q = unless_gone(lambda: pcs.get_queue(clusterIdentifier=cluster, queueIdentifier=queue))
            return True if q is None else None

        ctx.wait_until(
            f"PCS queue {queue} to be deleted", absent, self.delete_seconds, 3600, owned.resource
        )
        ctx.forget("pcs:queues")
