"""The cluster's budget: an AWS Budgets cost budget over what carries the cluster's tag, with
its notifications, kept by AWS whether or not anyone runs fmctl.

AWS Budgets (API 2016-10-20, botocore's model and the API reference):

- Every call names the account (``AccountId``); budget names are unique in it (1 to 100
  characters, no ``:`` or ``\\``). CreateBudget of a name that exists answers
  DuplicateRecordException, a missing one NotFoundException.
- A cost budget scoped to a tag filters on ``TagKeyValue`` with values written
  ``user:KEY$VALUE`` (the AWS CLI reference's create-budget example); the tag counts only
  once it is an active cost allocation tag (the Billing User Guide).
- ``TimeUnit`` MONTHLY resets on the 1st; ANNUALLY, with a ``TimePeriod`` starting the day
  the budget is made, counts a cluster's whole life up to a year (``total``).
- A notification (ACTUAL, GREATER_THAN, a PERCENTAGE threshold) needs at least one
  subscriber: one SNS topic and up to 10 email addresses. Budgets takes tags
  (``ResourceTags`` at creation, TagResource/ListTagsForResource on
  ``arn:aws:budgets::ACCOUNT:budget/NAME``), so a budget is owned by its tags, as every
  resource fmctl makes; a budget is the account's, not a region's, so its tags name the
  region too (as IAM's objects do: ``iam.owned_here``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

from provisioner.drivers.aws_errors import AlreadyExists, NotFound
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
from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    REGION_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
    tag_updates,
)
from provisioner.resources.topics import TopicOut

if TYPE_CHECKING:
    from types_boto3_budgets.literals import TimeUnitType
    from types_boto3_budgets.type_defs import (
        BudgetOutputTypeDef,
        BudgetTypeDef,
        NotificationTypeDef,
        SubscriberTypeDef,
    )

#: The thresholds, in percent of the limit: a warning, and the limit itself.
WARN_AT, LIMIT_AT = 80.0, 100.0
Period = Literal["monthly", "total"]
TIME_UNIT: dict[str, TimeUnitType] = {"monthly": "MONTHLY", "total": "ANNUALLY"}


def usd(amount: object) -> str:
    """An amount to the cent, as fmctl compares and shows limits ("20000.00")."""
    return str(Decimal(str(amount)).quantize(Decimal("0.01")))


def budget_name(cluster: str, region: str) -> str:
    """The cluster's budget. Budgets are the account's, not a region's: two clusters of one
    name in two regions have a budget each (and the region tag says whose is whose)."""
    return f"fmctl-{cluster}-{region}"


def scope(cluster: str) -> str:
    """The budget's cost filter: what carries the cluster's tag."""
    return f"user:{OWNER_TAG}${cluster}"


#: How a budget notification reaches someone (Budgets' SubscriptionType).
Channel = Literal["EMAIL", "SNS"]


def subscriber(address: str) -> tuple[Channel, str]:
    """(SubscriptionType, Address) of one address of the spec."""
    return ("SNS" if address.startswith("arn:") else "EMAIL", address)


@dataclass(frozen=True)
class BudgetParams:
    """The budget: its limit in USD, its period, who each notification tells."""

    name: str
    limit: float
    period: Period
    notify: tuple[str, ...]
    #: Also told at the limit: the SNS topic of the cluster's stop function (actions: stop).
    stop_topic: Ref[TopicOut] | None
    tags: DesiredTags


@dataclass(frozen=True)
class BudgetOut:
    """The budget by name."""

    id: str


@dataclass(frozen=True)
class Notice:
    """One notification: its threshold (percent of the limit) and its subscribers."""

    threshold: float
    subscribers: frozenset[tuple[Channel, str]]


@dataclass(frozen=True)
class BudgetLive:
    """What fmctl manages of a budget."""

    limit: str
    time_unit: str
    scope: tuple[str, ...]
    notices: frozenset[Notice]
    tags: Tags
    #: What AWS Budgets counts as spent this period (read, never changed by fmctl).
    spent: str = "0.00"


class Budget(Kind[BudgetParams, BudgetOut, BudgetLive]):
    """An AWS Budgets cost budget over the cluster's tagged resources."""

    name, params, outputs = "budget", BudgetParams, BudgetOut
    create_seconds, update_seconds, delete_seconds = 1.0, 1.0, 1.0
    policy = policies(
        limit=Policy(How.UPDATE, "UpdateBudget changes the limit in place"),
        time_unit=Policy(How.UPDATE, "UpdateBudget changes the period in place"),
        scope=Policy(How.UPDATE, "UpdateBudget changes the cost filters in place"),
        notices=Policy(How.UPDATE, "notifications and subscribers are added and removed"),
    )

    # -- reading ------------------------------------------------------------------------
    @staticmethod
    def _account(ctx: Context) -> str:
        return ctx.cached("sts:account", ctx.aws.account_id)

    def _arn(self, ctx: Context, name: str) -> str:
        return f"arn:aws:budgets::{self._account(ctx)}:budget/{name}"

    def _tags(self, ctx: Context, name: str) -> Tags:
        listed = ctx.aws.client("budgets").list_tags_for_resource(ResourceARN=self._arn(ctx, name))
        return Tags.of({t["Key"]: t["Value"] for t in listed.get("ResourceTags", [])})

    @staticmethod
    def _ours(ctx: Context, tags: Tags) -> bool:
        return ctx.ours(tags.as_dict()) and tags.get(REGION_TAG) == ctx.region

    def _budget(self, ctx: Context, name: str) -> BudgetOutputTypeDef | None:
        try:
            found = ctx.aws.client("budgets").describe_budget(
                AccountId=self._account(ctx), BudgetName=name
            )
        except NotFound:
            return None
        return found["Budget"]

    def _notices(self, ctx: Context, name: str) -> frozenset[Notice]:
        client, account = ctx.aws.client("budgets"), self._account(ctx)
        out = set()
        pages = client.get_paginator("describe_notifications_for_budget").paginate(
            AccountId=account, BudgetName=name
        )
        for page in pages:
            for notification in page.get("Notifications", []):
                subscribers = client.describe_subscribers_for_notification(
                    AccountId=account, BudgetName=name, Notification=notification
                ).get("Subscribers", [])
                out.add(
                    Notice(
                        float(notification["Threshold"]),
                        frozenset((s["SubscriptionType"], s["Address"]) for s in subscribers),
                    )
                )
        return frozenset(out)

    def read(self, req: Request[BudgetParams]) -> Observed[BudgetOut, BudgetLive] | None:
        budget = self._budget(req.ctx, req.params.name)
        if budget is None:
            return None
        tags = self._tags(req.ctx, req.params.name)
        if not self._ours(req.ctx, tags):
            raise Foreign(
                f"budget {req.params.name} exists and is not fmctl cluster {req.ctx.cluster}'s",
                hint="delete it (aws budgets delete-budget) or pick another cluster name",
            )
        live = BudgetLive(
            usd(budget["BudgetLimit"]["Amount"]),
            str(budget.get("TimeUnit", "")),
            tuple(budget.get("CostFilters", {}).get("TagKeyValue", [])),
            self._notices(req.ctx, req.params.name),
            tags,
            usd(budget.get("CalculatedSpend", {}).get("ActualSpend", {}).get("Amount", 0)),
        )
        notes: tuple[str, ...] = ()
        spend = budget.get("CalculatedSpend", {}).get("ActualSpend", {}).get("Amount")
        if spend is not None and Decimal(str(spend)) >= Decimal(live.limit):
            notes = (
                f"the budget is spent: {usd(spend)} USD of {live.limit} this period"
                + (
                    "; its stop function has scaled the node groups to zero, and `up` keeps "
                    "them there until cost.budget is raised above what is spent"
                    if req.params.stop_topic is not None
                    else ""
                ),
            )
        return Observed(BudgetOut(req.params.name), live, req.params.name, None, notes)

    def _notices_wanted(self, ctx: Context, params: BudgetParams) -> frozenset[Notice]:
        """80%: the spec's addresses; 100%: them and the stop function's topic. A
        notification has one SNS subscriber at most: at the limit the stop topic takes that
        place, and a topic of the spec's hears the 80% only (validation says so)."""
        told = frozenset(subscriber(a) for a in params.notify)
        out = set()
        if told:
            out.add(Notice(WARN_AT, told))
        at_limit = told
        if params.stop_topic is not None:
            topic = ctx.resolve(params.stop_topic, "arn")
            if topic is UNKNOWN:
                return UNKNOWN  # type: ignore[no-any-return]
            at_limit = frozenset({s for s in told if s[0] != "SNS"} | {("SNS", str(topic))})
        if at_limit:
            out.add(Notice(LIMIT_AT, at_limit))
        return frozenset(out)

    def desired(
        self, req: Request[BudgetParams], observed: Observed[BudgetOut, BudgetLive]
    ) -> BudgetLive:
        return BudgetLive(
            usd(req.params.limit),
            TIME_UNIT[req.params.period],
            (scope(req.ctx.cluster),),
            self._notices_wanted(req.ctx, req.params),
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
            observed.live.spent,
        )

    # -- acting -------------------------------------------------------------------------
    def _document(self, ctx: Context, params: BudgetParams) -> BudgetTypeDef:
        document: BudgetTypeDef = {
            "BudgetName": params.name,
            "BudgetLimit": {"Amount": usd(params.limit), "Unit": "USD"},
            "CostFilters": {"TagKeyValue": [scope(ctx.cluster)]},
            "TimeUnit": TIME_UNIT[params.period],
            "BudgetType": "COST",
        }
        return document

    @staticmethod
    def _notification(notice: Notice) -> NotificationTypeDef:
        return {
            "NotificationType": "ACTUAL",
            "ComparisonOperator": "GREATER_THAN",
            "Threshold": notice.threshold,
            "ThresholdType": "PERCENTAGE",
        }

    @staticmethod
    def _subscribers(notice: Notice) -> list[SubscriberTypeDef]:
        return [{"SubscriptionType": t, "Address": a} for t, a in sorted(notice.subscribers)]

    def create(self, req: Request[BudgetParams]) -> BudgetOut:
        client = req.ctx.aws.client("budgets")
        document = self._document(req.ctx, req.params)
        if req.params.period == "total":
            # From today: a lifetime, not a calendar year (ANNUALLY alone starts on January 1).
            today = datetime.fromtimestamp(time.time() // 86400 * 86400, UTC)
            document["TimePeriod"] = {"Start": today}
        try:
            client.create_budget(
                AccountId=self._account(req.ctx),
                Budget=document,
                NotificationsWithSubscribers=[
                    {"Notification": self._notification(n), "Subscribers": self._subscribers(n)}
                    for n in sorted(
                        self._notices_wanted(req.ctx, req.params), key=lambda n: n.threshold
                    )
                ],
                ResourceTags=req.ctx.tag_list(req.params.tags),
            )
        except AlreadyExists as exc:
            # Made by a run that lost the answer (ours by tag: then the next plan mends any
            # difference), or someone else's.
            if not self._ours(req.ctx, self._tags(req.ctx, req.params.name)):
                raise Foreign(
                    f"budget {req.params.name} exists and is not fmctl cluster {req.ctx.cluster}'s",
                    hint="delete it (aws budgets delete-budget) or pick another cluster name",
                ) from exc
        return BudgetOut(req.params.name)

    def update(
        self,
        req: Request[BudgetParams],
        observed: Observed[BudgetOut, BudgetLive],
        changes: Sequence[FieldChange],
    ) -> BudgetOut:
        client, account = req.ctx.aws.client("budgets"), self._account(req.ctx)
        paths = {c.path for c in changes}
        if paths & {"limit", "time_unit", "scope"}:
            document = self._document(req.ctx, req.params)
            live = self._budget(req.ctx, req.params.name)
            start = live.get("TimePeriod", {}).get("Start") if live else None
            if req.params.period == "total" and start is not None:
                document["TimePeriod"] = {"Start": start}
            client.update_budget(AccountId=account, NewBudget=document)
        if "notices" in paths:
            self._renotify(req.ctx, req.params, observed.live.notices)
        for change in changes:
            if change.path == "tags":
                add, remove = tag_updates(change.before, change.after)
                arn = self._arn(req.ctx, req.params.name)
                if add:
                    client.tag_resource(
                        ResourceARN=arn,
                        ResourceTags=[{"Key": k, "Value": v} for k, v in add.items()],
                    )
                if remove:
                    client.untag_resource(ResourceARN=arn, ResourceTagKeys=remove)
        return observed.outputs

    def _renotify(self, ctx: Context, params: BudgetParams, live: frozenset[Notice]) -> None:
        """Bring the notifications to the wanted ones: new thresholds made with their
        subscribers, gone ones deleted, and the subscribers of the rest mended one by one."""
        client, account = ctx.aws.client("budgets"), self._account(ctx)
        have = {n.threshold: n for n in live}
        want = {n.threshold: n for n in self._notices_wanted(ctx, params)}
        base = {"AccountId": account, "BudgetName": params.name}
        for threshold, notice in want.items():
            notification = self._notification(notice)
            if threshold not in have:
                client.create_notification(
                    **base, Notification=notification, Subscribers=self._subscribers(notice)
                )
                continue
            old = have[threshold].subscribers
            for kind, address in sorted(notice.subscribers - old):
                client.create_subscriber(
                    **base,
                    Notification=notification,
                    Subscriber={"SubscriptionType": kind, "Address": address},
                )
            for kind, address in sorted(old - notice.subscribers):
                client.delete_subscriber(
                    **base,
                    Notification=notification,
                    Subscriber={"SubscriptionType": kind, "Address": address},
                )
        for threshold, notice in have.items():
            if threshold not in want:
                client.delete_notification(**base, Notification=self._notification(notice))

    def find_owned(self, ctx: Context) -> list[Owned]:
        client = ctx.aws.client("budgets")
        out = []
        wanted = budget_name(ctx.cluster, ctx.region)
        pages = client.get_paginator("describe_budgets").paginate(AccountId=self._account(ctx))
        for page in pages:
            for budget in page.get("Budgets", []):
                if budget["BudgetName"] != wanted:
                    continue
                tags = self._tags(ctx, wanted)
                if self._ours(ctx, tags):
                    out.append(self.owned_item(tags.get(RESOURCE_TAG) or "?", wanted))
        return out

    def delete(self, ctx: Context, owned: Owned) -> None:
        """Delete the budget, its notifications and subscribers with it (at once: no
        state to wait on)."""
        with contextlib.suppress(NotFound):
            ctx.aws.client("budgets").delete_budget(
                AccountId=self._account(ctx), BudgetName=owned.id
            )
