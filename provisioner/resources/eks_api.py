"""What the EKS kinds share: EKS's "not found" and "in use" answers, health issues, tags by
ARN, and who the caller is."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from provisioner.drivers.aws_errors import AlreadyExists, NotFound
from provisioner.resources.base import FieldChange
from provisioner.resources.context import Context
from provisioner.resources.tags import tag_updates

T = TypeVar("T")
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


def unless_gone(call: Callable[[], T]) -> T | None:
    """``call()``, or None when EKS answers that what it names does not exist."""
    try:
        return call()
    except NotFound:
        return None


def created_or_found(create: Callable[[], T], find: Callable[[], T | None]) -> T:
    """``create()``; when EKS answers that it exists already, what ``find()`` finds: our own
    create whose answer was lost (the client token makes a retry the same request, but a
    re-run of `up` after a crash is a new one). Nothing found: the conflict stands."""
    try:
        return create()
    except AlreadyExists:
        found = find()
        if found is None:
            raise
        return found


def health(item: Mapping[str, Any]) -> str:
    """EKS's health issues of a resource, as one line."""
    found = (item.get("health") or {}).get("issues") or []
    return "; ".join(f"{i.get('code')}: {i.get('message')}" for i in found) or "no details"


def eks_retag(ctx: Context, arn: str, changes: Sequence[FieldChange]) -> None:
    """Apply a tags change to an EKS resource (cluster, node group, add-on, ...)."""
    eks = ctx.aws.client("eks")
    for change in changes:
        if change.path != "tags":
            continue
        add, remove = tag_updates(change.before, change.after)
        if add:
            eks.tag_resource(resourceArn=arn, tags=add)
        if remove:
            eks.untag_resource(resourceArn=arn, tagKeys=remove)


def caller_principal(ctx: Context) -> str:
    """The IAM principal of the credentials in use (an assumed role's role ARN)."""

    def load() -> str:
        arn = str(ctx.aws.client("sts").get_caller_identity()["Arn"])
        if ":user/" in arn:  # an IAM user (moto answers with an sts-style ARN for one)
            return arn.replace(":sts:", ":iam:")
        if ":assumed-role/" in arn:  # arn:aws:sts::ACCT:assumed-role/ROLE/SESSION
            head, rest = arn.split(":assumed-role/", 1)
            return f"{head.replace(':sts:', ':iam:')}:role/{rest.split('/', 1)[0]}"
        return arn

    return ctx.cached("sts:principal", load)
