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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.aws import error_code
from provisioner.resources.base import FieldChange, How, Kind, Observed, Owned, Policy, policies
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


def control_plane_group(cluster: str) -> str:
    """The group EKS writes a cluster's control-plane logs to."""
    return f"/aws/eks/{cluster}/cluster"


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

    def _groups(self, ctx: Context) -> list[tuple[dict[str, Any], Tags]]:
        """The groups under ``/aws/eks/CLUSTER/`` with their tags."""

        def load() -> list[tuple[dict[str, Any], Tags]]:
            logs = ctx.aws.client("logs")
            out = []
            prefix = control_plane_group(ctx.cluster).rsplit("/", 1)[0] + "/"
            pages = logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=prefix)
            for page in pages:
                for group in page.get("logGroups", []):
                    arn = group.get("logGroupArn") or str(group["arn"]).removesuffix(":*")
                    tags = logs.list_tags_for_resource(resourceArn=arn).get("tags", {})
                    out.append((group, Tags.of(tags)))
            return out

        return ctx.cached("logs:groups", load)

    def read(
        self, ctx: Context, rid: str, params: LogGroupParams
    ) -> Observed[LogGroupOut, LogGroupLive] | None:
        for group, tags in self._groups(ctx):
            if group["logGroupName"] == params.group_name and ctx.ours(tags.as_dict()):
                live = LogGroupLive(group.get("retentionInDays"), tags)
                return Observed(LogGroupOut(params.group_name), live, params.group_name)
        return None

    def desired(
        self,
        ctx: Context,
        rid: str,
        params: LogGroupParams,
        observed: Observed[LogGroupOut, LogGroupLive],
    ) -> LogGroupLive:
        return LogGroupLive(
            params.retention_days, params.tags.resolve(observed.live.tags.get(CREATED_TAG))
        )

    def create(self, ctx: Context, rid: str, params: LogGroupParams) -> LogGroupOut:
        logs = ctx.aws.client("logs")
        tags = params.tags.at_creation()
        try:
            logs.create_log_group(logGroupName=params.group_name, tags=tags)
        except Exception as exc:
            if error_code(exc) != "ResourceAlreadyExistsException":
                raise
            # Ours from a run that lost the answer, or EKS's own (untagged) for this name:
            # adopt either; a group another owner tagged is not fmctl's to take.
            ctx.forget("logs:groups")
            found = next(
                (t for g, t in self._groups(ctx) if g["logGroupName"] == params.group_name),
                None,
            )
            owner = found.get(OWNER_TAG) if found is not None else None
            if owner is None and not self._eks_made_it(ctx):
                raise Foreign(
                    f"log group {params.group_name} exists and is not fmctl cluster "
                    f"{ctx.cluster}'s: it holds the logs of an earlier EKS cluster of that name",
                    hint="keep them elsewhere and delete the group (aws logs "
                    f"delete-log-group --log-group-name {params.group_name}), or pick "
                    "another cluster name",
                ) from exc
            if owner not in (None, ctx.cluster):
                raise Foreign(
                    f"log group {params.group_name} belongs to fmctl cluster {owner}",
                    hint="a cluster of this name writes its control-plane logs there; "
                    "delete the group or pick another cluster name",
                ) from exc
            arn = self._arn(ctx, params.group_name)
            logs.tag_resource(resourceArn=arn, tags=tags)
        logs.put_retention_policy(
            logGroupName=params.group_name, retentionInDays=params.retention_days
        )
        return LogGroupOut(params.group_name)

    def _eks_made_it(self, ctx: Context) -> bool:
        """True when this cluster's own EKS control plane exists: an untagged group of its
        name is then the one EKS made for it (a cluster fmctl made before it made the group
        first), not an earlier cluster's."""
        try:
            cluster = ctx.aws.client("eks").describe_cluster(name=ctx.cluster)["cluster"]
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return False
            raise
        return bool(cluster.get("tags", {}).get(OWNER_TAG) == ctx.cluster)

    def _arn(self, ctx: Context, group_name: str) -> str:
        groups = ctx.aws.client("logs").describe_log_groups(logGroupNamePrefix=group_name)
        group = next(g for g in groups["logGroups"] if g["logGroupName"] == group_name)
        return str(group.get("logGroupArn") or str(group["arn"]).removesuffix(":*"))

    def update(
        self,
        ctx: Context,
        rid: str,
        params: LogGroupParams,
        observed: Observed[LogGroupOut, LogGroupLive],
        changes: Sequence[FieldChange],
    ) -> LogGroupOut:
        logs = ctx.aws.client("logs")
        for change in changes:
            if change.path == "retention_days":
                logs.put_retention_policy(
                    logGroupName=observed.id, retentionInDays=params.retention_days
                )
            if change.path == "tags":
                add, remove = tag_updates(change.before, change.after)
                arn = self._arn(ctx, observed.id)
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
        try:
            ctx.aws.client("logs").delete_log_group(logGroupName=owned.id)
        except Exception as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise

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
        return (
            f"kept log group {owned.id} (its retention still applies; delete it with "
            f"`aws logs delete-log-group --log-group-name {owned.id} --region {ctx.region}`)"
        )
