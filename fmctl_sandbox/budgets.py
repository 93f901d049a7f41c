"""AWS Budgets, which moto has only in part (no tags, no subscribers, no updates, no
spend), with a spend a test can set so that notifications fire.

From botocore's Budgets model (2016-10-20, JSON 1.1, target ``AWSBudgetServiceGateway``)
and the API reference:

- Budget names are unique in an account: CreateBudget of one that exists answers
  DuplicateRecordException; a missing budget, notification or subscriber NotFoundException.
- A budget has a ``BudgetLimit`` (or ``PlannedBudgetLimits``), a ``TimeUnit`` and a
  ``BudgetType``; without a ``TimePeriod`` it starts at the start of its period (MONTHLY: the
  1st of the month; ANNUALLY: January 1) and ends 2087-06-15.
- A budget has up to ten notifications; each needs at least one subscriber, one SNS topic and
  up to 10 email addresses at most (InvalidParameterException otherwise).
- Tags: ``ResourceTags`` at creation, and Tag/Untag/ListTagsForResource on
  ``arn:aws:budgets::ACCOUNT:budget/NAME``.
- When the actual spend passes an ACTUAL notification's threshold (GREATER_THAN; percent of
  the limit or an absolute value), Budgets sends it once to each subscriber and the
  notification is in ALARM. To an SNS topic it publishes as ``budgets.amazonaws.com``: the
  topic's access policy must allow that service ``sns:Publish``, and a topic encrypted with
  a KMS key needs the key's policy to let it use the key (the Billing User Guide, "Creating
  an Amazon SNS topic for budget notifications"; the SNS Developer Guide on encrypted
  topics). A delivery that policy refuses is lost, as it is in AWS.

``SetBudgetSpend`` (the sandbox's own operation) sets a budget's actual spend and answers
what each notification it crossed sent, and where.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from fmctl_sandbox import protocol as p
from fmctl_sandbox.protocol import Call

Answer = tuple[int, dict[str, str], bytes]
PRINCIPAL = "budgets.amazonaws.com"
#: The end AWS gives a budget without one (the Budget shape's TimePeriod documentation).
END_OF_TIME = datetime(2087, 6, 15, tzinfo=UTC).timestamp()
MAX_NOTIFICATIONS, MAX_EMAILS, MAX_TOPICS = 10, 10, 1
OPERATIONS = (
    "CreateBudget",
    "DescribeBudget",
    "DescribeBudgets",
    "UpdateBudget",
    "DeleteBudget",
    "CreateNotification",
    "DeleteNotification",
    "DescribeNotificationsForBudget",
    "CreateSubscriber",
    "DeleteSubscriber",
    "DescribeSubscribersForNotification",
    "ListTagsForResource",
    "TagResource",
    "UntagResource",
)


class BudgetsError(Exception):
    """An error answer: its code and message (all 400s but InternalError)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class Notice:
    """One notification, its subscribers and its state."""

    notification: dict[str, Any]
    subscribers: list[dict[str, str]]
    state: str = "OK"


@dataclass
class Budget:
    """One budget as the account holds it."""

    document: dict[str, Any]
    notices: list[Notice] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    spend: float = 0.0
    updated: float = field(default_factory=time.time)


def _key(notification: dict[str, Any]) -> tuple[str, str, float, str]:
    """What tells two notifications apart."""
    return (
        str(notification.get("NotificationType")),
        str(notification.get("ComparisonOperator")),
        float(notification.get("Threshold", 0)),
        str(notification.get("ThresholdType") or "PERCENTAGE"),
    )


def _check_subscribers(subscribers: list[dict[str, str]]) -> None:
    if not subscribers:
        raise BudgetsError("InvalidParameterException", "A notification needs a subscriber.")
    emails = [s for s in subscribers if s.get("SubscriptionType") == "EMAIL"]
    topics = [s for s in subscribers if s.get("SubscriptionType") == "SNS"]
    if len(emails) > MAX_EMAILS or len(topics) > MAX_TOPICS:
        raise BudgetsError(
            "InvalidParameterException",
            "A notification can have one SNS subscriber and up to 10 email subscribers.",
        )
    for subscriber in topics:
        if not str(subscriber.get("Address", "")).startswith("arn:"):
            raise BudgetsError("InvalidParameterException", "An SNS subscriber is a topic ARN.")


def _start(time_unit: str, now: float) -> float:
    day = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if time_unit == "MONTHLY":
        day = day.replace(day=1)
    elif time_unit == "QUARTERLY":
        day = day.replace(day=1, month=(day.month - 1) // 3 * 3 + 1)
    elif time_unit == "ANNUALLY":
        day = day.replace(day=1, month=1)
    return day.timestamp()


@dataclass
class Budgets:
    """Every account's budgets: (account, name) -> budget."""

    budgets: dict[tuple[str, str], Budget] = field(default_factory=dict)

    def handles(self, call: Call) -> bool:
        """True for the calls this shim answers (all of Budgets that fmctl calls)."""
        return call.service == "budgets" and call.action in OPERATIONS

    def handle(self, call: Call) -> Answer:
        """Answer one call."""
        try:
            method = getattr(self, "_" + call.action)
            return p.json_response(method(call.account, call.params) or {})
        except BudgetsError as err:
            return p.json_error(400, err.code, err.message)

    # -- budgets --------------------------------------------------------------------------
    def _get(self, account: str, name: str) -> Budget:
        found = self.budgets.get((account, name))
        if found is None:
            raise BudgetsError(
                "NotFoundException", f"Unable to get budget: {name} - the budget doesn't exist."
            )
        return found

    def _view(self, budget: Budget) -> dict[str, Any]:
        document = dict(budget.document)
        amount = f"{budget.spend:.2f}"
        document["CalculatedSpend"] = {
            "ActualSpend": {"Amount": amount, "Unit": "USD"},
            "ForecastedSpend": {"Amount": amount, "Unit": "USD"},
        }
        document["LastUpdatedTime"] = budget.updated
        return document

    @staticmethod
    def _document(params: dict[str, Any]) -> dict[str, Any]:
        document = dict(params)
        if "BudgetLimit" not in document and "PlannedBudgetLimits" not in document:
            raise BudgetsError("InvalidParameterException", "A budget needs a BudgetLimit.")
        if not document.get("TimeUnit") or not document.get("BudgetType"):
            raise BudgetsError("InvalidParameterException", "TimeUnit and BudgetType are required.")
        period = dict(document.get("TimePeriod") or {})
        period.setdefault("Start", _start(str(document["TimeUnit"]), time.time()))
        period.setdefault("End", END_OF_TIME)
        if float(period["Start"]) >= float(period["End"]):
            raise BudgetsError("InvalidParameterException", "The start must come before the end.")
        document["TimePeriod"] = period
        return document

    def _CreateBudget(self, account: str, params: dict[str, Any]) -> None:
        document = self._document(params["Budget"])
        name = str(document["BudgetName"])
        if (account, name) in self.budgets:
            raise BudgetsError(
                "DuplicateRecordException", f"Error creating budget: {name} - the budget exists."
            )
        entries = list(params.get("NotificationsWithSubscribers") or [])
        if len(entries) > MAX_NOTIFICATIONS:
            raise BudgetsError("InvalidParameterException", "A budget has 10 notifications.")
        notices = []
        for entry in entries:
            _check_subscribers(list(entry.get("Subscribers") or []))
            notices.append(Notice(dict(entry["Notification"]), list(entry["Subscribers"])))
        tags = {t["Key"]: t["Value"] for t in params.get("ResourceTags") or []}
        self.budgets[(account, name)] = Budget(document, notices, tags)

    def _DescribeBudget(self, account: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"Budget": self._view(self._get(account, str(params["BudgetName"])))}

    def _DescribeBudgets(self, account: str, params: dict[str, Any]) -> dict[str, Any]:
        names = sorted(n for a, n in self.budgets if a == account)
        start = int(params.get("NextToken") or 0)
        size = int(params.get("MaxResults") or 100)
        page = names[start : start + size]
        out: dict[str, Any] = {"Budgets": [self._view(self.budgets[(account, n)]) for n in page]}
        if start + size < len(names):
            out["NextToken"] = str(start + size)
        return out

    def _UpdateBudget(self, account: str, params: dict[str, Any]) -> None:
        new = dict(params["NewBudget"])
        budget = self._get(account, str(new["BudgetName"]))
        if "TimePeriod" not in new:
            new["TimePeriod"] = budget.document["TimePeriod"]
        budget.document = self._document(new)
        budget.updated = time.time()

    def _DeleteBudget(self, account: str, params: dict[str, Any]) -> None:
        name = str(params["BudgetName"])
        self._get(account, name)
        del self.budgets[(account, name)]  # its notifications, subscribers and tags with it

    # -- notifications and subscribers ----------------------------------------------------
    def _notice(self, budget: Budget, notification: dict[str, Any]) -> Notice:
        for notice in budget.notices:
            if _key(notice.notification) == _key(notification):
                return notice
        raise BudgetsError("NotFoundException", "Unable to find the notification.")

    def _CreateNotification(self, account: str, params: dict[str, Any]) -> None:
        budget = self._get(account, str(params["BudgetName"]))
        wanted = dict(params["Notification"])
        if any(_key(n.notification) == _key(wanted) for n in budget.notices):
            raise BudgetsError("DuplicateRecordException", "The notification exists.")
        if len(budget.notices) >= MAX_NOTIFICATIONS:
            raise BudgetsError("InvalidParameterException", "A budget has 10 notifications.")
        subscribers = list(params.get("Subscribers") or [])
        _check_subscribers(subscribers)
        budget.notices.append(Notice(wanted, subscribers))

    def _DeleteNotification(self, account: str, params: dict[str, Any]) -> None:
        budget = self._get(account, str(params["BudgetName"]))
        budget.notices.remove(self._notice(budget, dict(params["Notification"])))

    def _DescribeNotificationsForBudget(
        self, account: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        budget = self._get(account, str(params["BudgetName"]))
        return {
            "Notifications": [
                {**n.notification, "NotificationState": n.state} for n in budget.notices
            ]
        }

    def _CreateSubscriber(self, account: str, params: dict[str, Any]) -> None:
        budget = self._get(account, str(params["BudgetName"]))
        notice = self._notice(budget, dict(params["Notification"]))
        subscriber = dict(params["Subscriber"])
        if subscriber in notice.subscribers:
            raise BudgetsError("DuplicateRecordException", "The subscriber exists.")
        _check_subscribers([*notice.subscribers, subscriber])
        notice.subscribers.append(subscriber)

    def _DeleteSubscriber(self, account: str, params: dict[str, Any]) -> None:
        budget = self._get(account, str(params["BudgetName"]))
        notice = self._notice(budget, dict(params["Notification"]))
        subscriber = dict(params["Subscriber"])
        if subscriber not in notice.subscribers:
            raise BudgetsError("NotFoundException", "Unable to find the subscriber.")
        notice.subscribers.remove(subscriber)

    def _DescribeSubscribersForNotification(
        self, account: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        budget = self._get(account, str(params["BudgetName"]))
        return {"Subscribers": list(self._notice(budget, dict(params["Notification"])).subscribers)}

    # -- tags -----------------------------------------------------------------------------
    def _by_arn(self, account: str, arn: str) -> Budget:
        prefix = f"arn:aws:budgets::{account}:budget/"
        if not arn.startswith(prefix):
            raise BudgetsError("NotFoundException", f"No resource {arn}.")
        return self._get(account, arn[len(prefix) :])

    def _ListTagsForResource(self, account: str, params: dict[str, Any]) -> dict[str, Any]:
        tags = self._by_arn(account, str(params["ResourceARN"])).tags
        return {"ResourceTags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}

    def _TagResource(self, account: str, params: dict[str, Any]) -> None:
        budget = self._by_arn(account, str(params["ResourceARN"]))
        budget.tags.update({t["Key"]: t["Value"] for t in params.get("ResourceTags") or []})

    def _UntagResource(self, account: str, params: dict[str, Any]) -> None:
        budget = self._by_arn(account, str(params["ResourceARN"]))
        for key in params.get("ResourceTagKeys") or []:
            budget.tags.pop(key, None)

    # -- the sandbox's own ------------------------------------------------------------------
    def set_spend(self, account: str, name: str, amount: float) -> list[tuple[Notice, Budget]]:
        """Set a budget's actual spend; the notifications it now crosses for the first
        time (each goes to ALARM; one the spend falls back under goes back to OK)."""
        budget = self._get(account, name)
        budget.spend = max(amount, 0.0)
        limit = float(budget.document.get("BudgetLimit", {}).get("Amount", 0))
        crossed = []
        for notice in budget.notices:
            n = notice.notification
            if n.get("NotificationType") != "ACTUAL":
                continue  # forecasts are AWS's own model: not judged here
            threshold = float(n.get("Threshold", 0))
            if (n.get("ThresholdType") or "PERCENTAGE") == "PERCENTAGE":
                threshold = limit * threshold / 100.0
            over = {
                "GREATER_THAN": budget.spend > threshold,
                "EQUAL_TO": budget.spend == threshold,
                "LESS_THAN": budget.spend < threshold,
            }.get(str(n.get("ComparisonOperator")), False)
            if over and notice.state == "OK":
                notice.state = "ALARM"
                crossed.append((notice, budget))
            elif not over:
                notice.state = "OK"
        return crossed


def message(budget: Budget, notice: Notice) -> tuple[str, str]:
    """The subject and text of a notification (the gist of what AWS Budgets sends)."""
    name = budget.document["BudgetName"]
    limit = budget.document.get("BudgetLimit", {}).get("Amount")
    threshold = notice.notification.get("Threshold")
    subject = f"AWS Budgets: {name} has exceeded your alert threshold"
    text = (
        f"AWS Budget Notification\n\nBudget Name: {name}\nBudget Type: Cost\n"
        f"Budgeted Amount: ${limit}\nAlert Type: ACTUAL\nAlert Threshold: > {threshold}%\n"
        f"ACTUAL Amount: ${budget.spend:.2f}\n"
    )
    return subject, text


def publish_refused(topic: dict[str, str], key_policy: str | None) -> str | None:
    """Why AWS Budgets may not publish to a topic (its attributes, and its KMS key's policy
    when it is encrypted with one), or None when it may."""
    policy = json.loads(unquote(topic.get("Policy") or "{}"))
    if not any(_allows(s, "sns:Publish") for s in _listed(policy.get("Statement"))):
        return f"the topic's access policy does not let {PRINCIPAL} sns:Publish"
    key = topic.get("KmsMasterKeyId")
    if not key:
        return None
    if key_policy is None:
        return f"the topic's KMS key {key} is not one Budgets can be granted (an AWS managed key)"
    document = json.loads(key_policy)
    for action in ("kms:GenerateDataKey", "kms:Decrypt"):
        if not any(_allows(s, action) for s in _listed(document.get("Statement"))):
            return f"the topic's KMS key policy does not let {PRINCIPAL} {action}"
    return None


def _allows(statement: dict[str, Any], action: str) -> bool:
    import fnmatch

    principal = statement.get("Principal", {})
    services = _listed(principal.get("Service")) if isinstance(principal, dict) else []
    actions = [a.lower() for a in _listed(statement.get("Action"))]
    return (
        statement.get("Effect") == "Allow"
        and PRINCIPAL in services
        and any(fnmatch.fnmatchcase(action.lower(), a) for a in actions)
    )


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
