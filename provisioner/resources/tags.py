"""Ownership and lifetime tags: what every resource fmctl makes carries, and how a change to
them is told apart from tags others put on the same resource (left alone)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from provisioner.spec.tags import OWNER_TAG

__all__ = ["OWNER_TAG"]  # re-exported: the kinds and use cases take every tag name from here
RESOURCE_TAG = "fmctl.dev/resource"
EXPIRES_TAG = "fmctl.dev/expires-at"
CREATED_TAG = "fmctl.dev/created-at"
#: The region of a cluster's objects in account-wide namespaces (IAM roles, instance
#: profiles, policies): two same-named clusters in two regions both own IAM objects whose
#: names may share their whole head (names.bounded cuts long ones), so the owner tag alone
#: cannot tell them apart.
REGION_TAG = "fmctl.dev/region"
#: What a resource `down` kept (--keep-logs, deletionPolicy: retain) says it came from; no
#: other fmctl tag is left on it, so nothing of fmctl's finds or deletes it again.
RETAINED_TAG = "fmctl.dev/retained-from"
#: Where the cluster's state and lock live when a team shares them (``s3://BUCKET/PREFIX``):
#: set at creation by a run whose state is shared, and on the cluster's EC2 resources by
#: `state push` (taken off by `state pull`), so that a command run anywhere, whatever its
#: own configuration, finds the lock a teammate's run holds. The state commands own it:
#: a plan neither asks for it nor removes it.
STATE_TAG = "fmctl.dev/state"
#: Tags of fmctl's own namespace: a live one the spec no longer asks for is removed.
FMCTL_PREFIX = "fmctl.dev/"
STAMP = "%Y-%m-%dT%H:%M:%SZ"
#: fmctl's tags a plan never changes once set.
UNPLANNED = frozenset({CREATED_TAG, STATE_TAG})


def stamp(at: float) -> str:
    """A tag's time format (UTC, to the second)."""
    return time.strftime(STAMP, time.gmtime(at))


def parse_stamp(text: str | None) -> float | None:
    """The time of a tag value, or None when it is not one."""
    if not text:
        return None
    import calendar

    try:
        return float(calendar.timegm(time.strptime(text, STAMP)))
    except ValueError:
        return None


@dataclass(frozen=True)
class Tags:
    """A set of tags, as sorted (key, value) pairs (frozen, comparable)."""

    items: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, tags: Mapping[str, str] | Iterable[tuple[str, str]]) -> Tags:
        """Tags from a mapping or pairs."""
        pairs = tags.items() if isinstance(tags, Mapping) else tags
        return cls(tuple(sorted((str(k), str(v)) for k, v in pairs)))

    @classmethod
    def from_list(cls, items: Iterable[Mapping[str, Any]] | None, key: str = "Key") -> Tags:
        """Tags from AWS's [{"Key": k, "Value": v}] shape (``key`` "TagKey" for KMS)."""
        value = "TagValue" if key == "TagKey" else "Value"
        return cls.of((str(t[key]), str(t.get(value, ""))) for t in items or ())

    def as_dict(self) -> dict[str, str]:
        """The tags as a dict."""
        return dict(self.items)

    def get(self, key: str) -> str | None:
        """One tag's value."""
        return self.as_dict().get(key)


@dataclass(frozen=True)
class DesiredTags:
    """What the spec asks a resource's tags to be: its own tags, the owner and logical id,
    and (with a ttl) an expiry counted from the resource's creation."""

    spec: tuple[tuple[str, str], ...]
    cluster: str
    resource: str
    ttl_seconds: float | None = None
    #: Set for objects of account-wide namespaces (IAM): the region they belong to.
    region: str | None = None
    #: The shared state's URL (``STATE_TAG``), given at creation only.
    state: str | None = None

    def resolve(self, created_at: str | None) -> Tags:
        """The tags to compare with a live resource created at ``created_at``: every fmctl
        tag but the creation stamp, which never changes."""
        tags = {**dict(self.spec), OWNER_TAG: self.cluster, RESOURCE_TAG: self.resource}
        if self.region is not None:
            tags[REGION_TAG] = self.region
        if self.ttl_seconds is not None:
            born = parse_stamp(created_at) or time.time()
            tags[EXPIRES_TAG] = stamp(born + self.ttl_seconds)
        return Tags.of(tags)

    def at_creation(self, now: float | None = None) -> dict[str, str]:
        """The tags to create the resource with (creation stamp included)."""
        at = time.time() if now is None else now
        tags = self.resolve(stamp(at)).as_dict()
        tags[CREATED_TAG] = stamp(at)
        if self.state is not None:
            tags[STATE_TAG] = self.state
        return tags


def tag_change(want: Tags, have: Tags) -> tuple[dict[str, str], dict[str, str | None]] | None:
    """(live, desired) of the tags that differ, or None: desired keys with another value, and
    fmctl tags the spec no longer asks for (desired None). Tags others set stay theirs, and
    neither the creation stamp nor the state's place (the state commands') is rewritten."""
    live = have.as_dict()
    wanted = want.as_dict()
    before: dict[str, str] = {}
    after: dict[str, str | None] = {}
    for key, value in wanted.items():
        if live.get(key) != value:
            if key in live:
                before[key] = live[key]
            after[key] = value
    for key, value in live.items():
        if key.startswith(FMCTL_PREFIX) and key not in wanted and key not in UNPLANNED:
            before[key] = value
            after[key] = None
    return (before, after) if after else None


def tag_updates(before: Any, after: Any) -> tuple[dict[str, str], list[str]]:
    """From a tags FieldChange: (tags to set, keys to remove)."""
    del before
    changes: Mapping[str, str | None] = after
    add = {k: v for k, v in changes.items() if v is not None}
    remove = sorted(k for k, v in changes.items() if v is None)
    return add, remove


class AwsTag(TypedDict):
    """One tag in the {"Key", "Value"} shape IAM, S3, SNS, FSx, EventBridge and Budgets take
    (both keys required, as their models say; EC2's and KMS's shapes differ)."""

    Key: str
    Value: str


def aws_tags(pairs: Mapping[str, str]) -> list[AwsTag]:
    """``pairs`` in AWS's [{"Key": k, "Value": v}] shape, sorted by key."""
    return [{"Key": k, "Value": v} for k, v in sorted(pairs.items())]


def apply_tag_change(
    after: Any,
    tag: Callable[[list[AwsTag]], object],
    untag: Callable[[list[str]], object],
) -> None:
    """Apply a tags FieldChange through a service's own tag and untag calls: ``tag`` gets
    AWS's [{"Key": k, "Value": v}] list, ``untag`` the keys."""
    add, remove = tag_updates(None, after)
    if add:
        tag(aws_tags(add))
    if remove:
        untag(remove)
