"""The ttl kept by AWS itself: an EventBridge Scheduler schedule group holding one one-time
schedule per node group, each set to the cluster's expiry, that scales its node group to
zero through the scheduler's own API when the ttl passes, whether or not anyone runs
`fmctl gc`. EKS node groups get UpdateNodegroupConfig (size 0), PCS compute node groups
UpdateComputeNodeGroup (0 to 0), ParallelCluster its compute fleet stopped as
`pcluster update-compute-fleet --status STOP_REQUESTED` stops it (the status item in the
cluster's DynamoDB table, which the head node's daemons act on). Stopping instances their
controllers own would only make them relaunch.

EventBridge Scheduler (API 2021-06-30, botocore's model and the User Guide): a schedule
group takes tags, a schedule does not, so the group is what fmctl owns and finds by tag,
and deleting the group deletes its schedules. A universal target
(``arn:aws:scheduler:::aws-sdk:SERVICE:apiAction``) calls that API with the target's Input as
its parameters (the API's member names), under the target's role, which trusts
``scheduler.amazonaws.com``. A one-time schedule is ``at(yyyy-mm-ddThh:mm:ss)`` in
``ScheduleExpressionTimezone``. The expiry is the group's own: its ``fmctl.dev/expires-at``
tag, counted from its creation as every resource's is (``tags.DesiredTags``).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

from provisioner.drivers.aws_errors import Conflict, NotFound
from provisioner.graph.ref import UNKNOWN, Ref
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
from provisioner.resources.iam import RoleOut
from provisioner.resources.pcs import NodeGroupOut, PcsClusterOut
from provisioner.resources.tags import (
    CREATED_TAG,
    EXPIRES_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
    parse_stamp,
    tag_updates,
)

if TYPE_CHECKING:
    from types_boto3_scheduler.type_defs import (
        GetScheduleGroupOutputTypeDef,
        GetScheduleOutputTypeDef,
    )

#: The universal target's ARN for an API call (``service:apiAction``).
UNIVERSAL = "arn:aws:scheduler:::aws-sdk:{}"
#: How often, and how long, the scheduler tries a call that fails (its RetryPolicy; the
#: defaults are 185 attempts over 24 hours, far past the point of a ttl).
RETRY = {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 10}


def group_name(cluster: str) -> str:
    """The cluster's schedule group (names: letters, digits, ``-``, ``_``, ``.``; 64 at most;
    a cluster name is at most 40)."""
    return f"fmctl-{cluster}"


def at_expression(epoch: float) -> str:
    """A one-time schedule's expression (UTC, to the second)."""
    return "at(" + time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + ")"


@dataclass(frozen=True)
class StopCall:
    """One schedule: the API call that brings one node group to zero. ``input`` is the
    call's parameters as canonical JSON; ``{cluster}`` and ``{group}`` in it are filled with
    the ids ``cluster`` and ``group`` point at (PCS's, known once made)."""

    schedule: str
    action: str  # service:apiAction, e.g. eks:updateNodegroupConfig
    input: str
    cluster: Ref[PcsClusterOut] | None = None
    group: Ref[NodeGroupOut] | None = None


@dataclass(frozen=True)
class ExpiryParams:
    """The cluster's expiry schedules: the group, the role they run as, one call each."""

    group_name: str
    role: Ref[RoleOut]
    calls: tuple[StopCall, ...]
    tags: DesiredTags


@dataclass(frozen=True)
class ExpiryOut:
    """The schedule group by name."""

    id: str


@dataclass(frozen=True)
class LiveSchedule:
    """What fmctl manages of one schedule."""

    name: str
    target: str
    input: str
    role_arn: str


@dataclass(frozen=True)
class ExpiryLive:
    """The group's schedules, when they fire, and its tags."""

    at: frozenset[str]
    schedules: frozenset[LiveSchedule]
    tags: Tags


class GroupParams(Protocol):
    """What every schedule group kind's params give: the group, its role, its tags."""

    @property
    def group_name(self) -> str: ...
    @property
    def role(self) -> Ref[RoleOut]: ...
    @property
    def tags(self) -> DesiredTags: ...


GP = TypeVar("GP", bound=GroupParams)
#: A group's schedules as planned: name -> (the schedule, its at() expression).
Timetable = dict[str, tuple[LiveSchedule, str]]


class ScheduleGroup(Kind[GP, ExpiryOut, ExpiryLive]):
    """An EventBridge Scheduler group of fmctl's one-time schedules: found and owned by the
    group's tags, its schedules created, moved and deleted to match ``planned``."""

    outputs = ExpiryOut
    create_seconds, update_seconds, delete_seconds = 3.0, 3.0, 5.0
    #: What each schedule's Description says it does.
    purpose: ClassVar[str] = ""

    def planned(self, ctx: Context, params: GP, created: str | None) -> Timetable | None:
        """The schedules the group must hold (None while a reference is not made yet)."""
        raise NotImplementedError

    def group_of(self, cluster: str) -> str:
        """The group's name for ``cluster`` (find_owned takes that one only)."""
        raise NotImplementedError

    # -- reading ------------------------------------------------------------------------
    def _tags(self, ctx: Context, arn: str) -> Tags:
        listed = ctx.aws.client("scheduler").list_tags_for_resource(ResourceArn=arn)
        return Tags.of({t["Key"]: t["Value"] for t in listed.get("Tags", [])})

    def _group(self, ctx: Context, name: str) -> tuple[GetScheduleGroupOutputTypeDef, Tags] | None:
        try:
            group = ctx.aws.client("scheduler").get_schedule_group(Name=name)
        except NotFound:
            return None
        return group, self._tags(ctx, str(group["Arn"]))

    def _schedules(self, ctx: Context, name: str) -> list[GetScheduleOutputTypeDef]:
        client = ctx.aws.client("scheduler")
        found = []
        for page in client.get_paginator("list_schedules").paginate(GroupName=name):
            for item in page.get("Schedules", []):
                found.append(client.get_schedule(GroupName=name, Name=item["Name"]))
        return found

    def read(self, req: Request[GP]) -> Observed[ExpiryOut, ExpiryLive] | None:
        found = self._group(req.ctx, req.params.group_name)
        if found is None:
            return None
        group, tags = found
        if not req.ctx.ours(tags.as_dict()):
            raise Foreign(
                f"schedule group {req.params.group_name} exists and is not fmctl cluster "
                f"{req.ctx.cluster}'s",
                hint="delete it (aws scheduler delete-schedule-group) or pick another name",
            )
        schedules = self._schedules(req.ctx, req.params.group_name)
        live = ExpiryLive(
            frozenset(str(s.get("ScheduleExpression", "")) for s in schedules),
            frozenset(
                LiveSchedule(
                    str(s["Name"]),
                    str(s["Target"]["Arn"]),
                    str(s["Target"].get("Input", "")),
                    str(s["Target"].get("RoleArn", "")),
                )
                for s in schedules
            ),
            tags,
        )
        state = str(group.get("State", "ACTIVE"))
        pending = None if state == "ACTIVE" else state
        notes = self.notes(req.ctx, req.params, tags)
        return Observed(
            ExpiryOut(req.params.group_name), live, req.params.group_name, pending, notes
        )

    def notes(self, ctx: Context, params: GP, tags: Tags) -> tuple[str, ...]:
        """What the plan says of the group as read (nothing by default)."""
        return ()

    def desired(self, req: Request[GP], observed: Observed[ExpiryOut, ExpiryLive]) -> ExpiryLive:
        created = observed.live.tags.get(CREATED_TAG)
        planned = self.planned(req.ctx, req.params, created)
        if planned is None:
            return ExpiryLive(
                cast(frozenset[str], UNKNOWN),
                cast(frozenset[LiveSchedule], UNKNOWN),
                req.params.tags.resolve(created),
            )
        return ExpiryLive(
            frozenset(at for _, at in planned.values()),
            frozenset(schedule for schedule, _ in planned.values()),
            req.params.tags.resolve(created),
        )

    # -- acting -------------------------------------------------------------------------
    def create(self, req: Request[GP]) -> ExpiryOut:
        client = req.ctx.aws.client("scheduler")
        tags = req.params.tags.at_creation()
        try:
            client.create_schedule_group(
                Name=req.params.group_name,
                Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                ClientToken=f"fmctl-{req.ctx.cluster}-{req.rid}"[:64],
            )
        except Conflict as exc:
            # Made by a run that lost the answer (ours by tag), or someone else's.
            found = self._group(req.ctx, req.params.group_name)
            if found is None or not req.ctx.ours(found[1].as_dict()):
                raise Foreign(
                    f"schedule group {req.params.group_name} exists and is not fmctl cluster "
                    f"{req.ctx.cluster}'s"
                ) from exc
            tags = found[1].as_dict()
        self._put(req.ctx, req.params, tags.get(CREATED_TAG), set())
        return ExpiryOut(req.params.group_name)

    def _put(self, ctx: Context, params: GP, created: str | None, existing: set[str]) -> None:
        """Create or update every planned schedule (``existing``: names already there, or
        found so by a ConflictException); delete the group's others."""
        client = ctx.aws.client("scheduler")
        planned = self.planned(ctx, params, created)
        if planned is None:
            raise ValueError(f"{params.group_name}: a schedule's reference is not made yet")
        for _, (schedule, at) in sorted(planned.items()):
            body: dict[str, Any] = {
                "Name": schedule.name,
                "GroupName": params.group_name,
                "ScheduleExpression": at,
                "ScheduleExpressionTimezone": "UTC",
                "FlexibleTimeWindow": {"Mode": "OFF"},
                "State": "ENABLED",
                "Description": f"fmctl {ctx.cluster}: {self.purpose}",
                "Target": {
                    "Arn": schedule.target,
                    "RoleArn": schedule.role_arn,
                    "Input": schedule.input,
                    "RetryPolicy": RETRY,
                },
            }
            if schedule.name in existing:
                client.update_schedule(**body)
                continue
            try:
                client.create_schedule(
                    **body, ClientToken=f"{params.group_name}-{schedule.name}"[:64]
                )
            except Conflict:
                client.update_schedule(**body)
        for gone in existing - set(planned):
            with contextlib.suppress(NotFound):
                client.delete_schedule(GroupName=params.group_name, Name=gone)

    def update(
        self,
        req: Request[GP],
        observed: Observed[ExpiryOut, ExpiryLive],
        changes: Sequence[FieldChange],
    ) -> ExpiryOut:
        client = req.ctx.aws.client("scheduler")
        paths = {c.path for c in changes}
        if paths & {"at", "schedules"}:
            created = observed.live.tags.get(CREATED_TAG)
            existing = {s.name for s in observed.live.schedules}
            self._put(req.ctx, req.params, created, existing)
        for change in changes:
            if change.path == "tags":
                add, remove = tag_updates(change.before, change.after)
                arn = client.get_schedule_group(Name=observed.id)["Arn"]
                if add:
                    client.tag_resource(
                        ResourceArn=arn, Tags=[{"Key": k, "Value": v} for k, v in add.items()]
                    )
                if remove:
                    client.untag_resource(ResourceArn=arn, TagKeys=remove)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        client = ctx.aws.client("scheduler")
        out = []
        mine = self.group_of(ctx.cluster)
        pages = client.get_paginator("list_schedule_groups").paginate(NamePrefix=mine)
        for page in pages:
            for group in page.get("ScheduleGroups", []):
                if group["Name"] != mine:
                    continue  # another kind's group (fmctl-NAME-blocks), or another cluster's
                tags = self._tags(ctx, str(group["Arn"]))
                if ctx.ours(tags.as_dict()):
                    out.append(self.owned_item(tags.get(RESOURCE_TAG) or "?", group["Name"]))
        return out

    def delete(self, ctx: Context, owned: Owned) -> None:
        """Delete the group and, with it, its schedules (the group goes DELETING first)."""
        client = ctx.aws.client("scheduler")
        with contextlib.suppress(NotFound):
            client.delete_schedule_group(Name=owned.id)
        ctx.wait_until(
            f"schedule group {owned.id} to be deleted",
            lambda: True if self._group(ctx, owned.id) is None else None,
            self.delete_seconds,
            300.0,
            owned.resource,
        )


def group_policies(at: str) -> Mapping[str, Policy]:
    """A schedule group's update policy: each schedule's time moves in place (``at`` says
    to what), and schedules come and go in the group."""
    return policies(
        at=Policy(How.UPDATE, f"UpdateSchedule moves each schedule {at}"),
        schedules=Policy(How.UPDATE, "schedules are created, updated and deleted in the group"),
    )


class Expiry(ScheduleGroup[ExpiryParams]):
    """An EventBridge Scheduler group of one-time schedules that stop the cluster at its
    expiry."""

    name, params = "expiry-schedule", ExpiryParams
    purpose = "the ttl has passed; scale to zero"
    policy = group_policies("to the new expiry")

    def group_of(self, cluster: str) -> str:
        return group_name(cluster)

    def planned(self, ctx: Context, params: ExpiryParams, created: str | None) -> Timetable | None:
        expires = parse_stamp(params.tags.resolve(created).get(EXPIRES_TAG))
        if expires is None:
            raise ValueError("an expiry schedule needs the cluster's ttl")
        role = ctx.resolve(params.role, "arn")
        out: Timetable = {}
        for call in params.calls:
            text = filled(ctx, call)
            if role is UNKNOWN or text is UNKNOWN:
                return None
            schedule = LiveSchedule(call.schedule, UNIVERSAL.format(call.action), text, str(role))
            out[call.schedule] = (schedule, at_expression(expires))
        return out

    def notes(self, ctx: Context, params: ExpiryParams, tags: Tags) -> tuple[str, ...]:
        expires = parse_stamp(tags.get(EXPIRES_TAG))
        if expires is None or expires > time.time():
            return ()
        return (
            f"the cluster's ttl passed at {tags.get(EXPIRES_TAG)}: its expiry schedules "
            "have scaled its node groups to zero; `fmctl gc --expired` deletes it, and `up` "
            "with a longer metadata.ttl brings the node groups back",
        )


def filled(ctx: Context, call: StopCall) -> str:
    """A call's input with the ids it names filled in (``UNKNOWN`` while one is not made)."""
    ids = {"cluster": ctx.resolve(call.cluster), "group": ctx.resolve(call.group)}
    if UNKNOWN in ids.values():
        return UNKNOWN  # type: ignore[no-any-return]
    text = call.input
    for key, value in ids.items():
        if value is not None:
            text = text.replace("{" + key + "}", str(value))
    return text


def input_of(document: dict[str, Any]) -> str:
    """A call's parameters as canonical JSON."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))
