"""What AWS charges, as fmctl ships it for `plan --offline`, and how to ask the AWS Price List
for the rest.

The shipped table is small on purpose: a figure is here only when fmctl read it somewhere it
can name. A price fmctl cannot name a source for is left out, and `plan` says the item is
unpriced instead of guessing: a plausible-looking rate is worse than none, because nobody can
tell it is wrong.

Sources:

- EC2 On-Demand (Linux, shared tenancy) and Capacity Block rows: the AmazonEC2 offer files
  of the AWS Price List (https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/
  current/<region>/index.json), version 20260910195514, published 2026-09-10T19:55:14Z,
  as recorded row by row (SKU, attributes, rate code) in a public Price List emulator's
  test corpus. eu-west-1 publishes no p5 product at all.
- NAT gateway: the Amazon VPC pricing page's worked example, $0.045 per NAT gateway-hour in
  US East (Ohio), as transcribed from the page on 2026-09-20; the page renders other
  regions' rates dynamically, so none is recorded.
- EKS control plane: the EKS pricing page, $0.10 per cluster-hour in standard support and
  $0.60 in extended support (``eks_versions``).
- KMS key: the AWS KMS pricing page, "Each AWS KMS key that you create in AWS KMS costs
  $1/month (prorated hourly)", the same for every kind of key; with automatic rotation on,
  each newly generated backing key adds $1/month (a key's first rotation is a year after it
  is made). Read 2026-12-05. An hour is a month's share over an average month:
  $1 x 12 / 8,760 hours.

The Price List query recipe (``ec2_filters``): one instance type's hourly rate needs eight
attributes fixed, not the seven usually quoted. ``licenseModel`` tells apart SKUs that share
every other attribute, and ``marketoption`` tells a Capacity Block product (its hourly OS fee,
$0.00 on Linux: the reservation fee is paid up front) from the On-Demand one. Each filter is
the API's ``TERM_MATCH`` unless the attribute varies by region in its spelling
(``usagetype``: no prefix in us-east-1, ``USW2-`` in us-west-2, ``EU-`` in eu-west-1), which
takes ``CONTAINS`` (botocore's pricing model, 2017-10-15, FilterType).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal

#: When the shipped figures were published (the newest of their sources).
AS_OF = date(2026, 9, 20)
CURRENCY = "USD"
#: The Price List Query API answers in these regions only; fmctl asks the first.
PRICE_LIST_REGIONS = ("us-east-1", "eu-central-1", "ap-south-1")

#: How an instance is paid for: On-Demand (also an On-Demand Capacity Reservation, billed
#: at the On-Demand rate whether used or not), Spot, or inside a Capacity Block.
Market = Literal["OnDemand", "Spot", "CapacityBlock"]

_EC2_OFFER = "AWS Price List, AmazonEC2 offer file 20260910195514 (2026-09-10)"
_VPC_PAGE = "Amazon VPC pricing page, NAT gateway example (read 2026-09-20)"
_EKS_PAGE = "Amazon EKS pricing page (eks_versions)"
_KMS_PAGE = "AWS KMS pricing page: $1 per key-month, prorated hourly (read 2026-12-05)"


@dataclass(frozen=True)
class ShippedPrice:
    """One rate fmctl ships, in USD per hour, with where it was read."""

    usd_per_hour: float
    source: str


#: (region, instance type, market) -> the hourly rate of one instance (Linux, shared).
INSTANCE_HOURLY: dict[tuple[str, str, Market], ShippedPrice] = {
    ("us-east-1", "p5.48xlarge", "OnDemand"): ShippedPrice(55.04, _EC2_OFFER),
    ("us-west-2", "p5.48xlarge", "OnDemand"): ShippedPrice(55.04, _EC2_OFFER),
    ("us-east-1", "p5.48xlarge", "CapacityBlock"): ShippedPrice(0.0, _EC2_OFFER),
    ("us-east-1", "p4d.24xlarge", "OnDemand"): ShippedPrice(21.957642, _EC2_OFFER),
    ("us-west-2", "p4d.24xlarge", "OnDemand"): ShippedPrice(21.95764, _EC2_OFFER),
    ("eu-west-1", "p4d.24xlarge", "OnDemand"): ShippedPrice(23.71569, _EC2_OFFER),
    ("us-east-1", "m5.xlarge", "OnDemand"): ShippedPrice(0.192, _EC2_OFFER),
    ("us-west-2", "m5.xlarge", "OnDemand"): ShippedPrice(0.192, _EC2_OFFER),
    ("eu-west-1", "m5.xlarge", "OnDemand"): ShippedPrice(0.214, _EC2_OFFER),
}

#: region -> one NAT gateway's hourly charge (data processed is extra, per GB).
NAT_GATEWAY_HOURLY: dict[str, ShippedPrice] = {
    "us-east-2": ShippedPrice(0.045, _VPC_PAGE),
}

#: One customer managed KMS key, every commercial region alike ($1 a month, by the hour).
KMS_KEY_HOURLY = ShippedPrice(round(12 / 8760, 6), _KMS_PAGE)

#: EKS support -> one cluster's hourly charge, every commercial region alike.
EKS_CLUSTER_HOURLY: dict[str, ShippedPrice] = {
    "standard": ShippedPrice(0.10, _EKS_PAGE),
    "extended": ShippedPrice(0.60, _EKS_PAGE),
}


@dataclass(frozen=True)
class Filter:
    """One GetProducts filter (the API's Filter shape)."""

    field: str
    value: str
    type: Literal["TERM_MATCH", "CONTAINS"] = "TERM_MATCH"


@dataclass(frozen=True)
class Query:
    """One GetProducts question: a service code and the filters every answer must meet."""

    service_code: str
    filters: tuple[Filter, ...]


def ec2_filters(region: str, instance_type: str, market: Market) -> Query:
    """The question for one Linux instance's hourly rate (Spot has none in the Price List:
    it comes from the Spot price history)."""
    return Query(
        "AmazonEC2",
        (
            Filter("regionCode", region),
            Filter("instanceType", instance_type),
            Filter("operatingSystem", "Linux"),
            Filter("tenancy", "Shared"),
            Filter("preInstalledSw", "NA"),
            Filter("capacitystatus", "Used"),
            Filter("licenseModel", "No License required"),
            Filter("marketoption", market),
        ),
    )


def nat_gateway_filters(region: str) -> Query:
    """The question for a NAT gateway's hourly charge (productFamily and usagetype as the
    AmazonEC2 offer spells them; infracost's NAT gateway resource asks the same)."""
    return Query(
        "AmazonEC2",
        (
            Filter("regionCode", region),
            Filter("productFamily", "NAT Gateway"),
            Filter("usagetype", "NatGateway-Hours", "CONTAINS"),
        ),
    )


def eks_cluster_filters(region: str) -> Query:
    """The question for an EKS cluster's hourly charge in standard support."""
    return Query(
        "AmazonEKS",
        (
            Filter("regionCode", region),
            Filter("usagetype", "AmazonEKS-Hours:perCluster", "CONTAINS"),
        ),
    )
