"""The compute side of an EKS cluster: launch templates and managed node groups.

What may change in place is EKS's and EC2's (UpdateNodegroupConfig: scaling, labels, taints,
update config, node auto repair; UpdateNodegroupVersion: the Kubernetes version and the
launch template version, as a rolling update; CreateLaunchTemplateVersion). A node group's
AMI type, capacity type, instance type, subnets and role are fixed at creation: changing one
replaces the group blue/green — the new group is made and ACTIVE before the old one is
deleted, and EKS cordons and drains the old nodes as it deletes them (respecting pod
disruption budgets).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from provisioner.catalog import autoscaler
from provisioner.catalog.eks_repair import UNVERIFIED_TAINT
from provisioner.graph.ref import UNKNOWN
from provisioner.resources import eks_asg_tags as asg_tags
from provisioner.resources import eks_drain, eks_nodes_plan
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
from provisioner.resources.eks import cluster_ours
from provisioner.resources.eks_api import created_or_found, eks_retag, health, unless_gone
from provisioner.resources.eks_nodegroup_model import (
    NodegroupLive,
    NodegroupOut,
    NodegroupParams,
    NodeRepair,
    Scaling,
)
from provisioner.resources.eks_upgrade import instance_type_of, scale
from provisioner.resources.errors import ResourceError
from provisioner.resources.kube_api import close, connect
from provisioner.resources.tags import CREATED_TAG, OWNER_TAG, RESOURCE_TAG, Tags

if TYPE_CHECKING:
    from types_boto3_eks.type_defs import NodegroupTypeDef

_FIXED = "fixed at creation (CreateNodegroup): the pool is replaced blue/green"


class Nodegroup(Kind[NodegroupParams, NodegroupOut, NodegroupLive]):
    """A managed node group: the system group, or one per GPU pool."""

    name, params, outputs = "eks-nodegroup", NodegroupParams, NodegroupOut
    create_seconds, update_seconds, delete_seconds = 300.0, 600.0, 300.0
    #: A config update (scaling, labels, taints): new instances boot and join, about as long
    #: as a group's creation takes them; a version update replaces every node (update_seconds).
    config_seconds = 240.0
    create_before_delete = True
    policy = policies(
        ami_type=Policy(How.REPLACE, f"the AMI type is {_FIXED}"),
        capacity_type=Policy(How.REPLACE, f"the capacity type is {_FIXED}"),
        instance_type=Policy(How.REPLACE, f"the instance type is {_FIXED}"),
        subnets=Policy(How.REPLACE, f"the subnets are {_FIXED}"),
        node_role=Policy(How.REPLACE, f"the node role is {_FIXED}"),
        scaling=Policy(How.UPDATE, "UpdateNodegroupConfig scalingConfig"),
        labels=Policy(How.UPDATE, "UpdateNodegroupConfig labels"),
        taints=Policy(How.UPDATE, "UpdateNodegroupConfig taints"),
        max_unavailable=Policy(How.UPDATE, "UpdateNodegroupConfig updateConfig"),
        repair=Policy(How.UPDATE, "UpdateNodegroupConfig nodeRepairConfig"),
        version=Policy(How.UPDATE, "UpdateNodegroupVersion: a rolling update of the nodes"),
        asg_tags=Policy(
            How.UPDATE, "CreateOrUpdateTags / DeleteTags on the group's Auto Scaling group"
        ),
        launch_template=Policy(
            How.UPDATE, "UpdateNodegroupVersion to the new template version: a rolling update"
        ),
    )

    def _groups(self, ctx: Context) -> list[NodegroupTypeDef]:
        """Every node group of the cluster carrying its tag (one list, one describe each)."""

        def load() -> list[NodegroupTypeDef]:
            if not cluster_ours(ctx):
                return []
            eks = ctx.aws.client("eks")
            out = []
            for name in eks.list_nodegroups(clusterName=ctx.cluster)["nodegroups"]:
                found = unless_gone(
                    functools.partial(
                        eks.describe_nodegroup, clusterName=ctx.cluster, nodegroupName=name
                    )
                )
                ng = found["nodegroup"] if found else None
                if ng is not None and (ng.get("tags") or {}).get(OWNER_TAG) == ctx.cluster:
                    out.append(ng)
            return out

        return ctx.cached("eks:nodegroups", load)

    def described(self, ctx: Context) -> list[NodegroupTypeDef]:
        """DescribeNodegroup of each of the cluster's node groups fmctl made (read once per
        context)."""
        return self._groups(ctx)

    def _observed(
        self, ctx: Context, ng: Mapping[str, Any], tagged: bool = False
    ) -> Observed[NodegroupOut, NodegroupLive]:
        """``tagged``: the spec wants tags on the group's Auto Scaling group (autoscaled, or
        the verify gate replacing); they are read then, or when the group still carries the
        autoscaler's GPU label or the gate's taint (its tags may have to go). Other clusters
        make no Auto Scaling call."""
        scaling = ng.get("scalingConfig") or {}
        labelled = autoscaler.GPU_LABEL in (ng.get("labels") or {}) or any(
            t.get("key") == UNVERIFIED_TAINT for t in ng.get("taints") or []
        )
        asg = asg_tags.asg_of(ng) if tagged or labelled else None
        template = ng.get("launchTemplate") or {}
        live = NodegroupLive(
            str(ng.get("amiType", "")),
            str(ng.get("capacityType", "")),
            instance_type_of(ctx, ng),
            frozenset(ng.get("subnets", [])),
            ng.get("nodeRole"),
            Scaling(
                int(scaling.get("minSize", 0)),
                int(scaling.get("maxSize", 0)),
                int(scaling.get("desiredSize", 0)),
            ),
            frozenset((ng.get("labels") or {}).items()),
            frozenset((t["key"], t.get("value", ""), t["effect"]) for t in ng.get("taints") or []),
            int((ng.get("updateConfig") or {}).get("maxUnavailable", 1)),
            str(ng.get("version", "")),
            f"{template['id']}:{template.get('version')}" if template.get("id") else None,
            Tags.of(ng.get("tags") or {}),
            NodeRepair.of(ng.get("nodeRepairConfig")),
            asg_tags.of_groups(ctx, self._groups(ctx)).get(asg, frozenset())
            if asg
            else frozenset(),
        )
        status = str(ng["status"])
        if status in ("CREATE_FAILED", "DELETE_FAILED", "DEGRADED"):
            raise ResourceError(
                f"node group {ng['nodegroupName']} is {status}: {health(ng)}",
                hint=f"`fmctl down {ctx.cluster}` and `fmctl up` again",
            )
        pending = None if status == "ACTIVE" else status
        name = str(ng["nodegroupName"])
        return Observed(NodegroupOut(name), live, name, pending)

    def read(self, req: Request[NodegroupParams]) -> Observed[NodegroupOut, NodegroupLive] | None:
        mine = [
            ng
            for ng in self._groups(req.ctx)
            if (ng.get("tags") or {}).get(RESOURCE_TAG) == req.rid
        ]
        mine = [ng for ng in mine if ng["status"] != "DELETING"]
        if not mine:
            return None
        observed = [self._observed(req.ctx, ng, bool(req.params.asg_tags)) for ng in mine]
        # During a blue/green replacement two groups carry the pool's tag: the one that
        # already has what the spec asks for is the pool; the other is on its way out.
        for candidate in observed:
            want = self.desired(req, candidate)
            fixed = ("ami_type", "capacity_type", "instance_type")
            if all(getattr(want, f) == getattr(candidate.live, f) for f in fixed):
                return candidate
        named = [o for o in observed if o.id == req.params.nodegroup_name]
        return (named or observed)[0]

    def desired(
        self, req: Request[NodegroupParams], observed: Observed[NodegroupOut, NodegroupLive]
    ) -> NodegroupLive:
        template = None
        if req.params.launch_template is not None:
            lt_id = req.ctx.resolve(req.params.launch_template)
            lt_version = req.ctx.resolve(req.params.launch_template, "version")
            template = UNKNOWN if UNKNOWN in (lt_id, lt_version) else f"{lt_id}:{lt_version}"
        subnets = (
            frozenset(req.ctx.resolve(s) for s in req.params.subnets)
            if all(req.ctx.known(s) for s in req.params.subnets)
            else UNKNOWN
        )
        scaling = req.params.scaling
        if req.params.autoscaled:
            # The Cluster Autoscaler owns the desired size: `up` keeps it, within the bounds.
            now = observed.live.scaling.desired_size
            scaling = dataclasses.replace(
                scaling, desired_size=min(max(now, scaling.min_size), scaling.max_size)
            )
        return NodegroupLive(
            req.params.ami_type,
            req.params.capacity_type,
            req.params.instance_type
            or (req.params.instance_types[0] if req.params.instance_types else None),
            subnets,
            req.ctx.resolve(req.params.node_role, "arn"),
            scaling,
            frozenset(req.params.labels),
            frozenset((t.key, t.value, t.effect) for t in req.params.taints),
            req.params.max_unavailable,
            req.params.version,
            template,
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
            req.params.repair,
            frozenset(req.params.asg_tags),
        )

    def diff(
        self, req: Request[NodegroupParams], observed: Observed[NodegroupOut, NodegroupLive]
    ) -> list[FieldChange]:
        """The changes, with what each does to the group's nodes (``eks_nodes_plan``)."""
        return eks_nodes_plan.said(req.ctx, req.params, observed, super().diff(req, observed))

    def displaces(self, ctx: Context, owned: Owned) -> str | None:
        """The pool's pods, which `up` drains before the group goes."""
        from provisioner.resources.eks import EksCluster

        cluster = EksCluster().describe(ctx)
        if cluster is None or cluster.get("status") != "ACTIVE":
            return None
        api = connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])
        try:
            nodes, pods = eks_drain.affected(api, owned.id)
        finally:
            close(api)
        return (
            f"up first drains its {nodes} node(s) ({pods} pod(s) to move, their disruption "
            "budgets respected, for at most compute.drain.timeout)"
        )

    def renamed(self, params: NodegroupParams, observed: Observed[Any, Any]) -> NodegroupParams:
        """The params of a replacement: a name of its own (EKS names are unique per
        cluster), stable for what it is made of, so a re-run finds it."""
        fixed = f"{params.ami_type}/{params.capacity_type}/{params.instance_type}"
        fixed += f"/{params.instance_types}"
        digest = hashlib.sha256(fixed.encode()).hexdigest()[:5]
        base = (
            params.nodegroup_name.rsplit("-g", 1)[0]
            if "-g" in params.nodegroup_name
            else (params.nodegroup_name)
        )
        name = f"{base}-g{digest}"
        if name == observed.id:
            name = f"{base}-g{hashlib.sha256((fixed + '/again').encode()).hexdigest()[:5]}"
        return dataclasses.replace(params, nodegroup_name=name[:63])

    def create(self, req: Request[NodegroupParams]) -> NodegroupOut:
        eks = req.ctx.aws.client("eks")
        request: dict[str, Any] = {
            "clusterName": req.ctx.cluster,
            "nodegroupName": req.params.nodegroup_name,
            "amiType": req.params.ami_type,
            "capacityType": req.params.capacity_type,
            "scalingConfig": {
                "minSize": req.params.scaling.min_size,
                "maxSize": req.params.scaling.max_size,
                "desiredSize": req.params.scaling.desired_size,
            },
            "subnets": [req.ctx.get(s).id for s in req.params.subnets],
            "nodeRole": req.ctx.get(req.params.node_role).arn,
            "labels": dict(req.params.labels),
            "updateConfig": {"maxUnavailable": req.params.max_unavailable},
            "nodeRepairConfig": req.params.repair.request(),
            "version": req.params.version,
            "tags": req.params.tags.at_creation(),
        }
        if req.params.taints:
            request["taints"] = [
                {"key": t.key, "value": t.value, "effect": t.effect} for t in req.params.taints
            ]
        if req.params.instance_types:
            request["instanceTypes"] = list(req.params.instance_types)
        if req.params.launch_template is not None:
            template = req.ctx.get(req.params.launch_template)
            request["launchTemplate"] = {"id": template.id, "version": str(template.version)}

        def again() -> NodegroupOut | None:
            ng = unless_gone(
                lambda: eks.describe_nodegroup(
                    clusterName=req.ctx.cluster, nodegroupName=req.params.nodegroup_name
                )["nodegroup"]
            )
            if ng is None or (ng.get("tags") or {}).get(OWNER_TAG) != req.ctx.cluster:
                return None
            return NodegroupOut(req.params.nodegroup_name)

        created_or_found(
            lambda: eks.create_nodegroup(**request, clientRequestToken=req.ctx.token(req.rid)),
            again,
        )
        made = self._active(req.ctx, req.rid, req.params.nodegroup_name, self.create_seconds)
        if req.params.asg_tags:
            asg_tags.retag(
                req.ctx, req.rid, req.params.nodegroup_name, req.params.asg_tags, frozenset()
            )
        return made

    def _active(self, ctx: Context, rid: str, name: str, expected: float) -> NodegroupOut:
        eks = ctx.aws.client("eks")

        def probe() -> NodegroupOut | None:
            ng = unless_gone(
                lambda: eks.describe_nodegroup(clusterName=ctx.cluster, nodegroupName=name)[
                    "nodegroup"
                ]
            )
            if ng is None:
                raise ResourceError(f"node group {name} disappeared while it was being made")
            if ng["status"] in ("CREATE_FAILED", "DEGRADED"):
                raise ResourceError(f"node group {name} is {ng['status']}: {health(ng)}")
            return NodegroupOut(name) if ng["status"] == "ACTIVE" else None

        return ctx.wait_until(f"node group {name} to be ACTIVE", probe, expected, 3600, rid)

    def wait(
        self, req: Request[NodegroupParams], observed: Observed[NodegroupOut, NodegroupLive]
    ) -> NodegroupOut:
        return self._active(req.ctx, req.rid, observed.id, self.create_seconds)

    @staticmethod
    def _config_change(
        params: NodegroupParams, live: NodegroupLive, paths: set[str]
    ) -> dict[str, Any]:
        """The UpdateNodegroupConfig request for what changed (empty: nothing to send)."""
        config: dict[str, Any] = {}
        if "scaling" in paths:
            config["scalingConfig"] = {
                "minSize": params.scaling.min_size,
                "maxSize": params.scaling.max_size,
                "desiredSize": params.scaling.desired_size,
            }
        if "labels" in paths:
            want = dict(params.labels)
            config["labels"] = {
                "addOrUpdateLabels": {k: v for k, v in want.items() if (k, v) not in live.labels},
                "removeLabels": sorted({k for k, _ in live.labels} - set(want)),
            }
        if "taints" in paths:
            want_taints = {(t.key, t.value, t.effect) for t in params.taints}
            config["taints"] = {
                "addOrUpdateTaints": [
                    {"key": k, "value": v, "effect": e} for k, v, e in sorted(want_taints)
                ],
                "removeTaints": [
                    {"key": k, "value": v, "effect": e}
                    for k, v, e in sorted(live.taints - want_taints)
                    if k not in {t[0] for t in want_taints}
                ],
            }
        if "max_unavailable" in paths:
            config["updateConfig"] = {"maxUnavailable": params.max_unavailable}
        if "repair" in paths:
            config["nodeRepairConfig"] = params.repair.request()
        return config

    def update(
        self,
        req: Request[NodegroupParams],
        observed: Observed[NodegroupOut, NodegroupLive],
        changes: Sequence[FieldChange],
    ) -> NodegroupOut:
        eks = req.ctx.aws.client("eks")
        paths = {c.path.split(".")[0] for c in changes}
        if "scaling" in paths and req.ctx.drain is not None:
            self._scale_in(req.ctx, req.rid, req.params, observed)
        config = self._config_change(req.params, observed.live, paths)
        if config:
            req.ctx.emit(req.rid, "updating", ", ".join(sorted(config)))
            eks.update_nodegroup_config(
                clusterName=req.ctx.cluster, nodegroupName=observed.id, **config
            )
            self._active(req.ctx, req.rid, observed.id, self.config_seconds)
        version: dict[str, Any] = {}
        stopped = any(c.how == How.STOP for c in changes) and bool(
            paths & set(eks_nodes_plan.ROLLING)
        )
        if stopped:
            # No surge room: no nodes to roll, then the new version, then the nodes back.
            self._scale_to(
                req.ctx, req.rid, observed.id, Scaling(0, req.params.scaling.max_size, 0)
            )
        if "launch_template" in paths and req.params.launch_template is not None:
            template = req.ctx.get(req.params.launch_template)
            version["launchTemplate"] = {"id": template.id, "version": str(template.version)}
        if "version" in paths:
            version["version"] = req.params.version
        if version:
            req.ctx.emit(req.rid, "updating", "rolling update: " + ", ".join(sorted(version)))
            started = eks.update_nodegroup_version(
                clusterName=req.ctx.cluster, nodegroupName=observed.id, **version
            )
            self._active(req.ctx, req.rid, observed.id, self.update_seconds)
            self._succeeded(req.ctx, observed.id, str(started["update"]["id"]))
        if stopped:
            self._scale_to(req.ctx, req.rid, observed.id, req.params.scaling)
        if "tags" in paths:
            arn = eks.describe_nodegroup(clusterName=req.ctx.cluster, nodegroupName=observed.id)[
                "nodegroup"
            ]["nodegroupArn"]
            eks_retag(req.ctx, arn, changes)
        if "asg_tags" in paths:
            live = observed.live.asg_tags
            held = live if isinstance(live, frozenset) else frozenset()
            asg_tags.retag(req.ctx, req.rid, observed.id, req.params.asg_tags, held)
        return observed.outputs

    def _scale_in(
        self,
        ctx: Context,
        rid: str,
        params: NodegroupParams,
        observed: Observed[NodegroupOut, NodegroupLive],
    ) -> None:
        """Fewer nodes: the ones that go are picked, drained and ended by `up` itself
        (``eks_drain``), before EKS is told the new size."""
        live, want = observed.live.scaling, params.scaling
        if ctx.drain is None or want.desired_size >= live.desired_size:
            return
        cluster = ctx.get(params.cluster)
        api = connect(ctx, cluster.endpoint, cluster.ca)
        try:
            eks_drain.scale_in(
                ctx,
                rid,
                observed.id,
                api,
                (live.min_size, live.max_size, live.desired_size),
                (want.min_size, want.max_size, want.desired_size),
                ctx.drain,
            )
        finally:
            close(api)

    def _succeeded(self, ctx: Context, name: str, update: str) -> None:
        """A node group is ACTIVE again after a failed update too (EKS leaves the old nodes):
        the update's own status says whether it happened (DescribeUpdate)."""
        found = ctx.aws.client("eks").describe_update(
            name=ctx.cluster, nodegroupName=name, updateId=update
        )["update"]
        if found.get("status") == "Failed":
            said = "; ".join(
                f"{e.get('errorCode')}: {e.get('errorMessage')}" for e in found.get("errors") or []
            )
            raise ResourceError(
                f"the update of node group {name} failed: {said or 'no reason given'}",
                hint="`fmctl status` shows the node group; on a full Capacity Block a rolling "
                "update has no room for its new node",
            )

    def _scale_to(self, ctx: Context, rid: str, name: str, scaling: Scaling) -> None:
        scale(ctx, rid, name, scaling.min_size, scaling.max_size, scaling.desired_size)

    def outputs_after(
        self, observed: Observed[NodegroupOut, NodegroupLive], changes: Sequence[FieldChange]
    ) -> Any:
        """What dependents see once the planned update ran: nodes that changed (the stack
        checks them all again), unless only tags change."""
        if all(c.path in ("tags", "asg_tags") for c in changes):
            return observed.outputs
        return NodegroupOut(UNKNOWN)

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item((ng.get("tags") or {}).get(RESOURCE_TAG, "?"), ng["nodegroupName"])
            for ng in self._groups(ctx)
        ]

    def _drain_all(self, ctx: Context, owned: Owned) -> None:
        """A pool removed (or replaced blue/green) in `up`: every node drained before EKS
        deletes the group (it would give each five minutes)."""
        from provisioner.resources.eks import EksCluster

        cluster = EksCluster().describe(ctx)
        if ctx.drain is None or cluster is None or cluster.get("status") != "ACTIVE":
            return
        api = connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])
        try:
            leaving = eks_drain.everyone(api, owned.id)
            eks_drain.drain(ctx, owned.resource, api, leaving, ctx.drain)
        finally:
            close(api)

    def before_delete(self, ctx: Context, owned: Owned) -> None:
        if ctx.drain is not None:  # `up` takes a pool away: its work leaves first
            self._drain_all(ctx, owned)

    def delete(self, ctx: Context, owned: Owned) -> None:
        eks = ctx.aws.client("eks")
        gone = unless_gone(
            lambda: eks.delete_nodegroup(clusterName=ctx.cluster, nodegroupName=owned.id)
        )
        if gone is None:
            return

        def absent() -> bool | None:
            ng = unless_gone(
                lambda: eks.describe_nodegroup(clusterName=ctx.cluster, nodegroupName=owned.id)
            )
            return True if ng is None else None

        ctx.wait_until(
            f"node group {owned.id} to be deleted",
            absent,
            self.delete_seconds,
            3600,
            owned.resource,
        )
