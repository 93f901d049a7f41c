"""`fmctl gc`: find every fmctl cluster in a region by its tags and pick the ones to tear down
(expired ttl, or older than a limit). The teardown itself is `down`'s."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioner.drivers.aws import Aws
from provisioner.ops.target import Target
from provisioner.resources.tags import (
    CREATED_TAG,
    EXPIRES_TAG,
    OWNER_TAG,
    AwsTag,
    parse_stamp,
)


@dataclass
class ClusterSeen:
    """A cluster found by its tags."""

    name: str
    resources: int = 0
    created_at: float | None = None
    expires_at: float | None = None
    #: Every tag its resources carry: key -> the values seen (for ``--tag`` filters).
    tags: dict[str, set[str]] = field(default_factory=dict)
    #: The region it was found in.
    region: str = ""

    def has_tag(self, key: str, value: str) -> bool:
        """True when one of its resources carries ``key=value``."""
        return value in self.tags.get(key, set())

    def expired(self, now: float) -> bool:
        """True when the cluster's ttl has passed."""
        return self.expires_at is not None and self.expires_at <= now

    def older_than(self, seconds: float, now: float) -> bool:
        """True when the cluster was created more than ``seconds`` ago."""
        return self.created_at is not None and now - self.created_at > seconds


def _note(seen: dict[str, ClusterSeen], tags: dict[str, str]) -> None:
    name = tags.get(OWNER_TAG)
    if not name:
        return
    entry = seen.setdefault(name, ClusterSeen(name))
    entry.resources += 1
    for key, text in tags.items():
        entry.tags.setdefault(key, set()).add(text)
    for key, attr in ((CREATED_TAG, "created_at"), (EXPIRES_TAG, "expires_at")):
        value = parse_stamp(tags.get(key))
        current = getattr(entry, attr)
        if value is not None and (current is None or value < current):
            setattr(entry, attr, value)


def find_clusters(aws: Aws) -> dict[str, ClusterSeen]:
    """Every cluster with a live resource tagged fmctl.dev/cluster in the region.

    Each EC2 kind is listed with a ``tag-key`` filter rather than through DescribeTags, which
    (in moto at least) still reports the tags of deleted resources.
    """
    seen: dict[str, ClusterSeen] = {}
    _gather(aws, seen)
    for entry in seen.values():
        entry.region = aws.region
    return seen


#: Regions read at once by --all-regions (each one a handful of list calls).
REGIONS_IN_FLIGHT = 8


def find_everywhere(
    aws_for: Callable[[str], Aws], regions: Sequence[str]
) -> dict[tuple[str, str], ClusterSeen]:
    """Every cluster in each of ``regions``, by (region, name), the regions read side by
    side (one after another took 10-27 s for every region fmctl accepts)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(REGIONS_IN_FLIGHT, len(regions) or 1)) as pool:
        found = pool.map(lambda region: find_clusters(aws_for(region)), regions)
        return {
            (region, name): seen
            for region, clusters in zip(regions, found, strict=True)
            for name, seen in clusters.items()
        }


def _gather(aws: Aws, seen: dict[str, ClusterSeen]) -> None:
    from provisioner.resources.ec2 import tagged_anywhere

    for tags in tagged_anywhere(aws, OWNER_TAG):
        _note(seen, tags.as_dict())
    fsx = aws.client("fsx")
    for item in fsx.describe_file_systems().get("FileSystems", []):
        _note(seen, {t["Key"]: t["Value"] for t in item.get("Tags", [])})
    _gather_money(aws, seen)
    s3 = aws.client("s3")
    for bucket in s3.list_buckets().get("Buckets", []):
        # ListBuckets lists every region's: a bucket counts in its own region only (or a
        # cluster in us-east-2 would be found, and torn down, from us-east-1).
        if bucket["Name"].startswith("fmctl-") and _bucket_region(s3, bucket) == aws.region:
            _note(seen, _bucket_tags(s3, bucket["Name"]))


def _gather_money(aws: Aws, seen: dict[str, ClusterSeen]) -> None:
    """What keeps a cluster's money in check, which can outlive everything else of it (a
    `down` cut short): the ttl's and the Capacity Blocks' schedule groups, the blocks'
    warning rules, the budget's stop topic and function, and the budget (an account-wide
    object, named and tagged with its region). One list call
    per kind; their tags are read only for a cluster nothing else showed (each is a call,
    and `gc` reads every region's clusters at once), found by fmctl's names."""
    import functools

    from provisioner.resources.tags import REGION_TAG

    scheduler, sns = aws.client("scheduler"), aws.client("sns")
    functions, budgets = aws.client("lambda"), aws.client("budgets")
    account = aws.account_id()

    def listed(items: Sequence[AwsTag]) -> dict[str, str]:
        return {str(t["Key"]): str(t["Value"]) for t in items}

    def group_tags(arn: str) -> dict[str, str]:
        return listed(scheduler.list_tags_for_resource(ResourceArn=arn).get("Tags", []))

    def rule_tags(arn: str) -> dict[str, str]:
        events = aws.client("events")
        return listed(events.list_tags_for_resource(ResourceARN=arn).get("Tags", []))

    def topic_tags(arn: str) -> dict[str, str]:
        return listed(sns.list_tags_for_resource(ResourceArn=arn).get("Tags", []))

    def function_tags(arn: str) -> dict[str, str]:
        found = functions.list_tags(Resource=arn).get("Tags", {})
        return {str(k): str(v) for k, v in found.items()}

    def budget_tags(name: str) -> dict[str, str]:
        arn = f"arn:aws:budgets::{account}:budget/{name}"
        tags = listed(budgets.list_tags_for_resource(ResourceARN=arn).get("ResourceTags", []))
        return tags if tags.get(REGION_TAG) == aws.region else {}

    def note(name: str, prefix: str, suffix: str, read: Callable[[], dict[str, str]]) -> None:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            return
        cluster = name[len(prefix) : len(name) - len(suffix)]
        if cluster in seen:
            seen[cluster].resources += 1  # its dates are known from the rest of it
        else:
            _note(seen, read())

    for page in scheduler.get_paginator("list_schedule_groups").paginate(NamePrefix="fmctl-"):
        for group in page.get("ScheduleGroups", []):
            read = functools.partial(group_tags, str(group["Arn"]))
            name = str(group["Name"])
            # fmctl-NAME (the ttl's) or fmctl-NAME-blocks (the Capacity Blocks' T-60).
            suffix = "-blocks" if name.removesuffix("-blocks")[6:] in seen else ""
            note(name, "fmctl-", suffix, read)
    events = aws.client("events")
    for rule_page in events.get_paginator("list_rules").paginate(NamePrefix="fmctl-"):
        for rule in rule_page.get("Rules", []):
            # fmctl-NAME-HEX: a Capacity Block's T-40 rule (HEX: the block id's 17 digits).
            name = str(rule["Name"])
            read = functools.partial(rule_tags, str(rule["Arn"]))
            note(name, "fmctl-", name[-18:] if len(name) > 24 else "", read)
    for topic_page in sns.get_paginator("list_topics").paginate():
        for topic in topic_page.get("Topics", []):
            arn = str(topic["TopicArn"])
            note(arn.rsplit(":", 1)[-1], "fmctl-", "-budget", functools.partial(topic_tags, arn))
    for function_page in functions.get_paginator("list_functions").paginate():
        for function in function_page.get("Functions", []):
            read = functools.partial(function_tags, str(function["FunctionArn"]))
            note(str(function["FunctionName"]), "fmctl-", "-budget-stop", read)
    for budget_page in budgets.get_paginator("describe_budgets").paginate(AccountId=account):
        for budget in budget_page.get("Budgets", []):
            name = str(budget["BudgetName"])
            note(name, "fmctl-", f"-{aws.region}", functools.partial(budget_tags, name))


def _bucket_region(s3: Any, bucket: Mapping[str, Any]) -> str | None:
    """A listed bucket's region: ListBuckets gives BucketRegion (since 2024), else
    GetBucketLocation, whose empty LocationConstraint means us-east-1."""
    if bucket.get("BucketRegion"):
        return str(bucket["BucketRegion"])
    try:
        where = s3.get_bucket_location(Bucket=bucket["Name"]).get("LocationConstraint")
    except Exception:  # noqa: BLE001 - gone since it was listed, or not ours to read
        return None
    return str(where or "us-east-1")


def _bucket_tags(s3: Any, name: str) -> dict[str, str]:
    try:
        return {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=name)["TagSet"]}
    except Exception:  # noqa: BLE001 - no tags, or not ours to read
        return {}


def parse_age(text: str) -> int | None:
    """Seconds in an age such as ``6h`` or ``2d`` (a ttl's syntax); None when malformed."""
    from provisioner.validate.rules.general import parse_ttl

    return parse_ttl(text)


def select(
    seen: Mapping[Any, ClusterSeen],
    expired: bool,
    older_than: float | None,
    now: float | None = None,
    ignore_ttl: bool = False,
    tags: tuple[tuple[str, str], ...] = (),
) -> list[ClusterSeen]:
    """The clusters a gc run tears down: expired, or older than ``older_than`` — but never
    by age one whose ttl says it is still wanted (unless ``ignore_ttl``); and only those
    carrying every ``tags`` pair."""
    now = time.time() if now is None else now

    def by_age(c: ClusterSeen) -> bool:
        if older_than is None or not c.older_than(older_than, now):
            return False
        return ignore_ttl or c.expires_at is None or c.expired(now)

    return sorted(
        (
            c
            for c in seen.values()
            if ((expired and c.expired(now)) or by_age(c)) and all(c.has_tag(k, v) for k, v in tags)
        ),
        key=lambda c: (c.region, c.name),
    )


def lock_holder(target: Target, name: str) -> str | None:
    """Who holds cluster ``name``'s lock, described; None when it is free (reads only).

    gc never tears down a cluster some run is changing: it skips it and says so; nor one
    whose lock it cannot find for certain (its resources and this machine name two state
    locations)."""
    from provisioner.ops.team import open_state
    from provisioner.state.errors import StateError

    try:
        seen = open_state(target, name).peek_lock()
    except StateError as exc:
        return f"a lock gc cannot place: {exc}"
    if seen is None:
        return None
    who = seen.who
    if seen.remaining_s is not None and seen.remaining_s <= 0:
        return f"{who} (its lease ended; `fmctl unlock {name}` if that run is gone)"
    return who
