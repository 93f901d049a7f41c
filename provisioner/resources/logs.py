"""The CloudWatch log group EKS writes the control-plane logs to, made by fmctl first.

EKS sends the log types a cluster enables to ``/aws/eks/NAME/cluster`` (EKS User Guide,
"Send control plane logs to CloudWatch Logs") and creates that group itself when it is
missing: untagged, keeping logs forever, and outside any teardown. fmctl creates it before the
cluster, tagged as the cluster's and with the spec's retention, so EKS uses it and `down`
deletes it after the cluster (``--keep-logs`` releases it instead). The untagged group EKS
made for a cluster fmctl made before it made the group is adopted (it holds that cluster's
logs); one an earlier cluster of the same name left is not fmctl's, and `up` says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provisioner.drivers.aws import Aws
from provisioner.drivers.aws_errors import AlreadyExists, NotFound
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
from provisioner.resources.errors import Foreign
from provisioner.resources.tags import (
    CREATED_TAG,
    FMCTL_PREFIX,
    OWNER_TAG,
    RESOURCE_TAG,
    RETAINED_TAG,
    DesiredTags,
    Tags,
    tag_updates,
)

if TYPE_CHECKING:
    from types_boto3_logs.type_defs import LogGroupTypeDef


def control_plane_group(cluster: str) -> str:
    """The group EKS writes a cluster's control-plane logs to."""
    return f"/aws/eks/{cluster}/cluster"


#: What to do about a control-plane log group another cluster left.
FOREIGN_HINT = (
    "keep those logs elsewhere and delete the group (aws logs delete-log-group "
    "--log-group-name {group}), or pick another cluster name"
)


def _arn_of(group: Mapping[str, Any]) -> str:
    """A described group's ARN (``arn`` ends in ``:*``; ``logGroupArn`` does not)."""
    return str(group.get("logGroupArn") or str(group["arn"]).removesuffix(":*"))


def _group(logs: Any, name: str) -> dict[str, Any] | None:
    """The group of exactly that name, as DescribeLogGroups gives it."""
    listed = logs.describe_log_groups(logGroupNamePrefix=name)["logGroups"]
    return next((g for g in listed if g["logGroupName"] == name), None)


def foreign_holder(aws: Aws, cluster: str) -> str | None:
    """Who else's logs ``/aws/eks/CLUSTER/cluster`` holds, or None when it is missing, this
    cluster's, or the one EKS made (untagged) for this cluster's own control plane, which
    fmctl adopts (a cluster fmctl made before it made the group first)."""
    logs = aws.client("logs")
    found = _group(logs, control_plane_group(cluster))
    if found is None:
        return None
    owner = logs.list_tags_for_resource(resourceArn=_arn_of(found)).get("tags", {}).get(OWNER_TAG)
    if owner == cluster:
        return None
    if owner is not None:
        return f"fmctl cluster {owner}"
    try:
        made = aws.client("eks").describe_cluster(name=cluster)["cluster"]
    except NotFound:
        made = {}
    if made.get("tags", {}).get(OWNER_TAG) == cluster:
        return None
    return f"an earlier EKS cluster named {cluster}"


@dataclass(frozen=True)
class LogGroupOut:
    """A log group by name."""

    id: str


@dataclass(frozen=True)
class LogGroupParams:
    """A log group and how long it keeps events."""

    group_name: str
    retention_days: int
    tags: DesiredTags


@dataclass(frozen=True)
class LogGroupLive:
    """What fmctl manages of a log group."""

    retention_days: int | None
    tags: Tags


class LogGroup(Kind[LogGroupParams, LogGroupOut, LogGroupLive]):
    """A CloudWatch Logs group (the EKS control plane's)."""

    name, params, outputs = "log-group", LogGroupParams, LogGroupOut
    policy = policies(retention_days=Policy(How.UPDATE, "PutRetentionPolicy"))

    def _groups(self, ctx: Context) -> list[tuple[LogGroupTypeDef, Tags]]:
        """The groups under ``/aws/eks/CLUSTER/`` with their tags."""

        def load() -> list[tuple[LogGroupTypeDef, Tags]]:
            logs = ctx.aws.client("logs")
            out = []
            prefix = control_plane_group(ctx.cluster).rsplit("/", 1)[0] + "/"
            pages = logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=prefix)
            for page in pages:
                for group in page.get("logGroups", []):
                    tags = logs.list_tags_for_resource(resourceArn=_arn_of(group)).get("tags", {})
                    out.append((group, Tags.of(tags)))
            return out

        return ctx.cached("logs:groups", load)

    def read(self, req: Request[LogGroupParams]) -> Observed[LogGroupOut, LogGroupLive] | None:
        for group, tags in self._groups(req.ctx):
            if group["logGroupName"] == req.params.group_name and req.ctx.ours(tags.as_dict()):
                live = LogGroupLive(group.get("retentionInDays"), tags)
                return Observed(LogGroupOut(req.params.group_name), live, req.params.group_name)
        return None

    def desired(
        self, req: Request[LogGroupParams], observed: Observed[LogGroupOut, LogGroupLive]
    ) -> LogGroupLive:
        return LogGroupLive(
            req.params.retention_days, req.params.tags.resolve(observed.live.tags.get(CREATED_TAG))
        )

    def create(self, req: Request[LogGroupParams]) -> LogGroupOut:
        logs = req.ctx.aws.client("logs")
        tags = req.params.tags.at_creation()
        try:
            logs.create_log_group(logGroupName=req.params.group_name, tags=tags)
        except AlreadyExists as exc:
            # Ours from a run that lost the answer, or EKS's own (untagged) for this name:
            # adopt either; anyone else's is not fmctl's to take.
            foreign = foreign_holder(req.ctx.aws, req.ctx.cluster)
            if foreign is not None:
                raise Foreign(
                    f"log group {req.params.group_name} exists and is not fmctl cluster "
                    f"{req.ctx.cluster}'s: it holds the control-plane logs of {foreign}",
                    hint=FOREIGN_HINT.format(group=req.params.group_name),
                ) from exc
            arn = self._arn(req.ctx, req.params.group_name)
            logs.tag_resource(resourceArn=arn, tags=tags)
        logs.put_retention_policy(
            logGroupName=req.params.group_name, retentionInDays=req.params.retention_days
        )
        return LogGroupOut(req.params.group_name)

    def _arn(self, ctx: Context, group_name: str) -> str:
        found = _group(ctx.aws.client("logs"), group_name)
        if found is None:
            raise Foreign(f"log group {group_name} is gone")  # deleted under this run
        return _arn_of(found)

    def update(
        self,
        req: Request[LogGroupParams],
        observed: Observed[LogGroupOut, LogGroupLive],
        changes: Sequence[FieldChange],
    ) -> LogGroupOut:
        logs = req.ctx.aws.client("logs")
        for change in changes:
            if change.path == "retention_days":
                logs.put_retention_policy(
                    logGroupName=observed.id, retentionInDays=req.params.retention_days
                )
            if change.path == "tags":
                add, remove = tag_updates(change.before, change.after)
                arn = self._arn(req.ctx, observed.id)
                if add:
                    logs.tag_resource(resourceArn=arn, tags=add)
                if remove:
                    logs.untag_resource(resourceArn=arn, tagKeys=remove)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(tags.get(RESOURCE_TAG) or "?", group["logGroupName"])
            for group, tags in self._groups(ctx)
            if ctx.ours(tags.as_dict())
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        with contextlib.suppress(NotFound):
            ctx.aws.client("logs").delete_log_group(logGroupName=owned.id)

    def release(self, ctx: Context, owned: Owned) -> str:
        """Keep the group (``down --keep-logs``): no longer the cluster's, so nothing of
        fmctl's finds or deletes it again; said with how to delete it later."""
        logs = ctx.aws.client("logs")
        arn = self._arn(ctx, owned.id)
        keys = [k for k, _ in Tags.of(logs.list_tags_for_resource(resourceArn=arn)["tags"]).items]
        logs.untag_resource(
            resourceArn=arn, tagKeys=[k for k in keys if k.startswith(FMCTL_PREFIX)]
        )
        logs.tag_resource(resourceArn=arn, tags={RETAINED_TAG: ctx.cluster})
        # EKS writes a cluster's control-plane logs to /aws/eks/NAME/cluster: while this
        # group is there, `up` refuses a new cluster of the name (the log-group-foreign check).
        return (
            f"kept log group {owned.id} (its retention still applies; until it is deleted, "
            f"`up` refuses a new cluster named {ctx.cluster} in {ctx.region}, whose control "
            f"plane would log into it; delete it with `aws logs delete-log-group "
            f"--log-group-name {owned.id} --region {ctx.region}`)"
        )
