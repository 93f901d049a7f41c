"""`plan`'s cost online: prices from the AWS Price List (GetProducts, in us-east-1, where the
Query API answers) and Spot prices from the EC2 Spot price history, cached on this machine
for a day with the date they were read. Read-only, like the rest of `plan`.

Where the Price List cannot be asked (no network to it, no ``pricing:GetProducts`` in the
caller's policy), the item falls back to the shipped table and says why.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from provisioner.catalog import prices
from provisioner.drivers.aws import Aws, translate
from provisioner.estimate.cost import (
    EksControlPlane,
    Instance,
    NatGateway,
    Product,
    Quote,
    ShippedBook,
    Unpriced,
)
from provisioner.estimate.price_list import answer, hourly_rates

if TYPE_CHECKING:
    from types_boto3_ec2.literals import InstanceTypeType
    from types_boto3_ec2.type_defs import DescribeSpotPriceHistoryRequestTypeDef

#: How long a rate read from the Price List is used again without asking (AWS publishes
#: EC2's offer file a few times a month).
CACHE_SECONDS = 24 * 3600
#: The cache file under the target's home.
CACHE_FILE = "price-list-cache.json"


@dataclass
class PriceCache:
    """Rates read from the Price List, by question, with when they were read (one JSON file;
    a damaged file is read as empty and written afresh)."""

    path: Path
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, key: str, now: float) -> dict[str, Any] | None:
        """A cached answer younger than ``CACHE_SECONDS``."""
        entry = self._load().get(key)
        if not isinstance(entry, dict) or now - float(entry.get("read", 0)) > CACHE_SECONDS:
            return None
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Keep an answer (written whole to a new file, then moved over the old one)."""
        with self.lock:
            data = self._load()
            data[key] = entry
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fresh = self.path.with_suffix(".tmp")
            fresh.write_text(json.dumps(data, indent=1, sort_keys=True))
            fresh.replace(self.path)

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass
class PriceListBook:
    """Prices as AWS publishes them now."""

    aws: Aws
    #: The zone the pools run in (the Spot price is per zone); None: any of the region's,
    #: the highest taken.
    zone: str | None
    cache: PriceCache
    offline = False
    as_of: str | None = None
    shipped: ShippedBook = field(default_factory=ShippedBook)
    #: The Price List's clients, made once (the Query API answers in us-east-1 only).
    _pricing: Aws | None = field(default=None, init=False, repr=False)

    def quote(self, region: str, product: Product) -> Quote | Unpriced:
        """The current hourly rate of one unit of ``product``."""
        if isinstance(product, Instance) and product.market == "Spot":
            return self._spot(product.instance_type)
        if isinstance(product, Instance):
            query = prices.ec2_filters(region, product.instance_type, product.market)
        elif isinstance(product, NatGateway):
            query = prices.nat_gateway_filters(region)
        elif isinstance(product, EksControlPlane) and product.support == "standard":
            query = prices.eks_cluster_filters(region)
        else:
            # Extended support's usage type has no source fmctl read: the shipped rate.
            return self.shipped.quote(region, product)
        try:
            asked = self._ask(query)
        except Exception as exc:  # noqa: BLE001 - any failure to ask falls back, and says why
            failed = translate(exc, "asking the AWS Price List")
            shipped = self.shipped.quote(region, product)
            if isinstance(shipped, Quote):
                return Quote(
                    shipped.usd_per_hour,
                    f"{shipped.source}, shipped table of {self.shipped.as_of} ({failed})",
                )
            return Unpriced(f"{failed}; {shipped.why}")
        if isinstance(asked, Unpriced):
            # No product matched the question (a product AWS renamed, or a region's that the
            # Price List lacks): the shipped rate, if any, saying so.
            shipped = self.shipped.quote(region, product)
            if isinstance(shipped, Quote):
                return Quote(
                    shipped.usd_per_hour,
                    f"{shipped.source}, shipped table of {self.shipped.as_of} ({asked.why})",
                )
        return asked

    def _key(self, query: prices.Query) -> str:
        asked = ",".join(
            f"{f.field}{'~' if f.type == 'CONTAINS' else '='}{f.value}" for f in query.filters
        )
        return f"{self.aws.endpoint_url or 'aws'}|{query.service_code}|{asked}"

    def _ask(self, query: prices.Query) -> Quote | Unpriced:
        now = time.time()
        key = self._key(query)
        cached = self.cache.get(key, now)
        if cached is None:
            documents = self._products(query)
            found = answer(hourly_rates(documents, query))
            cached = {"read": now}
            if found is not None:
                cached |= {
                    "usd": found.rate.usd_per_hour,
                    "sku": found.rate.sku,
                    "description": found.rate.description,
                    "distinct": found.distinct,
                }
            self.cache.put(key, cached)
        if "usd" not in cached:
            return Unpriced(
                f"the AWS Price List has no such product ({query.service_code}: "
                f"{', '.join(f.value for f in query.filters)}); read {_when(cached['read'])}"
            )
        source = f"AWS Price List, SKU {cached['sku']}, read {_when(cached['read'])}"
        if int(cached.get("distinct", 1)) > 1:
            source += f" (the highest of {cached['distinct']} rates that matched)"
        return Quote(float(cached["usd"]), source)

    def _products(self, query: prices.Query) -> list[str]:
        if self._pricing is None:
            self._pricing = self.aws.in_region(prices.PRICE_LIST_REGIONS[0])
        client = self._pricing.client("pricing")
        filters = [{"Type": f.type, "Field": f.field, "Value": f.value} for f in query.filters]
        documents: list[str] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "ServiceCode": query.service_code,
                "Filters": filters,
                "FormatVersion": "aws_v1",
                "MaxResults": 100,
            }
            if token:
                kwargs["NextToken"] = token
            page = client.get_products(**kwargs)
            documents += [str(d) for d in page.get("PriceList", [])]
            token = page.get("NextToken")
            if not token:
                return documents

    def _spot(self, instance_type: str) -> Quote | Unpriced:
        request: DescribeSpotPriceHistoryRequestTypeDef = {
            # The catalog's names are EC2's: the stubs' literal list lags new types.
            "InstanceTypes": [cast("InstanceTypeType", instance_type)],
            "ProductDescriptions": ["Linux/UNIX (Amazon VPC)", "Linux/UNIX"],
            "StartTime": datetime.now(UTC),
            "MaxResults": 100,
        }
        if self.zone:
            request["AvailabilityZone"] = self.zone
        try:
            history = self.aws.client("ec2").describe_spot_price_history(**request)[
                "SpotPriceHistory"
            ]
        except Exception as exc:  # noqa: BLE001 - any failure to ask is reported, not fatal
            return Unpriced(str(translate(exc, "reading the Spot price history")))
        here = [h for h in history if not self.zone or h.get("AvailabilityZone") == self.zone]
        if not here:
            return Unpriced(f"no Spot price for {instance_type} in {self.zone or 'the region'}")
        # Per zone, its latest price; of the zones, the highest (a cost is not understated).
        latest: dict[str, Any] = {}
        for h in sorted(here, key=lambda h: str(h.get("Timestamp", ""))):
            latest[str(h.get("AvailabilityZone"))] = h
        top = max(latest.values(), key=lambda h: float(h["SpotPrice"]))
        return Quote(
            float(top["SpotPrice"]),
            f"EC2 Spot price history, {top.get('AvailabilityZone')}, {top.get('Timestamp')}",
        )


def cache_for(home: Path) -> PriceCache:
    """The Price List cache of a target (its home: ~/.fmctl, or the sandbox's)."""
    return PriceCache(home / CACHE_FILE)
