"""Capacity Blocks that end cleanly. On Slurm (ParallelCluster and PCS), before a block's end,
its pool's partition is wound down on the cluster's controller host (the head node, or a PCS
login node) by ``slurm/lib/block-end.sh``: a maintenance reservation over its nodes to the
block's end (no new job starts there, nothing launches into the block) and the running jobs
signalled once to checkpoint. On EKS, the T-60 schedule taints the block's node group
``fmctl.dev/capacity-block-ending=CR_ID:NoSchedule`` (UpdateNodegroupConfig: "the
Kubernetes taints to be applied to the nodes in the node group after the update", the EKS
API reference): no new pod lands there, and Kueue admits no new job to them (its topology
scheduling leaves out nodes with a taint the pods do not tolerate: Kueue 0.19,
``pkg/cache/scheduler/scheduling_simulator_default.go``); running ones go on until EKS itself
scales the group to zero at T-40 (the EKS User Guide, "Create a managed node group with
Capacity Blocks for ML"), so no rule is needed there. A second T-60 schedule asks the
running pods to checkpoint: Run Command of ``templates/nodes/gpu-signal.sh`` on the block's
nodes, which signals every process on their GPUs. It names them by the tag EC2 Auto Scaling
puts on every instance it launches, ``aws:autoscaling:groupName`` (the Auto Scaling
Developer Guide, "Tagging Auto Scaling Groups and Amazon EC2 Instances": "Auto Scaling
automatically tags each one with the group name"), whose value is the group EKS runs the
node group as (DescribeNodegroup's ``resources.autoScalingGroups``): one tag key, as a Run
Command target takes, and a group name is the account's and region's alone, so no other
cluster's "gpu" node group is reached. A block extended after T-60 loses the taint on the
next `up` (the node group's taints are the spec's). Two triggers on Slurm, both kept by AWS
with no fmctl running:

- T-60 min, fmctl's own: a one-time EventBridge Scheduler schedule per block, in the group
  ``fmctl-NAME-blocks``, whose universal target calls ``ssm:SendCommand``
  (AWS-RunShellScript) on the controller host. Its time follows the block's EndDate
  (DescribeCapacityReservations): a block extended moves it on the next `up`.
- T-40 min, EC2's: "Forty minutes before your Capacity Block reservation ends" EC2 sends the
  expiration warning to EventBridge (EC2 User Guide, "Monitor Capacity Blocks using
  EventBridge"; its two versions name the detail-type "Capacity Block Expiration Warning"
  and "Capacity Block Reservation Expiration Warning", so the rule matches both, and the
  block by ``detail.capacity-reservation-id``). A rule per block, ``fmctl-NAME-HEX`` (the
  block id's hex digits: at most 64 characters, PutRule's limit), sends it to Run Command
  (the target ``arn:aws:ssm:REGION::document/AWS-RunShellScript``, its Input the document's
  parameters, RunCommandParameters naming the instance: the EventBridge API reference, and
  Terraform's aws_cloudwatch_event_target Run Command example).

Whichever runs first acts; the other finds the reservation and changes nothing. Both name
the controller host as Run Command targets it (SendCommand's and a RunCommandTarget's
``Targets``: ``InstanceIds``, or one tag key, ``tag:KEY``): on PCS the login node group by
the tag PCS puts on every instance it launches for it (``aws:pcs:compute-node-group-id``),
so a login node PCS replaced is still the one the command reaches, one login node at a time
(``MaxConcurrency`` 1: the second finds the reservation); on ParallelCluster, whose head
node is told apart from the compute nodes only by two tags, the head node's instance id,
read when `up` runs: a head node replaced since is a change the next plan shows.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from provisioner.catalog.pcs import NODE_GROUP_TAG
from provisioner.drivers.aws_errors import Invalid, NotFound
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
from provisioner.resources.eks_asg_tags import asg_of
from provisioner.resources.eks_nodegroup_model import NodegroupOut
from provisioner.resources.errors import Foreign, ResourceError
from provisioner.resources.iam import RoleOut
from provisioner.resources.parallelcluster import PclusterOut
from provisioner.resources.pcs import NodeGroupOut
from provisioner.resources.schedules import (
    UNIVERSAL,
    LiveSchedule,
    ScheduleGroup,
    Timetable,
    at_expression,
    group_policies,
    input_of,
)
from provisioner.resources.ssm_run import bundle, head_node
from provisioner.resources.tags import (
    CREATED_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
    apply_tag_change,
)
from provisioner.shipped import shipped_dir

if TYPE_CHECKING:
    from types_boto3_events.type_defs import DescribeRuleResponseTypeDef

#: fmctl's own trigger: this long before a block's end.
LEAD_SECONDS = 3600
#: The expiration warning's detail-types, as the two versions of the EC2 User Guide give it.
WARNINGS = ("Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning")
#: Run Command's limit for the script's run (the script itself takes seconds).
EXECUTION_TIMEOUT = "600"
#: The taint an EKS block's nodes get at T-60 (its value: the block's id).
BLOCK_TAINT = "fmctl.dev/capacity-block-ending"
#: The tag EC2 Auto Scaling puts on each instance it launches: its group's name.
GROUP_TAG = "aws:autoscaling:groupName"


def group_name(cluster: str) -> str:
    """The schedule group, ``fmctl-NAME-blocks`` (at most 57 characters)."""
    return f"fmctl-{cluster}-blocks"


def rule_name(cluster: str, reservation_id: str) -> str:
    """A block's warning rule, ``fmctl-NAME-HEX`` (cr-0123456789abcdef0: 64 at most)."""
    return f"fmctl-{cluster}-{reservation_id.removeprefix('cr-')}"


@dataclass(frozen=True)
class Block:
    """A pool on a Capacity Block: its Slurm partition (the pool's name), the block, and the
    signal its running jobs get (``none``: no signal)."""

    pool: str
    reservation_id: str
    signal: str
    #: EKS: the pool's managed node group.
    nodegroup: str = ""


@dataclass(frozen=True)
class BlockEndParams:
    """What both triggers need: the schedule group's or the rule's name, the blocks (a rule
    has its one), the controller host's kind of cluster (``pcs`` or ``parallelcluster``: how
    the host is found; ``eks``: no host, the node groups are tainted), the role they run
    as, and ``host``, the resource that makes the host (on EKS, a node group: the order only,
    what is named must exist first). ``nodegroups``: on EKS, every block's node group (their
    Auto Scaling groups are read when the schedules are written)."""

    group_name: str
    role: Ref[RoleOut]
    blocks: tuple[Block, ...]
    provider: str
    host: Ref[NodeGroupOut] | Ref[PclusterOut] | Ref[NodegroupOut]
    tags: DesiredTags
    nodegroups: tuple[Ref[NodegroupOut], ...] = ()


def ends(ctx: Context, blocks: Sequence[Block]) -> dict[str, float | None]:
    """Each block's end (epoch seconds), None for a block gone, expired or not readable
    as a block; one DescribeCapacityReservations per run."""
    ids = sorted({b.reservation_id for b in blocks})

    def load() -> dict[str, float | None]:
        out: dict[str, float | None] = dict.fromkeys(ids)
        try:
            found = ctx.aws.client("ec2").describe_capacity_reservations(CapacityReservationIds=ids)
        except (NotFound, Invalid):
            return out  # the online checks say which, before `up` gets here
        for res in found.get("CapacityReservations", []):
            end = res.get("EndDate")
            if end is not None and res.get("State") not in ("expired", "cancelled", "failed"):
                out[str(res["CapacityReservationId"])] = end.timestamp()
        return out

    return ctx.cached("ec2:block-ends:" + ",".join(ids), load)


def _stripped(path: Path) -> str:
    """A script with its comment lines dropped (Run Command's input through EventBridge is at
    most 8,192 characters: TargetInput in botocore's events model)."""
    lines = path.read_text().splitlines()
    kept = [line for line in lines if not line.lstrip().startswith("#") or line[:2] == "#!"]
    return "\n".join(kept) + "\n"


def _script_files() -> dict[str, str]:
    """block-end.sh and what it sources."""
    lib = shipped_dir("slurm") / "lib"
    return {name: _stripped(lib / name) for name in ("block-end.sh", "slurm-prefix.sh")}


def signal_command(signal: str) -> str:
    """The script Run Command runs on an EKS block's nodes: gpu-signal.sh SIGNAL."""
    script = _stripped(shipped_dir("templates") / "nodes" / "gpu-signal.sh")
    return bundle({"gpu-signal.sh": script}, f'bash "$work/gpu-signal.sh" {shlex.quote(signal)}')


def group_of(ctx: Context, nodegroup: str) -> str:
    """The Auto Scaling group EKS runs the cluster's node group ``nodegroup`` as."""

    def load() -> str:
        described = ctx.aws.client("eks").describe_nodegroup(
            clusterName=ctx.cluster, nodegroupName=nodegroup
        )["nodegroup"]
        found = asg_of(described)
        if found is None:
            raise ResourceError(
                f"node group {nodegroup} has no Auto Scaling group yet: its nodes cannot be "
                "named to Run Command; run `up` again once EKS has made it"
            )
        return found

    return ctx.cached(f"eks:nodegroup-asg:{nodegroup}", load)


def command(blocks: Sequence[Block], when: dict[str, float | None], which: str) -> str:
    """The script Run Command runs: block ``which`` wound down, by the table of ``blocks``
    (the script that runs is the one `up` last wrote, with the end it last read)."""
    arms = []
    for b in sorted(blocks, key=lambda b: b.reservation_id):
        end = when.get(b.reservation_id)
        if end is None:
            continue
        args = [b.pool, str(int(end)), "--block", b.reservation_id, "--signal", b.signal]
        arms.append(f'  {b.reservation_id}) bash "$work/block-end.sh" {shlex.join(args)} ;;')
    dispatch = "\n".join(
        [
            f"case {shlex.quote(which)} in",
            *arms,
            f'  *) echo "block-end: {which} is not a block of this cluster\'s" >&2; exit 1 ;;',
            "esac",
        ]
    )
    return bundle(_script_files(), dispatch)


def targets(ctx: Context, params: BlockEndParams) -> tuple[str, tuple[str, ...]]:
    """Run Command's target of the controller host: (key, values)."""
    if params.provider == "pcs":
        group = ctx.resolve(params.host, "id")
        return f"tag:{NODE_GROUP_TAG}", (str(group),)
    return "InstanceIds", (host(ctx, params),)


def host(ctx: Context, params: BlockEndParams) -> str:
    """The controller host's instance id: ParallelCluster's own answer for its head node
    (describe-cluster's headNode, the cluster's outputs), else found by tags as `fmctl
    check` and the drains find it."""
    if params.provider == "parallelcluster":
        head = ctx.resolve(params.host, "head_node")
        if isinstance(head, str) and head:
            return head
    return ctx.cached(f"block-ends:host:{params.provider}", lambda: head_node(ctx, params.provider))


# -- T-60: the schedules ---------------------------------------------------------------------
class BlockSchedule(ScheduleGroup[BlockEndParams]):
    """One-time schedules that wind each block's pool down an hour before the block ends."""

    name, params = "block-schedule", BlockEndParams
    purpose = "a Capacity Block ends within the hour; wind its pool down"
    policy = group_policies("with its block's end")

    def group_of(self, cluster: str) -> str:
        return group_name(cluster)

    def planned(
        self, ctx: Context, params: BlockEndParams, created: str | None
    ) -> Timetable | None:
        role = ctx.resolve(params.role, "arn")
        refs = (params.host, *params.nodegroups)
        if role is UNKNOWN or any(ctx.resolve(r) is UNKNOWN for r in refs):
            return None
        when = ends(ctx, params.blocks)
        now = time.time()
        out: Timetable = {}
        for b in params.blocks:
            end = when.get(b.reservation_id)
            if end is None or end - LEAD_SECONDS <= now:
                continue  # gone, or inside its last hour: the T-40 rule is what is left
            action, document = self._call(ctx, params, b, when)
            schedule = LiveSchedule(
                f"end-{b.pool}", UNIVERSAL.format(action), input_of(document), str(role)
            )
            out[schedule.name] = (schedule, at_expression(end - LEAD_SECONDS))
            if params.provider == "eks" and b.signal != "none":
                signal = LiveSchedule(
                    f"signal-{b.pool}",
                    UNIVERSAL.format("ssm:sendCommand"),
                    input_of(self._signal(ctx, b)),
                    str(role),
                )
                out[signal.name] = (signal, at_expression(end - LEAD_SECONDS))
        return out

    @staticmethod
    def _signal(ctx: Context, b: Block) -> dict[str, Any]:
        """Run Command of gpu-signal.sh on every node of an EKS block's node group, all at
        once, each node's failure its own (MaxErrors 100%: SendCommand's default, 0, would
        stop the others at the first)."""
        return {
            "DocumentName": "AWS-RunShellScript",
            "Targets": [{"Key": f"tag:{GROUP_TAG}", "Values": [group_of(ctx, b.nodegroup)]}],
            "MaxConcurrency": "100%",
            "MaxErrors": "100%",
            "Comment": f"fmctl {ctx.cluster}: capacity block {b.reservation_id} ends"[:100],
            "Parameters": {
                "commands": [signal_command(b.signal)],
                "executionTimeout": [EXECUTION_TIMEOUT],
            },
        }

    def _call(
        self, ctx: Context, params: BlockEndParams, b: Block, when: dict[str, float | None]
    ) -> tuple[str, dict[str, Any]]:
        """The schedule's call: the node group tainted (EKS), or Run Command of
        block-end.sh on the controller host (Slurm)."""
        if params.provider == "eks":
            taint = {"key": BLOCK_TAINT, "value": b.reservation_id, "effect": "NO_SCHEDULE"}
            return "eks:updateNodegroupConfig", {
                "clusterName": ctx.cluster,
                "nodegroupName": b.nodegroup,
                "taints": {"addOrUpdateTaints": [taint]},
            }
        key, values = targets(ctx, params)
        return "ssm:sendCommand", {
            "DocumentName": "AWS-RunShellScript",
            "Targets": [{"Key": key, "Values": list(values)}],
            "MaxConcurrency": "1",
            "Comment": f"fmctl {ctx.cluster}: capacity block {b.reservation_id} ends"[:100],
            "Parameters": {
                "commands": [command((b,), when, b.reservation_id)],
                "executionTimeout": [EXECUTION_TIMEOUT],
            },
        }

    def notes(self, ctx: Context, params: BlockEndParams, tags: Tags) -> tuple[str, ...]:
        when, now = ends(ctx, params.blocks), time.time()
        then = (
            "EKS scales its node group to zero at T-40"
            if params.provider == "eks"
            else "EC2's T-40 warning winds the pool down"
        )
        return tuple(
            f"capacity block {b.reservation_id} (pool {b.pool}) ends in "
            f"{max(0, int((end - now) // 60))} min: past its T-60 schedule, {then}"
            for b in params.blocks
            if (end := when.get(b.reservation_id)) is not None and end - LEAD_SECONDS <= now
        )


# -- T-40: the rule on EC2's warning ------------------------------------------------------------
@dataclass(frozen=True)
class WarningTarget:
    """The rule's one target: Run Command of ``input`` (the document's parameters) on what
    ``key`` and ``values`` name (``InstanceIds`` or ``tag:KEY``), as ``role``."""

    arn: str
    role: str
    key: str
    values: tuple[str, ...]
    input: str


@dataclass(frozen=True)
class WarningOut:
    """The rule by name."""

    id: str
    arn: str


@dataclass(frozen=True)
class WarningLive:
    """What fmctl manages of the rule."""

    pattern: str
    state: str
    target: WarningTarget | None
    tags: Tags


def pattern(blocks: Sequence[Block]) -> str:
    """The rule's event pattern: EC2's expiration warning for one of these blocks."""
    document = {
        "source": ["aws.ec2"],
        "detail-type": list(WARNINGS),
        "detail": {"capacity-reservation-id": sorted({b.reservation_id for b in blocks})},
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def _canonical(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return text


class BlockWarning(Kind[BlockEndParams, WarningOut, WarningLive]):
    """An EventBridge rule that hears EC2's T-40 warning for one block and winds its pool
    down through Run Command."""

    name, params, outputs = "block-warning", BlockEndParams, WarningOut
    create_seconds, update_seconds, delete_seconds = 2.0, 2.0, 2.0
    policy = policies(
        pattern=Policy(How.UPDATE, "PutRule replaces the event pattern"),
        state=Policy(How.UPDATE, "PutRule enables the rule"),
        target=Policy(How.UPDATE, "PutTargets replaces the target"),
    )
    TARGET_ID: ClassVar[str] = "block-end"

    def _tags(self, ctx: Context, arn: str) -> Tags:
        listed = ctx.aws.client("events").list_tags_for_resource(ResourceARN=arn)
        return Tags.of({t["Key"]: t["Value"] for t in listed.get("Tags", [])})

    def _rule(self, ctx: Context, name: str) -> DescribeRuleResponseTypeDef | None:
        try:
            found = ctx.aws.client("events").describe_rule(Name=name)
        except NotFound:
            return None
        return found

    def read(self, req: Request[BlockEndParams]) -> Observed[WarningOut, WarningLive] | None:
        rule = self._rule(req.ctx, req.params.group_name)
        if rule is None:
            return None
        arn = str(rule["Arn"])
        tags = self._tags(req.ctx, arn)
        if not req.ctx.ours(tags.as_dict()):
            raise Foreign(
                f"EventBridge rule {req.params.group_name} exists and is not fmctl cluster "
                f"{req.ctx.cluster}'s",
                hint="delete it (aws events delete-rule) or pick another cluster name",
            )
        listed = req.ctx.aws.client("events").list_targets_by_rule(Rule=req.params.group_name)
        target = next((t for t in listed.get("Targets", []) if t.get("Id") == self.TARGET_ID), None)
        live = WarningLive(
            _canonical(str(rule.get("EventPattern", ""))),
            str(rule.get("State", "")),
            None if target is None else _target_of(target),
            tags,
        )
        return Observed(WarningOut(req.params.group_name, arn), live, req.params.group_name)

    def _target(self, ctx: Context, params: BlockEndParams) -> WarningTarget:
        role = ctx.resolve(params.role, "arn")
        if role is UNKNOWN or ctx.resolve(params.host) is UNKNOWN:
            return UNKNOWN  # type: ignore[no-any-return]
        block = params.blocks[0]
        text = input_of(
            {
                "commands": [
                    command(params.blocks, ends(ctx, params.blocks), block.reservation_id)
                ],
                "executionTimeout": [EXECUTION_TIMEOUT],
            }
        )
        document = f"arn:aws:ssm:{ctx.region}::document/AWS-RunShellScript"
        key, values = targets(ctx, params)
        return WarningTarget(document, str(role), key, values, text)

    def desired(
        self, req: Request[BlockEndParams], observed: Observed[WarningOut, WarningLive]
    ) -> WarningLive:
        return WarningLive(
            pattern(req.params.blocks),
            "ENABLED",
            self._target(req.ctx, req.params),
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def _put_rule(self, ctx: Context, params: BlockEndParams, tags: DesiredTags | None) -> str:
        body: dict[str, Any] = {
            "Name": params.group_name,
            "EventPattern": pattern(params.blocks),
            "State": "ENABLED",
            "Description": f"fmctl {ctx.cluster}: a Capacity Block ends in 40 minutes",
        }
        if tags is not None:
            body["Tags"] = ctx.tag_list(tags)
        return str(ctx.aws.client("events").put_rule(**body)["RuleArn"])

    def _put_target(self, ctx: Context, params: BlockEndParams) -> None:
        target = self._target(ctx, params)
        done = ctx.aws.client("events").put_targets(
            Rule=params.group_name,
            Targets=[
                {
                    "Id": self.TARGET_ID,
                    "Arn": target.arn,
                    "RoleArn": target.role,
                    "Input": target.input,
                    "RunCommandParameters": {
                        "RunCommandTargets": [{"Key": target.key, "Values": list(target.values)}]
                    },
                }
            ],
        )
        if done.get("FailedEntryCount"):
            failed = done.get("FailedEntries", [{}])[0]
            # PutTargets answers 200 and lists the targets it did not put.
            raise ResourceError(
                f"rule {params.group_name}: PutTargets failed: "
                f"{failed.get('ErrorCode')} {failed.get('ErrorMessage')}",
                hint="the rule has no target: `fmctl up` again puts it",
            )

    def create(self, req: Request[BlockEndParams]) -> WarningOut:
        # PutRule creates or updates by name: a run that lost its answer puts the same rule
        # again; a foreign rule of the name is refused by its tags first.
        found = self._rule(req.ctx, req.params.group_name)
        if found is not None and not req.ctx.ours(self._tags(req.ctx, str(found["Arn"])).as_dict()):
            raise Foreign(
                f"EventBridge rule {req.params.group_name} exists and is not fmctl cluster "
                f"{req.ctx.cluster}'s"
            )
        arn = self._put_rule(req.ctx, req.params, req.params.tags if found is None else None)
        self._put_target(req.ctx, req.params)
        return WarningOut(req.params.group_name, arn)

    def update(
        self,
        req: Request[BlockEndParams],
        observed: Observed[WarningOut, WarningLive],
        changes: Sequence[FieldChange],
    ) -> WarningOut:
        events = req.ctx.aws.client("events")
        paths = {c.path for c in changes}
        if paths & {"pattern", "state"}:
            self._put_rule(req.ctx, req.params, None)
        if any(path.split(".")[0] == "target" for path in paths):
            self._put_target(req.ctx, req.params)
        arn = observed.outputs.arn
        for change in changes:
            if change.path == "tags":
                apply_tag_change(
                    change.after,
                    lambda tags: events.tag_resource(ResourceARN=arn, Tags=tags),
                    lambda keys: events.untag_resource(ResourceARN=arn, TagKeys=keys),
                )
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        events = ctx.aws.client("events")
        out = []
        pages = events.get_paginator("list_rules").paginate(NamePrefix=f"fmctl-{ctx.cluster}-")
        for page in pages:
            for rule in page.get("Rules", []):
                # Another cluster's name may start with this one's: the tags decide.
                tags = self._tags(ctx, str(rule["Arn"]))
                if ctx.ours(tags.as_dict()):
                    out.append(self.owned_item(tags.get(RESOURCE_TAG) or "?", str(rule["Name"])))
        return out

    def delete(self, ctx: Context, owned: Owned) -> None:
        """Remove the rule's targets, then the rule (DeleteRule refuses a rule that has
        targets)."""
        events = ctx.aws.client("events")
        try:
            listed = events.list_targets_by_rule(Rule=owned.id)
            ids = [t["Id"] for t in listed.get("Targets", [])]
            if ids:
                events.remove_targets(Rule=owned.id, Ids=ids)
            events.delete_rule(Name=owned.id)
        except NotFound:
            pass


def _target_of(target: Mapping[str, Any]) -> WarningTarget:
    run = (target.get("RunCommandParameters") or {}).get("RunCommandTargets") or [{}]
    return WarningTarget(
        str(target.get("Arn", "")),
        str(target.get("RoleArn", "")),
        str(run[0].get("Key", "")),
        tuple(str(v) for v in run[0].get("Values") or []),
        _canonical(str(target.get("Input", ""))),
    )
