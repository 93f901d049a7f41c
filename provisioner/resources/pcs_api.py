"""What the AWS PCS kinds share: PCS's "not found" and "try again" (ConflictException)
answers, tags by ARN, client-token digests, and the sweep of instances PCS left."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from provisioner.drivers.aws_errors import Conflict, NotFound
from provisioner.resources.base import FieldChange
from provisioner.resources.context import Context
from provisioner.resources.tags import (
    OWNER_TAG,
    Tags,
    tag_updates,
)

if TYPE_CHECKING:
    from types_boto3_ec2.type_defs import FilterTypeDef

T = TypeVar("T")
FAILED = ("CREATE_FAILED", "DELETE_FAILED", "UPDATE_FAILED", "SUSPENDING", "SUSPENDED")


def client(ctx: Context) -> Any:
    return ctx.aws.client("pcs")


def unless_gone(call: Callable[[], T]) -> T | None:
    """``call()``, or None when PCS answers that what it names does not exist."""
    try:
        return call()
    except NotFound:
        return None


def errors_of(item: dict[str, Any]) -> str:
    found = item.get("errorInfo") or []
    return "; ".join(f"{e.get('code')}: {e.get('message')}" for e in found) or "no details"


def retag(ctx: Context, arn: str, changes: Sequence[FieldChange]) -> None:
    for change in changes:
        if change.path != "tags":
            continue
        add, remove = tag_updates(change.before, change.after)
        if add:
            client(ctx).tag_resource(resourceArn=arn, tags=add)
        if remove:
            client(ctx).untag_resource(resourceArn=arn, tagKeys=remove)


def digest(value: Any) -> str:
    """A short digest of a request's content: in a client token, a different request is a
    different token (PCS answers a token it knows with what that request made)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def tags_of(ctx: Context, arn: str) -> Tags:
    found = unless_gone(lambda: client(ctx).list_tags_for_resource(resourceArn=arn))
    return Tags.of((found or {}).get("tags") or {})


def patiently(ctx: Context, rid: str, what: str, call: Callable[[], T]) -> T:
    """``call()``, again while PCS answers ConflictException (what it depends on is
    changing: it clears when that change lands)."""
    try:
        return call()
    except Conflict as exc:
        ctx.emit(rid, "note", f"PCS refused {what} for now ({exc}); trying again")

    def again() -> tuple[T] | None:
        try:
            return (call(),)
        except Conflict:
            return None

    return ctx.wait_until(f"PCS to accept {what}", again, 30.0, 3600, rid)[0]


def sweep(ctx: Context, rid: str, key: str, value: str) -> None:
    """Terminate what PCS launched and left (tagged ``key``=``value`` by PCS and carrying the
    cluster's own tag from fmctl's launch template), and wait until it is gone: deleting a
    node group terminates its instances, and any it did not must not outlive the cluster."""
    ec2 = ctx.aws.client("ec2")
    alive = ["pending", "running", "stopping", "stopped"]
    filters: list[FilterTypeDef] = [
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
