"""Shared behaviour of EC2 resource kinds: discovery by ownership tags, tolerant deletes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from provisioner.drivers.aws import error_code, transient
from provisioner.plan.context import RESOURCE_TAG, Engine
from provisioner.plan.graph import Found, Node, Outputs

#: Lifecycle states that mean "gone" for discovery.
GONE = {"deleted", "deleting", "failed", "disassociated"}


def tag_value(item: dict[str, Any], key: str) -> str | None:
    """A tag's value from an EC2 description (``Tags`` list)."""
    for tag in item.get("Tags", []):
        if tag.get("Key") == key:
            return str(tag.get("Value"))
    return None


def _tags_match(item: dict[str, Any], filters: list[dict[str, Any]]) -> bool:
    tags = {t.get("Key"): t.get("Value") for t in item.get("Tags", [])}
    for f in filters:
        name = str(f["Name"])
        if name.startswith("tag:") and tags.get(name[4:]) not in f["Values"]:
            return False
    return True


def is_gone(exc: BaseException) -> bool:
    """True for the errors that mean the resource no longer exists."""
    code = error_code(exc) or ""
    return code.endswith((".NotFound", "NotFound", ".Unknown")) or code in (
        "InvalidAllocationID.NotFound",
        "NoSuchBucket",
        "FileSystemNotFound",
        "DataRepositoryAssociationNotFound",
        "NoSuchEntity",
    )


#: Errors a repeated create gets when the first one worked (its answer was lost).
ALREADY_MADE = {
    "InvalidSubnet.Conflict",
    "InvalidGroup.Duplicate",
    "InvalidPlacementGroup.Duplicate",
    "RouteAlreadyExists",
}


def create_or_adopt(
    engine: Engine,
    what: str,
    create: Callable[[], Outputs],
    rediscover: Callable[[], Outputs | None],
    attempts: int = 8,
) -> Outputs:
    """Create once, with a client that does not retry by itself. When the answer is lost
    (connection dropped, 5xx, throttling, or a conflict showing the first try worked), look
    for the resource by its tags before trying again, so a lost answer never becomes a
    second resource. For APIs that take no client token."""
    delay = 0.5
    for attempt in range(attempts):
        try:
            return create()
        except Exception as exc:
            if not transient(exc) and error_code(exc) not in ALREADY_MADE:
                raise
            found = rediscover()
            if found is not None:
                engine.emit(what, "adopted", str(found.get("id", "")))
                return found
            if attempt == attempts - 1 or not transient(exc):
                raise
            time.sleep(delay * max(min(engine.time_scale * 20, 1.0), 0.05))
            delay = min(delay * 2, 8.0)
    raise AssertionError("unreachable")


def retry_dependency(
    action: Callable[[], Any], what: str, engine: Engine, attempts: int = 30
) -> None:
    """Run a delete, retrying while AWS says something still depends on it (ENIs of a
    deleted NAT gateway or file system linger for a while). A resource gone is success."""
    delay = 0.2
    for attempt in range(attempts):
        try:
            action()
            return
        except Exception as exc:
            if is_gone(exc):
                return
            if error_code(exc) != "DependencyViolation" or attempt == attempts - 1:
                raise
            time.sleep(delay * max(engine.time_scale, 0.05) * 10)
            delay = min(delay * 1.5, 3.0)
    raise AssertionError(f"unreachable: {what}")


class Ec2Kind:
    """A kind whose resources EC2 can list with tag filters."""

    name = ""
    after: tuple[str, ...] = ()
    create_seconds = 2.0
    delete_seconds = 2.0
    describe_call = ""
    result_key = ""
    id_field = ""
    state_field: str | None = None

    def _describe(self, engine: Engine, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ec2 = engine.aws.client("ec2")
        items: list[dict[str, Any]] = getattr(ec2, self.describe_call)(Filters=filters)[
            self.result_key
        ]
        if self.state_field:
            items = [i for i in items if str(i.get(self.state_field, "")).lower() not in GONE]
        # Ownership is checked on each item's own tags too, never on the server-side filter
        # alone: a filter the API (or an emulator) ignores must not make another cluster's
        # resource look like ours. moto's DescribeNatGateways ignores tag filters, for one.
        return [i for i in items if _tags_match(i, filters)]

    def create_adopting(self, engine: Engine, node: Node, make: Callable[[], Outputs]) -> Outputs:
        """``make`` (which creates with a client that does not retry) under
        ``create_or_adopt``, rediscovering this node by its tags after a lost answer."""
        return create_or_adopt(engine, node.id, make, lambda: self.discover(engine, node))

    def outputs_of(self, item: dict[str, Any]) -> Outputs:
        """What later nodes may need of an existing resource."""
        return {"id": item[self.id_field]}

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        items = self._describe(engine, engine.owner_filters(node.id))
        return self.outputs_of(items[0]) if items else None

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        return [
            Found(self.name, tag_value(i, RESOURCE_TAG) or "?", i[self.id_field], i)
            for i in self._describe(engine, engine.owner_filters())
        ]
