"""What a cluster costs per hour, and until its ttl: every billable part of the plan priced by
a price book (the AWS Price List online, the table the catalog ships offline).

A part whose price is unknown stays in the list, unpriced, with the reason; the totals then
say they leave it out. Pools are priced at their full size (``count``), the most the cluster
can cost; a pool that idles lower (``minCount``) says what it costs there too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any, Protocol

from provisioner.catalog.eks_versions import CALENDAR
from provisioner.catalog.prices import CURRENCY, Market
from provisioner.spec.model import CapacityType, ClusterSpec, GpuPool
from provisioner.validate.rules.general import parse_ttl


@dataclass(frozen=True)
class Instance:
    """EC2 instances of one type, paid for in one market."""

    instance_type: str
    market: Market


@dataclass(frozen=True)
class NatGateway:
    """One NAT gateway (hourly; data processed is billed per GB on top)."""


@dataclass(frozen=True)
class EksControlPlane:
    """One EKS cluster's control plane, in standard or extended support."""

    support: str


@dataclass(frozen=True)
class KmsKey:
    """One customer managed KMS key (its storage; requests are billed per 10,000 on top)."""


@dataclass(frozen=True)
class Unpriceable:
    """A part fmctl knows is billed but has no source to price it from yet."""

    what: str
    why: str


Product = Instance | NatGateway | EksControlPlane | KmsKey | Unpriceable


@dataclass(frozen=True)
class Quote:
    """An hourly rate and where it was read."""

    usd_per_hour: float
    source: str


@dataclass(frozen=True)
class Unpriced:
    """Why a part has no price."""

    why: str


class PriceBook(Protocol):
    """Where prices come from."""

    #: True when nothing is asked of AWS (the shipped table).
    offline: bool
    #: The date of the prices, where the book is a table of one date (ISO).
    as_of: str | None

    def quote(self, region: str, product: Product) -> Quote | Unpriced:
        """The hourly rate of one unit of ``product`` in ``region``."""
        ...


@dataclass(frozen=True)
class Part:
    """One billable part of the plan: a resource, what it is, how many."""

    resource: str
    description: str
    product: Product
    count: int = 1
    #: Units when the pool idles (minCount), where lower than ``count``.
    idle_count: int | None = None
    note: str | None = None


@dataclass(frozen=True)
class CostItem:
    """One part, priced (or not, with why)."""

    part: Part
    quote: Quote | Unpriced

    @property
    def hourly(self) -> float | None:
        """The part's hourly cost at its full size; None when unpriced."""
        if isinstance(self.quote, Unpriced):
            return None
        return self.quote.usd_per_hour * self.part.count

    def as_data(self) -> dict[str, Any]:
        """JSON-able: the resource, its hourly cost, the source (or why it has none)."""
        data: dict[str, Any] = {
            "resource": self.part.resource,
            "description": self.part.description,
            "count": self.part.count,
            "hourly": _cents(self.hourly),
        }
        if isinstance(self.quote, Quote):
            data["unitHourly"] = self.quote.usd_per_hour
            data["source"] = self.quote.source
            if self.part.idle_count is not None:
                data["idleHourly"] = _cents(self.quote.usd_per_hour * self.part.idle_count)
        else:
            data["source"] = None
            data["unpriced"] = self.quote.why
        if self.part.note:
            data["note"] = self.part.note
        return data


@dataclass(frozen=True)
class CostEstimate:
    """The plan's cost: per hour, until the ttl, item by item."""

    items: tuple[CostItem, ...]
    offline: bool
    #: Hours in metadata.ttl; None without one.
    ttl_hours: float | None
    #: The date of the prices, for a dated table (offline).
    as_of: str | None = None

    @property
    def hourly(self) -> float:
        """The priced items' hourly sum (unpriced ones are left out, and listed)."""
        return sum(item.hourly or 0.0 for item in self.items)

    @property
    def until_ttl(self) -> float | None:
        """What the cluster costs until its ttl tears it down; None without a ttl."""
        return None if self.ttl_hours is None else self.hourly * self.ttl_hours

    @property
    def unpriced(self) -> list[CostItem]:
        """The items without a price."""
        return [item for item in self.items if item.hourly is None]

    def as_data(self) -> dict[str, Any]:
        """``plan -o json``'s ``cost``."""
        return {
            "currency": CURRENCY,
            "hourly": _cents(self.hourly),
            "untilTtl": _cents(self.until_ttl),
            "ttlHours": self.ttl_hours,
            "offline": self.offline,
            "asOf": self.as_of,
            "complete": not self.unpriced,
            "items": [item.as_data() for item in self.items],
        }


def _cents(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def estimate(
    spec: ClusterSpec,
    resources: Iterable[tuple[str, str]],
    book: PriceBook,
    today: date,
    eks_policy: str = "STANDARD",
) -> CostEstimate:
    """Price every billable part of the plan (``resources``: its ids and kinds;
    ``eks_policy``: as ``billable_parts``)."""
    parts = billable_parts(spec, dict(resources), today, eks_policy)
    region = spec.metadata.region
    items = tuple(CostItem(part, _quote(book, region, part.product)) for part in parts)
    ttl = parse_ttl(spec.metadata.ttl) if spec.metadata.ttl else None
    return CostEstimate(items, book.offline, None if ttl is None else ttl / 3600, book.as_of)


def _quote(book: PriceBook, region: str, product: Product) -> Quote | Unpriced:
    if isinstance(product, Unpriceable):
        return Unpriced(product.why)
    return book.quote(region, product)


_MARKET: dict[CapacityType, Market] = {
    "on-demand": "OnDemand",
    # An On-Demand Capacity Reservation bills at the On-Demand rate, used or not.
    "reservation": "OnDemand",
    "spot": "Spot",
    "capacity-block": "CapacityBlock",
}
_MARKET_NOTE: dict[CapacityType, str] = {
    "reservation": "a capacity reservation bills at this rate whether its instances run or not",
    "capacity-block": "the block's reservation fee was paid up front when it was bought; "
    "only the operating system's hourly fee is here",
    "spot": "Spot prices move; this is the latest in the spec's zone",
}


def billable_parts(
    spec: ClusterSpec, kinds: dict[str, str], today: date, eks_policy: str = "STANDARD"
) -> list[Part]:
    """What in the plan AWS bills by the hour: the GPU pools, the head, login and system
    nodes, the NAT gateways, the file system fmctl makes, the EKS control plane, the PCS
    controller and the KMS keys. ``kinds``: the plan's resource ids and their kinds;
    ``eks_policy``: the EKS cluster's upgradePolicy.supportType."""
    parts: list[Part] = []
    head_type = spec.compute.head_node.instance_type
    by_kind: dict[str, list[str]] = {}
    for rid, kind in kinds.items():
        by_kind.setdefault(kind, []).append(rid)
    for rid in by_kind.get("natgw", []):
        parts.append(Part(rid, "NAT gateway", NatGateway()))
    for rid in by_kind.get("eks-cluster", []):
        version = spec.kubernetes.version
        release = CALENDAR.get(version)
        support = release.billed(today, eks_policy) if release else "standard"
        parts.append(
            Part(rid, f"EKS control plane ({version}, {support} support)", EksControlPlane(support))
        )
    for rid in by_kind.get("kms-key", []):
        parts.append(
            Part(
                rid,
                "KMS key",
                KmsKey(),
                note="with its yearly rotation, each new backing key adds as much again",
            )
        )
    for rid in by_kind.get("parallelcluster", []):
        parts.append(
            Part(f"{rid}/head-node", f"head node ({head_type})", Instance(head_type, "OnDemand"))
        )
    for rid in by_kind.get("pcs-cluster", []):
        parts.append(
            Part(
                rid,
                f"PCS controller ({spec.slurm.pcs.size})",
                Unpriceable(
                    "PCS controller",
                    "fmctl has no source for its Price List product yet "
                    "(the AWS PCS pricing page has the rate by cluster size)",
                ),
            )
        )
    login = "pcs/node-group/login"
    if login in kinds:
        count = spec.slurm.pcs.login_count
        parts.append(
            Part(login, f"login nodes ({head_type})", Instance(head_type, "OnDemand"), count)
        )
    if "nodegroup/system" in kinds:
        system = spec.compute.system_nodes
        parts.append(
            Part(
                "nodegroup/system",
                f"system nodes ({system.instance_type})",
                Instance(system.instance_type, "OnDemand"),
                system.count,
            )
        )
    for pool in spec.compute.gpu_pools:
        parts.append(_pool_part(pool, kinds))
    for rid in by_kind.get("fsx", []):
        fsx = spec.storage.fsx_lustre
        size = f"{fsx.capacity_gib} GiB" if fsx and fsx.capacity_gib else "FSx for Lustre"
        parts.append(
            Part(
                rid,
                f"FSx for Lustre ({size})",
                Unpriceable(
                    "FSx for Lustre",
                    "fmctl has no source for its Price List product yet (billed per GB-month "
                    "of storage by deployment type and throughput: the FSx for Lustre "
                    "pricing page)",
                ),
            )
        )
    return parts


def _pool_part(pool: GpuPool, kinds: dict[str, str]) -> Part:
    rid = next(
        (
            r
            for r, kind in kinds.items()
            if kind in ("eks-nodegroup", "pcs-node-group") and r.endswith(f"/{pool.name}")
        ),
        f"parallelcluster/{pool.name}",
    )
    kind = pool.capacity.type
    idle = pool.min_count if pool.min_count is not None and pool.min_count < pool.count else None
    return Part(
        rid,
        f"GPU pool {pool.name} ({pool.instance_type}, {kind})",
        Instance(pool.instance_type, _MARKET[kind]),
        pool.count,
        idle,
        _MARKET_NOTE.get(kind),
    )


class ShippedBook:
    """Prices from the table the catalog ships (``catalog.prices``), dated: `plan --offline`,
    and what the Price List falls back to when it cannot be asked."""

    offline = True
    as_of: str | None = None

    def __init__(self) -> None:
        from provisioner.catalog.prices import AS_OF

        self.as_of = AS_OF.isoformat()

    def quote(self, region: str, product: Product) -> Quote | Unpriced:
        """The shipped rate, or why there is none."""
        from provisioner.catalog import prices

        found: prices.ShippedPrice | None = None
        if isinstance(product, Instance):
            if product.market == "Spot":
                return Unpriced("Spot prices move by the hour; `plan` online reads them")
            found = prices.INSTANCE_HOURLY.get((region, product.instance_type, product.market))
            what = f"{product.instance_type} ({product.market}) in {region}"
        elif isinstance(product, NatGateway):
            found = prices.NAT_GATEWAY_HOURLY.get(region)
            what = f"a NAT gateway in {region}"
        elif isinstance(product, EksControlPlane):
            found = prices.EKS_CLUSTER_HOURLY.get(product.support)
            what = f"EKS {product.support} support"
        elif isinstance(product, KmsKey):
            found, what = prices.KMS_KEY_HOURLY, "a KMS key"
        else:
            return Unpriced(product.why)
        if found is None:
            return Unpriced(f"no shipped price for {what}; `plan` online asks the AWS Price List")
        return Quote(found.usd_per_hour, found.source)
