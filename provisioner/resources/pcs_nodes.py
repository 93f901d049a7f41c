"""AWS PCS compute node groups (the login nodes, one per GPU pool, on fmctl's launch
templates); their queues are ``resources.pcs_queues``; see ``resources.pcs``."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.catalog.pcs import NODE_GROUP_TAG
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.render.placeholders import fill
from provisioner.resources import pcs_drain
from provisioner.resources.base import (
    FieldChange,
    How,
    Kind,
    Observed,
    Owned,
    Policy,
    Request,
    policies,
)
from provisioner.resources.context import Context
from provisioner.resources.errors import ResourceError
from provisioner.resources.iam import RoleOut
from provisioner.resources.launch_template import LtOut
from provisioner.resources.network import SubnetOut
from provisioner.resources.pcs import (
    NodeGroupOut,
    PcsAmiOut,
    PcsClusterOut,
    children,
    split_id,
)
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
from provisioner.resources.pcs_queues import PcsQueue
from provisioner.resources.routes import EndpointOut, RouteTableOut
from provisioner.resources.storage import ArtifactsOut
from provisioner.resources.tags import (
    CREATED_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
)


# -- compute node groups -------------------------------------------------------------------
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
    #: instanceHealthChecks as canonical JSON ("": none asked, the login nodes').
    health_checks: str = ""
    #: nodeLifecycleActions as canonical JSON with its placeholders ("": none), and what
    #: fills them (the artifact bucket its scripts are in).
    lifecycle: str = ""
    lifecycle_fills: tuple[tuple[str, Ref[Any], str], ...] = ()
    #: The uploaded scripts the lifecycle actions and the user data fetch: uploaded first.
    artifacts: Ref[ArtifactsOut] | None = None


#: What PCS takes when a NodeLifecycleActions member is left out (botocore's PCS model:
#: NodeLifecycleScript's onError and executionPolicy, NodeLifecycleActions'
#: scriptCachingPolicy).
_SCRIPT_DEFAULTS = {"onError": "TERMINATE", "executionPolicy": "FIRST_BOOT_ONLY"}
_ACTIONS_DEFAULTS = {"scriptCachingPolicy": "CACHE_ONCE"}


def _present(value: Any) -> Any:
    """A member with its empty members left out (nested: a scriptSource's too)."""
    if isinstance(value, dict):
        return {k: _present(v) for k, v in value.items() if v not in (None, [], "", {})}
    return value


def canonical_actions(actions: dict[str, Any] | None) -> str:
    """nodeLifecycleActions as one text to compare, asked or read: defaults spelled out, empty
    members dropped ("": no script at any stage)."""
    stages = {
        stage: [{**_SCRIPT_DEFAULTS, **_present(script)} for script in scripts]
        for stage, scripts in ((actions or {}).get("stages") or {}).items()
        if scripts
    }
    if not stages:
        return ""
    policy = {k: (actions or {}).get(k) or v for k, v in _ACTIONS_DEFAULTS.items()}
    return json.dumps({"stages": stages, **policy}, sort_keys=True)


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
    health_checks: str = ""
    lifecycle: str = ""


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
        health_checks=Policy(
            How.UPDATE, "UpdateComputeNodeGroup instanceHealthChecks (replaces all of them)"
        ),
        lifecycle=Policy(
            How.UPDATE,
            "UpdateComputeNodeGroup nodeLifecycleActions: PCS drains and replaces the group's "
            "running nodes",
        ),
    )

    def groups(self, ctx: Context) -> list[dict[str, Any]]:
        return children(
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
            tags_of(ctx, ng["arn"]),
            json.dumps(ng["instanceHealthChecks"], sort_keys=True)
            if ng.get("instanceHealthChecks")
            else "",
            canonical_actions(ng.get("nodeLifecycleActions")),
        )
        if ng["status"] in FAILED:
            raise ResourceError(
                f"PCS node group {ng['name']} is {ng['status']}: {errors_of(ng)}",
                hint=f"`fmctl down {ctx.cluster}` and `fmctl up` again",
            )
        pending = None if ng["status"] == "ACTIVE" else str(ng["status"])
        # CLUSTER/GROUP, as find_owned names it: PCS ids are unique only within a cluster.
        aws_id = f"{ng['clusterId']}/{ng['id']}"
        return Observed(NodeGroupOut(str(ng["id"])), live, aws_id, pending)

    def read(self, req: Request[NodeGroupParams]) -> Observed[NodeGroupOut, NodeGroupLive] | None:
        mine = [
            ng
            for ng in self.groups(req.ctx)
            if tags_of(req.ctx, ng["arn"]).get(RESOURCE_TAG) == req.rid
            and ng["status"] not in ("DELETING", "DELETED")
        ]
        if not mine:
            return None
        observed = [self._observed(req.ctx, ng) for ng in mine]
        # While a replacement runs two groups carry the pool's tag: the one with the
        # instance type the spec asks for is the pool.
        for candidate in observed:
            if candidate.live.instance_type == req.params.instance_type:
                return candidate
        return observed[0]

    def diff(
        self, req: Request[NodeGroupParams], observed: Observed[NodeGroupOut, NodeGroupLive]
    ) -> list[FieldChange]:
        """A group scaled in says which Slurm nodes `up` drains first; new lifecycle actions,
        that PCS replaces the group's nodes ("Configuration changes drain and replace
        existing nodes": the PCS User Guide, node lifecycle actions)."""
        going = observed.live.max_count - req.params.max_count
        out = [
            dataclasses.replace(
                c,
                note="PCS drains the group's running nodes (their jobs end first) and "
                "replaces them",
            )
            if c.path == "lifecycle"
            else c
            for c in super().diff(req, observed)
        ]
        if going <= 0:
            return out
        nodes = pcs_drain.nodelist(
            req.params.group_name, req.params.max_count + 1, req.params.max_count + going
        )
        note = pcs_drain.plan_note(nodes)
        return [dataclasses.replace(c, note=note) if c.path == "max_count" else c for c in out]

    def desired(
        self, req: Request[NodeGroupParams], observed: Observed[NodeGroupOut, NodeGroupLive]
    ) -> NodeGroupLive:
        lt_id = req.ctx.resolve(req.params.launch_template)
        lt_version = req.ctx.resolve(req.params.launch_template, "version")
        template = UNKNOWN if UNKNOWN in (lt_id, lt_version) else f"{lt_id}:{lt_version}"
        subnets = (
            frozenset(req.ctx.resolve(s) for s in req.params.subnets)
            if all(req.ctx.known(s) for s in req.params.subnets)
            else UNKNOWN
        )
        role_arn = req.ctx.resolve(req.params.instance_profile, "arn")
        return NodeGroupLive(
            req.params.ami if isinstance(req.params.ami, str) else req.ctx.resolve(req.params.ami),
            subnets,
            req.params.purchase_option,
            template,
            UNKNOWN if role_arn is UNKNOWN else profile_arn(str(role_arn)),
            req.params.min_count,
            req.params.max_count,
            req.params.instance_type,
            req.params.ssh_key,
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
            req.params.health_checks,
            self._actions(req.ctx, req.params),
        )

    @staticmethod
    def _actions(ctx: Context, params: NodeGroupParams) -> Any:
        """The lifecycle actions with their placeholders filled, canonical (``UNKNOWN`` until
        what fills them exists)."""
        if not params.lifecycle:
            return ""
        values = {name: ctx.resolve(ref, attr) for name, ref, attr in params.lifecycle_fills}
        if any(v is UNKNOWN for v in values.values()):
            return UNKNOWN
        filled = fill(params.lifecycle, {k: str(v) for k, v in values.items()})
        return canonical_actions(json.loads(filled))

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
        if params.health_checks:
            body["instanceHealthChecks"] = json.loads(params.health_checks)
        actions = self._actions(ctx, params)
        if actions:
            body["nodeLifecycleActions"] = json.loads(actions)
        return body

    def create(self, req: Request[NodeGroupParams]) -> NodeGroupOut:
        pcs = client(req.ctx)
        cluster = req.ctx.get(req.params.cluster).id
        request = {
            **self._body(req.ctx, req.params),
            "clusterIdentifier": cluster,
            "computeNodeGroupName": req.params.group_name,
            "instanceConfigs": [{"instanceType": req.params.instance_type}],
            "clientToken": req.ctx.token(f"{req.rid}/{cluster}/{req.params.group_name}"),
            "tags": req.params.tags.at_creation(),
        }
        # The token names the cluster, the pool and the group: a retry after a lost answer,
        # or a re-run after a crash, is the same request, and PCS answers it with the group
        # it made. The group's name is the cluster's own (PCS scopes names to a cluster),
        # so ConflictException only ever means "not now" (patiently).
        item = patiently(
            req.ctx,
            req.rid,
            f"node group {req.params.group_name}",
            lambda: pcs.create_compute_node_group(**request)["computeNodeGroup"],
        )
        return self._active(req.ctx, req.rid, cluster, str(item["id"]), self.create_seconds)

    def _active(
        self, ctx: Context, rid: str, cluster: str, group: str, expected: float
    ) -> NodeGroupOut:
        pcs = client(ctx)

        def probe() -> NodeGroupOut | None:
            ng = unless_gone(
                lambda: pcs.get_compute_node_group(
                    clusterIdentifier=cluster, computeNodeGroupIdentifier=group
                )["computeNodeGroup"]
            )
            if ng is None:
                raise ResourceError(f"PCS node group {group} disappeared while being made")
            if ng["status"] in FAILED:
                raise ResourceError(
                    f"PCS node group {ng['name']} is {ng['status']}: {errors_of(ng)}"
                )
            return NodeGroupOut(group) if ng["status"] == "ACTIVE" else None

        ctx.forget("pcs:node-groups")
        return ctx.wait_until(f"PCS node group {group} to be ACTIVE", probe, expected, 3600, rid)

    def wait(
        self, req: Request[NodeGroupParams], observed: Observed[NodeGroupOut, NodeGroupLive]
    ) -> NodeGroupOut:
        cluster = req.ctx.get(req.params.cluster).id
        return self._active(req.ctx, req.rid, cluster, observed.outputs.id, self.create_seconds)

    def update(
        self,
        req: Request[NodeGroupParams],
        observed: Observed[NodeGroupOut, NodeGroupLive],
        changes: Sequence[FieldChange],
    ) -> NodeGroupOut:
        paths = {c.path.split(".")[0] for c in changes} - {"tags"}
        cluster = req.ctx.get(req.params.cluster).id
        group = observed.outputs.id
        going = observed.live.max_count - req.params.max_count
        if req.ctx.drain is not None and going > 0 and "max_count" in paths:
            # The group's Slurm nodes are numbered up to its maximum: the top ones go.
            nodes = pcs_drain.nodelist(
                req.params.group_name, req.params.max_count + 1, req.params.max_count + going
            )
            pcs_drain.drain(
                req.ctx,
                req.rid,
                nodes,
                req.ctx.drain,
                f"node group {req.params.group_name} scaled in",
            )
        if paths:
            req.ctx.emit(req.rid, "updating", ", ".join(sorted(paths)))
            body = self._body(req.ctx, req.params)
            if "lifecycle" in paths and "nodeLifecycleActions" not in body:
                # Left out, an update keeps the group's scripts: no stage says none.
                body["nodeLifecycleActions"] = {"stages": {}}
            patiently(
                req.ctx,
                req.rid,
                f"the update of node group {group}",
                lambda: client(req.ctx).update_compute_node_group(
                    clusterIdentifier=cluster,
                    computeNodeGroupIdentifier=group,
                    clientToken=req.ctx.token(f"{req.rid}/update/{group}/{digest(body)}"),
                    **body,
                ),
            )
            self._active(req.ctx, req.rid, cluster, group, self.update_seconds)
        arn = self._arn(req.ctx, cluster, group)
        if arn:
            retag(req.ctx, arn, changes)
        return observed.outputs

    def _arn(self, ctx: Context, cluster: str, group: str) -> str | None:
        ng = unless_gone(
            lambda: client(ctx).get_compute_node_group(
                clusterIdentifier=cluster, computeNodeGroupIdentifier=group
            )["computeNodeGroup"]
        )
        return None if ng is None else str(ng["arn"])

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(
                tags_of(ctx, ng["arn"]).get(RESOURCE_TAG) or "?", f"{ng['clusterId']}/{ng['id']}"
            )
            for ng in self.groups(ctx)
            if ng["status"] != "DELETED"
        ]

    def before_delete(self, ctx: Context, owned: Owned) -> None:
        cluster, group = split_id(ctx, owned)
        if cluster is None:
            return
        if ctx.drain is not None:  # `up` takes the group away: its jobs leave first
            pcs_drain.drain_group(ctx, owned.resource, cluster, group, ctx.drain)
        self._hand_over(ctx, owned, cluster, group)

    def delete(self, ctx: Context, owned: Owned) -> None:
        pcs = client(ctx)
        cluster, group = split_id(ctx, owned)
        if cluster is None:
            return
        patiently(
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
                raise ResourceError(f"PCS node group {group} is DELETE_FAILED: {errors_of(ng)}")
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
        pcs = client(ctx)
        ctx.forget("pcs:node-groups")
        heirs = [
            str(ng["id"])
            for ng in self.groups(ctx)
            if ng["clusterId"] == cluster
            and ng["id"] != group
            and ng["status"] == "ACTIVE"
            and tags_of(ctx, ng["arn"]).get(RESOURCE_TAG) == owned.resource
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
            patiently(ctx, owned.resource, f"moving queue {q['name']} off node group {group}", move)
            PcsQueue()._active(ctx, owned.resource, cluster, str(q["id"]), 60.0)
