"""The Auto Scaling groups behind the sandbox's EKS managed node groups.

EKS runs each managed node group as an EC2 Auto Scaling group in the account (the node
group's ``resources.autoScalingGroups``), and what scales a group in by picking its
instances, as the Kubernetes Cluster Autoscaler does, calls that group directly:
``TerminateInstanceInAutoScalingGroup`` with ``ShouldDecrementDesiredCapacity`` (the EC2
Auto Scaling API reference: the instance is terminated and, when decremented, not replaced;
without it the group launches a replacement). The desired capacity never goes below the
group's minimum (the reference: decrementing would violate it, a ValidationError), so a
caller lowers the node group's minimum first. The node group reports the group's desired
size as its own.

Tags on such a group (``CreateOrUpdateTags``, ``DeleteTags``: what fmctl puts on a pool the
Cluster Autoscaler sizes) are kept with the node group and listed by
``DescribeAutoScalingGroups``. ``SetDesiredCapacity`` within the group's minimum and
maximum (the reference: else a ValidationError) sets the node group's desired size, and
the new instances join after they boot; the Cluster Autoscaler's stand-in
(``eks_autoscaler``) calls it.

Their instances are not moto's: ``instances`` gives them, with the tags EC2 gives each
instance a node group launches: its launch template's ``instance`` TagSpecifications and
``aws:autoscaling:groupName``, the group's name ("When you launch instances in an Auto
Scaling group, Auto Scaling automatically tags each one with the group name": the Auto
Scaling Developer Guide, "Tagging Auto Scaling Groups and Amazon EC2 Instances"), so that
SSM Run Command (``ssm_agent``) can name them by tag and IAM judge the tags.

A replacement is not there at once either: ``TerminateInstanceInAutoScalingGroup`` without
the decrement ends the instance (its node leaves) and the group launches another, which is
``Pending`` in the group and joins its cluster after it boots, as SetDesiredCapacity's do
(the reference: "Auto Scaling launches a new instance to replace it"; a launch is not a
join).

Served here for those groups only (``DescribeAutoScalingGroups`` by name, the tags, the
desired capacity and the termination); every other Auto Scaling call is moto's. Answers are
the query protocol's XML in the 2011-01-01 namespace, as botocore parses them.
"""

from __future__ import annotations

import time
import uuid
from xml.sax.saxutils import escape

from fmctl_sandbox import protocol as p
from fmctl_sandbox.eks_model import EksError, Item, node_slots, template_data
from fmctl_sandbox.eks_repair import Eks

Answer = tuple[int, dict[str, str], bytes]
NS = "http://autoscaling.amazonaws.com/doc/2011-01-01/"
ACTIONS = (
    "DescribeAutoScalingGroups",
    "TerminateInstanceInAutoScalingGroup",
    "CreateOrUpdateTags",
    "DeleteTags",
    "SetDesiredCapacity",
)
#: A new instance boots and joins its cluster (as a node auto repair replacement does).
BOOT_SECONDS = 300.0


def _groups(eks: Eks, region: str) -> dict[str, Item]:
    """Auto Scaling group name -> its node group, for the live node groups of ``region``."""
    out = {}
    for (r, _, _), item in eks.nodegroups.items():
        if r != region or item.gone_at is not None:
            continue
        for group in (item.data.get("resources") or {}).get("autoScalingGroups", []):
            out[str(group["name"])] = item
    return out


def handles(eks: Eks, call: p.Call) -> bool:
    """True when ``call`` is about a node group's Auto Scaling group (or one of its
    instances)."""
    if call.service != "autoscaling" or call.action not in ACTIONS:
        return False
    groups = _groups(eks, call.region)
    if call.action == "DescribeAutoScalingGroups":
        names = p.indexed(call.params, "AutoScalingGroupNames.member")
        return bool(names) and all(n in groups for n in names)
    if call.action in ("CreateOrUpdateTags", "DeleteTags"):
        named = [t["ResourceId"] for t in _tag_params(call.params)]
        return bool(named) and all(n in groups for n in named)
    if call.action == "SetDesiredCapacity":
        return call.params.get("AutoScalingGroupName", "") in groups
    instance = call.params.get("InstanceId", "")
    return any(instance in _instances(call.region, item) for item in groups.values())


def _tag_params(params: dict[str, str]) -> list[dict[str, str]]:
    """``Tags.member.N.{ResourceId,ResourceType,Key,Value,PropagateAtLaunch}``."""
    out, i = [], 1
    while f"Tags.member.{i}.Key" in params:
        prefix = f"Tags.member.{i}."
        out.append({k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)})
        i += 1
    return out


def tags_of(item: Item) -> dict[str, str]:
    """The tags put on a node group's Auto Scaling group."""
    return dict(item.data.get("_asg_tags") or {})


def set_desired(eks: Eks, region: str, name: str, desired: int) -> str | None:
    """SetDesiredCapacity of the node group's Auto Scaling group ``name``: None, or the
    ValidationError's message. The instances it adds join after they boot."""
    item = _groups(eks, region).get(name)
    if item is None:
        return f"AutoScalingGroup name not found - no such group: {name}"
    scaling = item.data["scalingConfig"]
    if not scaling["minSize"] <= desired <= scaling["maxSize"]:
        return (
            f"New SetDesiredCapacity value {desired} is "
            + ("below min" if desired < scaling["minSize"] else "above max")
            + f" value {scaling['minSize' if desired < scaling['minSize'] else 'maxSize']} for "
            "the AutoScalingGroup."
        )
    growing = desired > scaling["desiredSize"]
    scaling["desiredSize"] = desired
    if growing:
        item.data["_joining_at"] = time.monotonic() + BOOT_SECONDS * eks.scale
    else:
        eks.sync_nodes(region, item.data)  # an Auto Scaling group scaled in ends its newest
    return None


def join_booted(eks: Eks, now: float) -> None:
    """Instances added by SetDesiredCapacity, and replacements launched for terminated
    ones, that have booted join their clusters."""
    for (region, _, _), item in eks.nodegroups.items():
        if item.gone_at is not None:
            continue
        at = item.data.get("_joining_at")
        booting: dict[str, float] = item.data.get("_booting") or {}
        booted = [instance for instance, ready in booting.items() if now >= ready]
        for instance in booted:
            del booting[instance]
        if at is not None and now >= at:
            item.data.pop("_joining_at")
        elif not booted:
            continue
        eks.sync_nodes(region, item.data)


def booting(item: Item) -> dict[str, float]:
    """A group's replacement instances still booting: instance id -> when it joins."""
    return dict(item.data.get("_booting") or {})


#: The tag EC2 Auto Scaling puts on each instance it launches.
GROUP_TAG = "aws:autoscaling:groupName"


def instances(eks: Eks, region: str) -> dict[str, dict[str, str]]:
    """Every live node group's instances in ``region``, with their tags (call under the
    shims' lock)."""
    out: dict[str, dict[str, str]] = {}
    for name, item in _groups(eks, region).items():
        try:
            template = template_data(eks.account, region, item.data.get("launchTemplate")) or {}
        except EksError:
            template = {}  # its template deleted since: the instances keep no tags of it
        tags = {
            str(tag["Key"]): str(tag.get("Value", ""))
            for spec in template.get("TagSpecifications") or []
            if spec.get("ResourceType") == "instance"
            for tag in spec.get("Tags") or []
        }
        tags[GROUP_TAG] = name
        for instance in _instances(region, item):
            out[instance] = dict(tags)
    return out


def _instances(region: str, item: Item) -> list[str]:
    return [instance for _, instance in node_slots(region, item.data)]


def handle(eks: Eks, call: p.Call) -> Answer:
    """Answer one of ``ACTIONS`` (``handles`` said it is ours)."""
    eks.advance(time.monotonic())
    groups = _groups(eks, call.region)
    if call.action == "DescribeAutoScalingGroups":
        names = p.indexed(call.params, "AutoScalingGroupNames.member")
        members = "".join(
            f"<member>{_group(call.region, n, groups[n])}</member>" for n in names if n in groups
        )
        return _answer(call.action, f"<AutoScalingGroups>{members}</AutoScalingGroups>")
    if call.action in ("CreateOrUpdateTags", "DeleteTags"):
        for tag in _tag_params(call.params):
            kept = groups[tag["ResourceId"]].data.setdefault("_asg_tags", {})
            if call.action == "DeleteTags":
                kept.pop(tag["Key"], None)
            else:
                kept[tag["Key"]] = tag.get("Value", "")
        return _answer(call.action, "")
    if call.action == "SetDesiredCapacity":
        refused = set_desired(
            eks,
            call.region,
            call.params["AutoScalingGroupName"],
            int(call.params.get("DesiredCapacity", "0")),
        )
        return _error(400, "ValidationError", refused) if refused else _answer(call.action, "")
    return _terminate(eks, call, groups)


def _group(region: str, name: str, item: Item) -> str:
    scaling = item.data["scalingConfig"]
    launching = booting(item)
    tags = "".join(
        "<member>"
        f"<ResourceId>{escape(name)}</ResourceId><ResourceType>auto-scaling-group</ResourceType>"
        f"<Key>{escape(k)}</Key><Value>{escape(v)}</Value>"
        "<PropagateAtLaunch>false</PropagateAtLaunch>"
        "</member>"
        for k, v in sorted(tags_of(item).items())
    )
    instances = "".join(
        "<member>"
        f"<InstanceId>{i}</InstanceId><AvailabilityZone>{region}a</AvailabilityZone>"
        f"<LifecycleState>{'Pending' if i in launching else 'InService'}</LifecycleState>"
        "<HealthStatus>Healthy</HealthStatus>"
        "<ProtectedFromScaleIn>false</ProtectedFromScaleIn>"
        "</member>"
        for i in _instances(region, item)
    )
    return (
        f"<AutoScalingGroupName>{escape(name)}</AutoScalingGroupName>"
        f"<MinSize>{scaling['minSize']}</MinSize><MaxSize>{scaling['maxSize']}</MaxSize>"
        f"<DesiredCapacity>{scaling['desiredSize']}</DesiredCapacity>"
        "<DefaultCooldown>300</DefaultCooldown>"
        f"<AvailabilityZones><member>{region}a</member></AvailabilityZones>"
        "<HealthCheckType>EC2</HealthCheckType>"
        f"<CreatedTime>{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}</CreatedTime>"
        f"<Instances>{instances}</Instances>"
        f"<Tags>{tags}</Tags>"
    )


def group_of(eks: Eks, region: str, instance: str) -> tuple[str, dict[str, str]] | None:
    """The Auto Scaling group of a node group's instance and its tags, or None."""
    for name, item in _groups(eks, region).items():
        if instance in _instances(region, item):
            return name, tags_of(item)
    return None


def terminate(eks: Eks, region: str, instance: str, decrement: bool) -> tuple[str, str]:
    """TerminateInstanceInAutoScalingGroup of a node group's instance: ("", its group), or
    ("ValidationError", why)."""
    groups = _groups(eks, region)
    found = next(((n, i) for n, i in groups.items() if instance in _instances(region, i)), None)
    if found is None:
        # AWS's words, as recorded in yaybu/touchdown#51 and keikoproj/upgrade-manager#25.
        return (
            "ValidationError",
            f"Instance Id not found - No managed instance found for instance ID {instance}",
        )
    name, item = found
    ng = item.data
    scaling = ng["scalingConfig"]
    if decrement and scaling["desiredSize"] - 1 < scaling["minSize"]:
        return (
            "ValidationError",
            f"Currently, desiredSize equals minSize ({scaling['minSize']}). Terminating "
            "instance without replacement will violate group's min size constraint. Either "
            "set shouldDecrementDesiredCapacity flag to false or lower group's min size.",
        )
    base = 10 + 64 * (ng.get("_generation", 0) % 3)
    before = dict((i, n) for n, i in node_slots(region, ng))
    ng["_slots"].remove(before[instance] - base)
    ng.get("_booting", {}).pop(instance, None)
    if decrement:
        scaling["desiredSize"] -= 1
    else:
        # A new instance takes the next place, and joins once it has booted.
        joins = time.monotonic() + BOOT_SECONDS * eks.scale
        for _, launched in node_slots(region, ng):
            if launched not in before:
                ng.setdefault("_booting", {})[launched] = joins
    # The node drains and leaves (EKS's lifecycle hook drains it as the group terminates it).
    eks.sync_nodes(region, ng)
    return "", name


def _terminate(eks: Eks, call: p.Call, groups: dict[str, Item]) -> Answer:
    instance = call.params.get("InstanceId", "")
    decrement = call.params.get("ShouldDecrementDesiredCapacity", "false").lower() == "true"
    code, said = terminate(eks, call.region, instance, decrement)
    if code:
        return _error(400, code, said)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    activity = (
        f"<Activity><ActivityId>{uuid.uuid4()}</ActivityId>"
        f"<AutoScalingGroupName>{escape(said)}</AutoScalingGroupName>"
        f"<Description>Terminating EC2 instance: {instance}</Description>"
        f"<Cause>At {now} instance {instance} "
        "was taken out of service in response to a user request"
        + (", shrinking the capacity." if decrement else ".")
        + "</Cause>"
        f"<StartTime>{now}</StartTime>"
        "<StatusCode>InProgress</StatusCode><Progress>0</Progress></Activity>"
    )
    return _answer(call.action, activity)


def _answer(action: str, result: str) -> Answer:
    xml = (
        f'<?xml version="1.0" encoding="UTF-8"?><{action}Response xmlns="{NS}">'
        f"<{action}Result>{result}</{action}Result>"
        f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )
    return 200, {"Content-Type": "text/xml"}, xml.encode()


def _error(status: int, code: str, message: str) -> Answer:
    xml = (
        f'<?xml version="1.0" encoding="UTF-8"?><ErrorResponse xmlns="{NS}"><Error>'
        f"<Type>Sender</Type><Code>{code}</Code><Message>{escape(message)}</Message>"
        f"</Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
    )
    return status, {"Content-Type": "text/xml"}, xml.encode()
