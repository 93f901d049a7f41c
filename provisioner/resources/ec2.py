"""What EC2 kinds share: one tag-filtered describe per kind and run, tolerant deletes, creates
that never turn a lost answer into a second resource, and tag updates."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from provisioner.drivers.aws import transient
from provisioner.drivers.aws_errors import AlreadyExists, InUse, NotFound
from provisioner.resources.context import Context
from provisioner.resources.tags import RESOURCE_TAG, Tags

T = TypeVar("T")

#: Lifecycle states that mean "gone" for discovery.
GONE = {"deleted", "deleting", "failed", "disassociated", "rejected", "expired"}


#: Every EC2 listing fmctl's resources show up in: (describe call, result key, state field).
LISTINGS: tuple[tuple[str, str, str | None], ...] = (
    ("describe_vpcs", "Vpcs", "State"),
    ("describe_subnets", "Subnets", "State"),
    ("describe_internet_gateways", "InternetGateways", None),
    ("describe_addresses", "Addresses", None),
    ("describe_nat_gateways", "NatGateways", "State"),
    ("describe_route_tables", "RouteTables", None),
    ("describe_vpc_endpoints", "VpcEndpoints", "State"),
    ("describe_security_groups", "SecurityGroups", None),
    ("describe_placement_groups", "PlacementGroups", "State"),
    ("describe_launch_templates", "LaunchTemplates", None),
)


def tagged_anywhere(ctx_aws: Any, key: str) -> list[Tags]:
    """The tags of every live EC2 resource carrying tag ``key``, whatever its value (what
    `gc` reads to find clusters). Listed per type with a ``tag-key`` filter: moto's
    DescribeTags still reports tags of deleted resources."""
    ec2 = ctx_aws.client("ec2")
    out = []
    for call, result, state in LISTINGS:
        for item in getattr(ec2, call)(Filters=[{"Name": "tag-key", "Values": [key]}])[result]:
            if state and str(item.get(state, "")).lower() in GONE:
                continue
            out.append(tags_of(item))
    return out


def tags_of(item: Mapping[str, Any], key: str = "Tags") -> Tags:
    """An EC2 description's tags (``TagSet`` for network interfaces)."""
    return Tags.from_list(item.get(key))


def owned_items(
    ctx: Context, call: str, result_key: str, state_field: str | None = None
) -> list[dict[str, Any]]:
    """Every item of an EC2 describe call tagged as the cluster's, live only; one call per
    run (cached). Ownership is checked on each item's own tags as well as by the server-side
    filter: a filter the API (or an emulator) ignores must not make another cluster's
    resource look like ours (moto's DescribeNatGateways ignores tag filters, for one)."""

    def load() -> list[dict[str, Any]]:
        # The call is named by the caller (one of EC2's describes): untyped by design.
        ec2: Any = ctx.aws.client("ec2")
        items: list[dict[str, Any]] = []
        paginate = ec2.can_paginate(call)
        pages = (
            ec2.get_paginator(call).paginate(Filters=ctx.owner_filters())
            if paginate
            else [getattr(ec2, call)(Filters=ctx.owner_filters())]
        )
        for page in pages:
            items += page[result_key]
        if state_field:
            items = [i for i in items if str(i.get(state_field, "")).lower() not in GONE]
        return [i for i in items if ctx.ours(tags_of(i).as_dict())]

    return ctx.cached(f"ec2:{call}", load)


def by_resource(items: list[dict[str, Any]], rid: str) -> dict[str, Any] | None:
    """The item tagged as logical resource ``rid``, if any."""
    for item in items:
        if tags_of(item).get(RESOURCE_TAG) == rid:
            return item
    return None


def create_or_adopt(
    ctx: Context,
    what: str,
    create: Callable[[], T],
    rediscover: Callable[[], T | None],
    attempts: int = 8,
) -> T:
    """Create once, with a client that does not retry by itself. When the answer is lost
    (connection dropped, 5xx, throttling, or AlreadyExists showing the first try worked), look
    for the resource by its tags before trying again, so a lost answer never becomes a
    second resource. For APIs that take no client token."""
    delay = 0.5
    for attempt in range(attempts):
        try:
            return create()
        except Exception as exc:
            if not transient(exc) and not isinstance(exc, AlreadyExists):
                raise
            found = rediscover()
            if found is not None:
                ctx.emit(what, "adopted", "found after a lost answer")
                return found
            if attempt == attempts - 1 or not transient(exc):
                raise
            time.sleep(delay * max(min(ctx.time_scale * 20, 1.0), 0.05))
            delay = min(delay * 2, 8.0)
    raise AssertionError("unreachable")


def retry_dependency(
    action: Callable[[], Any],
    what: str,
    ctx: Context,
    attempts: int = 30,
) -> None:
    """Run a delete, retrying while AWS says something still depends on it (InUse: ENIs of
    a deleted NAT gateway or file system linger for a while; a placement group's last
    instances are still terminating). A resource gone is success."""
    delay = 0.2
    for attempt in range(attempts):
        try:
            action()
            return
        except NotFound:
            return
        except InUse:
            if attempt == attempts - 1:
                raise
            time.sleep(delay * max(ctx.time_scale, 0.05) * 10)
            delay = min(delay * 1.5, 3.0)
    raise AssertionError(f"unreachable: {what}")


def retag(ctx: Context, resource_id: str, add: dict[str, str], remove: list[str]) -> None:
    """Set and remove EC2 tags on one resource."""
    ec2 = ctx.aws.client("ec2")
    if add:
        ec2.create_tags(
            Resources=[resource_id], Tags=[{"Key": k, "Value": v} for k, v in sorted(add.items())]
        )
    if remove:
        ec2.delete_tags(Resources=[resource_id], Tags=[{"Key": k} for k in remove])
