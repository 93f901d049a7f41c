"""Reading a GetProducts answer of the AWS Price List: each ``PriceList`` entry is a JSON
document of one product (``product.productFamily``, ``product.attributes``, ``product.sku``)
and its terms (``terms.OnDemand.<sku>.<offerTermCode>.priceDimensions.<rateCode>`` with
``unit``, ``endRange``, ``pricePerUnit.USD`` and ``description``): botocore's pricing model
(2017-10-15) for the envelope, the offer files' format (aws_v1) for the documents.

fmctl checks every filter again on what comes back: an answer that strays from the question
(a Windows or Capacity Block SKU next to the Linux On-Demand one) must not be priced. Of the
rates that remain, one is the answer; several distinct ones are reported, and the highest
taken, so that a cost is never understated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from provisioner.catalog.prices import Filter, Query


@dataclass(frozen=True)
class Rate:
    """One hourly On-Demand rate of one product."""

    sku: str
    usd_per_hour: float
    description: str


@dataclass(frozen=True)
class Answer:
    """What a question came to: the rate taken, and how many distinct ones matched."""

    rate: Rate
    distinct: int


def _field(product: dict[str, Any], name: str) -> str | None:
    if name in ("productFamily", "sku"):
        value = product.get(name)
    else:
        value = product.get("attributes", {}).get(name)
    return None if value is None else str(value)


def _meets(product: dict[str, Any], rule: Filter) -> bool:
    value = _field(product, rule.field)
    if value is None:
        return False
    if rule.type == "CONTAINS":
        return rule.value in value
    return value == rule.value


def hourly_rates(documents: Iterable[str], query: Query) -> list[Rate]:
    """The hourly USD rates of the products that meet every filter of ``query`` (each
    document as GetProducts returns it: a JSON string)."""
    rates: list[Rate] = []
    for text in documents:
        doc = json.loads(text)
        product = doc.get("product", {})
        if doc.get("serviceCode", query.service_code) != query.service_code:
            continue
        if not all(_meets(product, rule) for rule in query.filters):
            continue
        for term in doc.get("terms", {}).get("OnDemand", {}).values():
            for dim in term.get("priceDimensions", {}).values():
                usd = dim.get("pricePerUnit", {}).get("USD")
                # Hourly, unbounded dimensions only: a tier ("endRange" 750) is a free-tier
                # allowance, not the rate.
                if usd is None or dim.get("unit") != "Hrs" or dim.get("endRange") != "Inf":
                    continue
                sku = str(product.get("sku") or term.get("sku") or "")
                rates.append(Rate(sku, float(usd), str(dim.get("description", ""))))
    return rates


def answer(rates: list[Rate]) -> Answer | None:
    """The rate to use: the only one, or the highest of several distinct ones."""
    if not rates:
        return None
    distinct = {r.usd_per_hour for r in rates}
    top = max(rates, key=lambda r: (r.usd_per_hour, r.sku))
    return Answer(top, len(distinct))
