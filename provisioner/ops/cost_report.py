"""`fmctl cost NAME`: what the cluster costs per hour now, from what runs (its instances,
NAT gateways and EKS control plane, found by tag and priced as `plan` prices), and what it
has cost so far, from Cost Explorer by the cluster's tag.

Cost Explorer (the API in us-east-1; the Billing and Cost Management User Guide): a
user-defined tag only shows in its data once it is activated as a cost allocation tag
(ListCostAllocationTags says whether; UpdateCostAllocationTagsStatus activates it, from the
management account), and only for costs after that; its data is updated at least once a
day; each API request costs $0.01. So `cost` checks the tag first, says what to do when it
is not active, and asks GetCostAndUsage once (MONTHLY, from the cluster's creation).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from provisioner.catalog.eks_versions import CALENDAR
from provisioner.catalog.prices import Market
from provisioner.drivers.aws import Aws, error_code, translate
from provisioner.estimate.cost import (
    EksControlPlane,
    Instance,
    NatGateway,
    Part,
    PriceBook,
    Quote,
    Unpriced,
)
from provisioner.resources.tags import OWNER_TAG

#: Where Cost Explorer's API answers.
CE_REGION = "us-east-1"
#: What one Cost Explorer request costs (its pricing), said before it is spent.
CE_REQUEST_USD = 0.01
#: The tags that name an instance's cluster: fmctl's own (PCS node groups, ParallelCluster's
#: head node), EKS's on a managed node group's instances, ParallelCluster's on its nodes.
CLUSTER_TAGS = (OWNER_TAG, "eks:cluster-name", "parallelcluster:cluster-name")
#: DescribeInstances' InstanceLifecycle -> the market an instance is billed in.
LIFECYCLE: dict[str, Market] = {"spot": "Spot", "capacity-block": "CapacityBlock"}


@dataclass(frozen=True)
class SoFar:
    """Cost Explorer's answer: the total since ``since``, or why there is none."""

    usd: float | None
    since: str
    note: str


@dataclass(frozen=True)
class BudgetNow:
    """The cluster's budget as AWS Budgets has it: its limit and period, what it counts as
    spent, and which notifications have gone out (ALARM)."""

    name: str
    limit: float
    period: str
    spent: float
    alarms: tuple[float, ...]

    def as_data(self) -> dict[str, Any]:
        """JSON-able form (`cost -o json` and `status -o json`: ``budget``)."""
        return {
            "name": self.name,
            "limit": self.limit,
            "period": self.period,
            "spent": self.spent,
            "alarms": list(self.alarms),
        }

    def line(self) -> str:
        """One line of text."""
        period = "this month" if self.period == "monthly" else "this year"
        told = ", ".join(f"{a:g}%" for a in self.alarms) or "none yet"
        return (
            f"budget {self.name}: ${self.spent:,.2f} of ${self.limit:,.2f} {period}, as AWS "
            f"Budgets counts it (notifications sent: {told})"
        )


@dataclass(frozen=True)
class CostNow:
    """The cluster's cost: per hour now, line by line, and so far."""

    cluster: str
    region: str
    lines: tuple[tuple[Part, Quote | Unpriced], ...]
    so_far: SoFar | None
    budget: BudgetNow | None = None

    @property
    def hourly(self) -> float:
        """The priced lines' sum (unpriced ones left out, and listed)."""
        return sum(q.usd_per_hour * part.count for part, q in self.lines if isinstance(q, Quote))

    def as_data(self) -> dict[str, Any]:
        """`cost -o json`."""
        return {
            "cluster": self.cluster,
            "region": self.region,
            "currency": "USD",
            "hourly": round(self.hourly, 2),
            "complete": all(isinstance(q, Quote) for _, q in self.lines),
            "items": [
                {
                    "resource": part.resource,
                    "description": part.description,
                    "count": part.count,
                    "hourly": round(q.usd_per_hour * part.count, 2)
                    if isinstance(q, Quote)
                    else None,
                    "source": q.source if isinstance(q, Quote) else None,
                    **({"unpriced": q.why} if isinstance(q, Unpriced) else {}),
                }
                for part, q in self.lines
            ],
            "soFar": None
            if self.so_far is None
            else {"usd": self.so_far.usd, "since": self.so_far.since, "note": self.so_far.note},
            "budget": None if self.budget is None else self.budget.as_data(),
        }


def _tags(item: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags", [])}


def running_parts(aws: Aws, name: str) -> list[Part]:
    """What of the cluster is billed by the hour now: its running instances (by type and
    market), its NAT gateways and its EKS control plane."""
    ec2 = aws.client("ec2")
    counts: dict[tuple[str, Market], int] = {}
    seen: set[str] = set()
    for key in CLUSTER_TAGS:
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": f"tag:{key}", "Values": [name]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        for page in pages:
            for reservation in page["Reservations"]:
                for instance in reservation["Instances"]:
                    if instance["InstanceId"] in seen or _tags(instance).get(key) != name:
                        continue
                    seen.add(instance["InstanceId"])
                    lifecycle = str(instance.get("InstanceLifecycle"))
                    market: Market = LIFECYCLE.get(lifecycle, "OnDemand")
                    itype = str(instance["InstanceType"])
                    counts[(itype, market)] = counts.get((itype, market), 0) + 1
    parts = [
        Part(f"instances/{itype}", f"{n} x {itype} ({market})", Instance(itype, market), n)
        for (itype, market), n in sorted(counts.items())
    ]
    gateways = ec2.describe_nat_gateways(Filter=[{"Name": f"tag:{OWNER_TAG}", "Values": [name]}])[
        "NatGateways"
    ]
    for gateway in gateways:
        if (
            gateway.get("State") in ("pending", "available")
            and _tags(gateway).get(OWNER_TAG) == name
        ):
            parts.append(Part(str(gateway["NatGatewayId"]), "NAT gateway", NatGateway()))
    eks = aws.client("eks")
    if name in eks.list_clusters()["clusters"]:
        cluster = eks.describe_cluster(name=name)["cluster"]
        if cluster.get("tags", {}).get(OWNER_TAG) == name:
            policy = str(cluster.get("upgradePolicy", {}).get("supportType", "STANDARD"))
            release = CALENDAR.get(str(cluster.get("version")))
            support = release.billed(date.today(), policy) if release else "standard"
            parts.append(Part(f"eks/{name}", "EKS control plane", EksControlPlane(support)))
    return parts


def so_far(aws: Aws, name: str, since: float | None) -> SoFar:
    """What Cost Explorer says the cluster has cost since ``since`` (its creation)."""
    start = datetime.fromtimestamp(since, UTC).date() if since else date.today().replace(day=1)
    end = date.today() + timedelta(days=1)
    ce = aws.in_region(CE_REGION).client("ce")
    try:
        listed = ce.list_cost_allocation_tags(TagKeys=[OWNER_TAG], Type="UserDefined")
        status = next(
            (
                t.get("Status")
                for t in listed.get("CostAllocationTags", [])
                if t["TagKey"] == OWNER_TAG
            ),
            None,
        )
        if status != "Active":
            return SoFar(
                None,
                start.isoformat(),
                f"{OWNER_TAG} is not an active cost allocation tag, so Cost Explorer has no "
                f"costs by it: activate it in the management account (Billing console, Cost "
                f"allocation tags; or aws ce update-cost-allocation-tags-status "
                f"--cost-allocation-tags-status TagKey={OWNER_TAG},Status=Active); costs from "
                "then on are counted",
            )
        answer = ce.get_cost_and_usage(
            TimePeriod={"Start": start.isoformat(), "End": end.isoformat()},
            Granularity="MONTHLY",
            Metrics=["UnblendedCost"],
            Filter={"Tags": {"Key": OWNER_TAG, "Values": [name], "MatchOptions": ["EQUALS"]}},
        )
    except Exception as exc:  # noqa: BLE001 - Cost Explorer is extra: the hourly figure stands without it
        return SoFar(None, start.isoformat(), str(translate(exc, "asking Cost Explorer")))
    periods = answer.get("ResultsByTime", [])
    if not periods:
        return SoFar(
            None,
            start.isoformat(),
            f"Cost Explorer has no costs by {OWNER_TAG} yet (it counts from the tag's "
            "activation, and its data lags up to a day)",
        )
    total = sum(
        float(period.get("Total", {}).get("UnblendedCost", {}).get("Amount", 0) or 0)
        for period in answer.get("ResultsByTime", [])
    )
    estimated = any(period.get("Estimated") for period in answer.get("ResultsByTime", []))
    note = (
        f"Cost Explorer, by {OWNER_TAG}; its data lags up to a day"
        + (", and this month's is estimated" if estimated else "")
        + f"; that question cost ${CE_REQUEST_USD + CE_REQUEST_USD:.2f} (two requests)"
    )
    return SoFar(round(total, 2), start.isoformat(), note)


def budget_now(aws: Aws, name: str) -> BudgetNow | None:
    """The cluster's budget (cost.budget), or None when it has none (read-only)."""
    from provisioner.resources.budgets import budget_name

    client, account = aws.client("budgets"), aws.account_id()
    wanted = budget_name(name, aws.region)
    try:
        found = client.describe_budget(AccountId=account, BudgetName=wanted)["Budget"]
    except Exception as exc:
        if error_code(exc) == "NotFoundException":
            return None
        raise
    notices = client.describe_notifications_for_budget(AccountId=account, BudgetName=wanted)
    spent = found.get("CalculatedSpend", {}).get("ActualSpend", {}).get("Amount", 0)
    return BudgetNow(
        wanted,
        float(found["BudgetLimit"]["Amount"]),
        str(found.get("TimeUnit", "")).lower(),
        float(spent),
        tuple(
            sorted(
                float(n["Threshold"])
                for n in notices.get("Notifications", [])
                if n.get("NotificationState") == "ALARM"
            )
        ),
    )


def cluster_cost(
    aws: Aws, book: PriceBook, name: str, since: float | None, ask_ce: bool
) -> CostNow:
    """The cluster's cost now, its budget, and (``ask_ce``) so far."""
    parts = running_parts(aws, name)
    lines = tuple((part, book.quote(aws.region, part.product)) for part in parts)
    spent = so_far(aws, name, since) if ask_ce else None
    return CostNow(name, aws.region, lines, spent, budget_now(aws, name))


def cost_of(target: Any, name: str, ask_ce: bool) -> CostNow | None:
    """`fmctl cost NAME` on ``target``: None when no resource of the cluster is found."""
    from provisioner.ops.cost import PriceListBook, cache_for
    from provisioner.ops.gc import find_clusters

    aws = target.aws(read_only=True)
    seen = find_clusters(aws).get(name)
    if seen is None:
        return None
    # Instances of every zone of the region: the Spot price of the dearest zone.
    book = PriceListBook(aws, None, cache_for(target.home))
    return cluster_cost(aws, book, name, seen.created_at, ask_ce)
