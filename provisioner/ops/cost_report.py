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

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from provisioner.catalog.eks_repair import UNVERIFIED_TAINT
from provisioner.catalog.eks_versions import CALENDAR
from provisioner.catalog.prices import Market
from provisioner.drivers.aws import Aws, AwsError, error_code, translate
from provisioner.drivers.aws_errors import NotFound
from provisioner.estimate.cost import (
    EksControlPlane,
    Instance,
    NatGateway,
    Part,
    PriceBook,
    Quote,
    Unpriced,
)
from provisioner.ops.topology import POOL_TAGS
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
class IdleShare:
    """The GPU nodes nothing is placed on now (Kubernetes: no pending or running pod asking
    for ``nvidia.com/gpu``, GpuNodeIdle's test without its 30 minutes), and their share of
    the hourly cost. ``note``: how it was read, or why it could not be."""

    idle: tuple[str, ...]
    nodes: int
    hourly: float | None
    note: str

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "idleNodes": list(self.idle),
            "gpuNodes": self.nodes,
            "hourly": None if self.hourly is None else round(self.hourly, 2),
            "note": self.note,
        }


@dataclass(frozen=True)
class CostNow:
    """The cluster's cost: per hour now, line by line, and so far."""

    cluster: str
    region: str
    lines: tuple[tuple[Part, Quote | Unpriced], ...]
    so_far: SoFar | None
    budget: BudgetNow | None = None
    idle: IdleShare | None = None

    def idle_share(self) -> float | None:
        """The idle GPU nodes' part of the priced hourly cost (None when not known)."""
        if self.idle is None or self.idle.hourly is None or self.hourly <= 0:
            return None
        return self.idle.hourly / self.hourly

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
            "idle": None
            if self.idle is None
            else {**self.idle.as_data(), "share": _rounded(self.idle_share())},
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _tags(item: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags", [])}


@dataclass(frozen=True)
class Running:
    """One of the cluster's pending or running instances: its type and market, its pool
    (ParallelCluster's queue tag, or fmctl's pool tag; "" for none) and, on the Slurm
    controller host, the kind of cluster it heads (``parallelcluster`` or ``pcs``)."""

    instance_type: str
    market: Market
    pool: str = ""
    host: str = ""

    @property
    def kind(self) -> tuple[str, Market]:
        """What prices it: (type, market)."""
        return self.instance_type, self.market


def _host(tags: dict[str, str]) -> str:
    """The kind of Slurm cluster an instance is the controller host of, or "": the tags
    ParallelCluster puts on its head node, or a PCS login node's (as ``head_node`` finds
    them)."""
    from provisioner.catalog.pcs import CLUSTER_TAG

    if tags.get("parallelcluster:node-type") == "HeadNode":
        return "parallelcluster"
    if tags.get(POOL_TAGS[1]) == "login" and CLUSTER_TAG in tags:
        return "pcs"
    return ""


def running_instances(aws: Aws, name: str) -> dict[str, Running]:
    """The cluster's pending and running instances, by id."""
    ec2 = aws.client("ec2")
    found: dict[str, Running] = {}
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
                    tags = _tags(instance)
                    if instance["InstanceId"] in found or tags.get(key) != name:
                        continue
                    lifecycle = str(instance.get("InstanceLifecycle"))
                    found[str(instance["InstanceId"])] = Running(
                        str(instance["InstanceType"]),
                        LIFECYCLE.get(lifecycle, "OnDemand"),
                        next((tags[t] for t in POOL_TAGS if tags.get(t)), ""),
                        _host(tags),
                    )
    return found


def running_parts(aws: Aws, name: str, instances: dict[str, Running] | None = None) -> list[Part]:
    """What of the cluster is billed by the hour now: its running instances (by type and
    market), its NAT gateways and its EKS control plane."""
    ec2 = aws.client("ec2")
    counts: dict[tuple[str, Market], int] = {}
    found = running_instances(aws, name) if instances is None else instances
    for running in found.values():
        counts[running.kind] = counts.get(running.kind, 0) + 1
    parts = [
        Part(f"instances/{itype}", f"{n} x {itype} ({market})", Instance(itype, market), n)
        for (itype, market), n in sorted(counts.items())
    ]
    gateways = ec2.describe_nat_gateways(Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": [name]}])[
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
    except NotFound:
        return None
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
    aws: Aws,
    book: PriceBook,
    name: str,
    since: float | None,
    ask_ce: bool,
    instances: dict[str, Running] | None = None,
) -> CostNow:
    """The cluster's cost now, its budget, and (``ask_ce``) so far (``instances``: the
    running ones, when the caller read them already)."""
    parts = running_parts(aws, name, instances)
    lines = tuple((part, book.quote(aws.region, part.product)) for part in parts)
    spent = so_far(aws, name, since) if ask_ce else None
    return CostNow(name, aws.region, lines, spent, budget_now(aws, name))


#: The GPU resource the NVIDIA device plugin advertises and pods request.
GPU_RESOURCE = "nvidia.com/gpu"


def busy_nodes(pods: list[dict[str, Any]]) -> set[str]:
    """Nodes with a pending or running pod that asks for GPUs placed on them (a container's
    requests, or its limits, which an extended resource's requests default to)."""
    busy = set()
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") not in ("Pending", "Running"):
            continue
        for container in (pod.get("spec") or {}).get("containers", []):
            wants = container.get("resources") or {}
            asked = (wants.get("requests") or {}).get(GPU_RESOURCE) or (
                wants.get("limits") or {}
            ).get(GPU_RESOURCE)
            if asked and str(asked) != "0":
                busy.add(str(node))
    return busy


def unverified_nodes(nodes: list[dict[str, Any]]) -> set[str]:
    """Nodes carrying the verify gate's startup taint (not yet passed, or failed)."""
    return {
        str(node["metadata"]["name"])
        for node in nodes
        if any(
            t.get("key") == UNVERIFIED_TAINT for t in (node.get("spec") or {}).get("taints") or []
        )
    }


def kube_idle(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    instances: dict[str, Running],
    lines: tuple[tuple[Part, Quote | Unpriced], ...],
) -> IdleShare:
    """The idle GPU nodes among ``nodes`` (those advertising ``nvidia.com/gpu``), priced by
    their instance (the node's providerID, ``aws:///ZONE/INSTANCE``) as ``lines`` price it.
    A node that still carries the verify gate's startup taint is idle whatever runs on it:
    it takes no work of the user's until it has passed, and what asks for its GPUs meanwhile
    is the gate's own Job (as on Slurm, where a verifying node is drained or reserved to
    root: ``slurm_use``)."""
    busy = busy_nodes(pods) - unverified_nodes(nodes)
    gpu_nodes = [
        n
        for n in nodes
        if str(((n.get("status") or {}).get("capacity") or {}).get(GPU_RESOURCE, "0")) != "0"
    ]
    idle = sorted(
        str(n["metadata"]["name"]) for n in gpu_nodes if n["metadata"]["name"] not in busy
    )
    kinds = []
    for node in gpu_nodes:
        if node["metadata"]["name"] in idle:
            instance = str((node.get("spec") or {}).get("providerID", "")).rsplit("/", 1)[-1]
            kinds.append(instances[instance].kind if instance in instances else None)
    note = (
        "Kubernetes: GPU nodes with no pending or running pod that asks for GPUs, or not yet"
        f" through the verify gate (taint {UNVERIFIED_TAINT})"
    )
    return IdleShare(tuple(idle), len(gpu_nodes), _priced(kinds, lines), note)


def _priced(
    kinds: list[tuple[str, Market] | None], lines: tuple[tuple[Part, Quote | Unpriced], ...]
) -> float | None:
    """What instances of ``kinds`` cost per hour, as ``lines`` price them; None when one
    cannot be priced (an idle node fmctl cannot price leaves the share unknown)."""
    quotes = {
        (part.product.instance_type, part.product.market): q
        for part, q in lines
        if isinstance(part.product, Instance) and isinstance(q, Quote)
    }
    total = 0.0
    for kind in kinds:
        quote = quotes.get(kind) if kind is not None else None
        if quote is None:
            return None
        total += quote.usd_per_hour
    return total


def eks_idle(
    target: Any, name: str, cost: CostNow, instances: dict[str, Running]
) -> IdleShare | None:
    """The idle share of an EKS cluster, read through its API (None for another kind of
    cluster); an API that cannot be reached is said, not an error."""
    from urllib3.exceptions import HTTPError

    from provisioner.drivers.kube import KubeError
    from provisioner.ops.target import make_context
    from provisioner.resources.eks import EksCluster
    from provisioner.resources.kube_api import connect

    ctx = make_context(target, name, read_only=True)
    cluster = EksCluster().describe(ctx)
    if cluster is None or cluster.get("status") != "ACTIVE":
        return None
    try:
        api = connect(ctx, cluster["endpoint"], cluster["certificateAuthority"]["data"])
        try:
            nodes, pods = api.list("v1", "Node"), api.list("v1", "Pod")
        finally:
            api.close() if hasattr(api, "close") else None
    except (KubeError, AwsError, HTTPError, OSError) as exc:
        # A private endpoint, or no access entry for this caller: said, not fatal.
        return IdleShare((), 0, None, f"the cluster's API could not be read: {exc}")
    return kube_idle(nodes, pods, instances, cost.lines)


#: How `fmctl cost` reads the idle nodes of a Slurm cluster.
SLURM_IDLE_NOTE = (
    "Slurm: GPU nodes that run no job, or only the verify gate's NCCL pair (sinfo on the"
    " controller, through Run Command)"
)


def gpu_pools(instances: dict[str, Running]) -> dict[str, tuple[str, Market]]:
    """The pools of the cluster's GPU instances (the controller host's aside), each with
    what prices its instances: (type, market)."""
    from provisioner.catalog import load_catalog

    catalog, out = load_catalog(), dict[str, tuple[str, Market]]()
    for running in sorted(instances.values(), key=lambda r: (r.pool, r.kind)):
        found = catalog.get(running.instance_type)
        if running.pool and not running.host and found is not None and found.is_gpu:
            out.setdefault(running.pool, running.kind)
    return out


def slurm_share(
    text: str,
    pools: dict[str, tuple[str, Market]],
    lines: tuple[tuple[Part, Quote | Unpriced], ...],
) -> IdleShare:
    """cluster-health.sh's answer -> the GPU pools' nodes that run no job, priced as
    ``lines`` price their pool's instances (None when one is not priced)."""
    from provisioner.check.health import slurm_use

    use = slurm_use(text, tuple(sorted(pools)))
    pool_of = dict(use.nodes)
    hourly = _priced([pools[pool_of[node]] for node in use.idle], lines)
    return IdleShare(use.idle, len(use.nodes), hourly, SLURM_IDLE_NOTE)


def slurm_idle(
    target: Any, name: str, cost: CostNow, instances: dict[str, Running]
) -> IdleShare | None:
    """The idle share of a ParallelCluster or PCS cluster: its GPU pools' nodes that run no
    job, as Slurm's controller says (cluster-health.sh on the head or login node, through
    Run Command, as `fmctl health` reads it). None for a cluster with no Slurm controller
    host running; a controller that cannot be asked is said, not an error."""
    from provisioner.check.health_gather import health_script
    from provisioner.ops.target import make_context
    from provisioner.resources.ssm_run import run_script

    hosts = sorted(iid for iid, r in instances.items() if r.host)
    if not hosts:
        return None
    pools = gpu_pools(instances)
    if not pools:
        return IdleShare((), 0, 0.0, SLURM_IDLE_NOTE)
    # Run Command is not a read to AWS, though the script only reads (as `fmctl health`).
    ctx = make_context(target, name)
    try:
        # A minute at most: `cost` should not wait on an agent that is offline.
        done = run_script(ctx, hosts[0], health_script(), f"fmctl cost {name}", 5.0, 60, wait=60.0)
    except Exception as exc:
        if error_code(exc) is None and not isinstance(exc, AwsError):
            raise
        # No ssm:SendCommand for this caller, or no agent on the host: said, not fatal.
        why = translate(exc, "Slurm's controller could not be asked")
        return IdleShare((), 0, None, f"{why}" + (f" ({why.hint})" if why.hint else ""))
    if done["Status"] != "Success":
        said = str(done.get("StandardErrorContent") or "").strip()[-300:]
        return IdleShare(
            (), 0, None, f"sinfo on {hosts[0]} ended {done['Status']}: {said or 'no output'}"
        )
    return slurm_share(str(done.get("StandardOutputContent") or ""), pools, cost.lines)


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
    # Read once: the hourly lines and the idle nodes' prices are of the same instances.
    instances = running_instances(aws, name)
    cost = cluster_cost(aws, book, name, seen.created_at, ask_ce, instances)
    idle = eks_idle(target, name, cost, instances) or slurm_idle(target, name, cost, instances)
    return dataclasses.replace(cost, idle=idle)
