"""The AWS Price List Query API (service ``pricing``, 2017-10-15), which moto lacks:
GetProducts over a recorded slice of the real offer files.

Written from botocore's pricing model: a JSON 1.1 service (target prefix
``AWSPriceListService``); GetProducts takes ``ServiceCode`` (required), ``Filters`` (each of
``TERM_MATCH``, ``EQUALS``, ``CONTAINS``, ``ANY_OF``, ``NONE_OF`` on ``ServiceCode`` or an
attribute name; every filter must hold), ``FormatVersion`` (``aws_v1``), ``MaxResults`` (1 to
100) and ``NextToken``, and answers ``FormatVersion``, ``PriceList`` (each product a JSON
string) and ``NextToken``; errors are InvalidParameterException, NotFoundException and
InvalidNextTokenException. The Query API has endpoints in us-east-1, eu-central-1 and
ap-south-1 only (Billing User Guide, "Using the AWS Price List Query API"); a call signed for
another region finds nothing to answer it, as a real client would fail to connect.

The products are copied from the AmazonEC2 offer files (version 20260910195514, published
2026-09-10; us-east-1, us-west-2 and eu-west-1), as a public Price List emulator's test corpus
recorded them: the nominal Linux On-Demand row of each instance type here, and the rows one
attribute away from it that a careless question also matches (a Capacity Block p5 at $0.00,
Windows, Dedicated and unused-reservation m5.xlarge). An instance type or a region the slice
lacks answers an empty list, as the real API does for a product it does not have. The
sandbox has its own copy on purpose: a shim that read fmctl's catalog could only agree with it.
"""

from __future__ import annotations

import json
from typing import Any

from fmctl_sandbox import protocol as p
from fmctl_sandbox.protocol import Call

Answer = tuple[int, dict[str, str], bytes]

#: Where the Query API answers.
REGIONS = ("us-east-1", "eu-central-1", "ap-south-1")
#: Service codes the real Price List has that the slice may hold no product of.
KNOWN_SERVICES = ("AmazonEC2", "AmazonEKS", "AmazonFSx", "AmazonVPC")
FILTER_TYPES = ("TERM_MATCH", "EQUALS", "CONTAINS", "ANY_OF", "NONE_OF")
VERSION = "20260910195514"
PUBLISHED = "2026-09-10T19:55:14Z"
ON_DEMAND = "JRTCKXETXF"  # the on-demand offer term code
RATE = "6YS6EN2CT7"  # the hourly rate's dimension code

_LOCATION = {
    "us-east-1": ("US East (N. Virginia)", ""),
    "us-west-2": ("US West (Oregon)", "USW2-"),
    "eu-west-1": ("EU (Ireland)", "EU-"),
}
#: The attributes an instance type has in every region (its physical facts and the nominal
#: row's discriminators), per the offer files.
_NOMINAL = {
    "capacitystatus": "Used",
    "licenseModel": "No License required",
    "marketoption": "OnDemand",
    "operatingSystem": "Linux",
    "operation": "RunInstances",
    "preInstalledSw": "NA",
    "tenancy": "Shared",
    "servicecode": "AmazonEC2",
    "servicename": "Amazon Elastic Compute Cloud",
    "locationType": "AWS Region",
}
_TYPES: dict[str, dict[str, str]] = {
    "p5.48xlarge": {
        "vcpu": "192",
        "memory": "2048 GiB",
        "gpu": "8",
        "gpuMemory": "640 GB HBM3",
        "instanceFamily": "GPU instance",
        "networkPerformance": "3200 Gigabit",
        "storage": "8 x 3840 GB SSD",
    },
    "p4d.24xlarge": {
        "vcpu": "96",
        "memory": "1152 GiB",
        "gpu": "8",
        "gpuMemory": "320 GB HBM2",
        "instanceFamily": "GPU instance",
        "networkPerformance": "400 Gigabit",
        "storage": "8 x 1000 SSD",
    },
    "m5.xlarge": {
        "vcpu": "4",
        "memory": "16 GiB",
        "instanceFamily": "General purpose",
        "networkPerformance": "Up to 10 Gigabit",
        "storage": "EBS only",
    },
}
#: (sku, region, instance type, USD per hour, what the description calls it, overrides).
_ROWS: tuple[tuple[str, str, str, str, str, dict[str, str]], ...] = (
    ("3D4V8UAYEMB38GU2", "us-east-1", "p5.48xlarge", "55.0400000000", "On Demand Linux", {}),
    ("HNW4W6GM8AE2PCQX", "us-west-2", "p5.48xlarge", "55.0400000000", "On Demand Linux", {}),
    (
        "5Q7AP3RH7KTVUNCJ",
        "us-east-1",
        "p5.48xlarge",
        "0.0000000000",
        "Capacity Block Linux",
        {"marketoption": "CapacityBlock", "operation": "RunInstances:CB"},
    ),
    ("H7NGEAC6UEHNTKSJ", "us-east-1", "p4d.24xlarge", "21.9576420000", "On Demand Linux", {}),
    ("DHAMWQPURBTZBUA6", "us-west-2", "p4d.24xlarge", "21.9576400000", "On Demand Linux", {}),
    ("CQ3RZ8A8BQKVHSKT", "eu-west-1", "p4d.24xlarge", "23.7156900000", "On Demand Linux", {}),
    ("5G4TA8Z4MUKE6MJB", "us-east-1", "m5.xlarge", "0.1920000000", "On Demand Linux", {}),
    (
        "HXGQ45BFM9J2FJ3F",
        "us-east-1",
        "m5.xlarge",
        "0.3760000000",
        "On Demand Windows",
        {"operatingSystem": "Windows", "operation": "RunInstances:0002"},
    ),
    (
        "AN9HBCS6XCP64Z83",
        "us-east-1",
        "m5.xlarge",
        "0.2040000000",
        "Dedicated Linux",
        {"tenancy": "Dedicated", "usagetype": "DedicatedUsage:m5.xlarge"},
    ),
    (
        "E9RWRGDUV5X76FUB",
        "us-east-1",
        "m5.xlarge",
        "0.1920000000",
        "Unused Reservation Linux",
        {
            "capacitystatus": "UnusedCapacityReservation",
            "instancesku": "5G4TA8Z4MUKE6MJB",
            "usagetype": "UnusedBox:m5.xlarge",
        },
    ),
)


def _product(row: tuple[str, str, str, str, str, dict[str, str]]) -> dict[str, Any]:
    sku, region, itype, usd, called, overrides = row
    location, prefix = _LOCATION[region]
    attributes = {
        **_NOMINAL,
        **_TYPES[itype],
        "instanceType": itype,
        "location": location,
        "regionCode": region,
        "usagetype": f"{prefix}BoxUsage:{itype}",
        **overrides,
    }
    term = f"{sku}.{ON_DEMAND}"
    rate = f"{term}.{RATE}"
    shown = f"${float(usd):g}" if float(usd) else "$0.00"
    return {
        "product": {"productFamily": "Compute Instance", "attributes": attributes, "sku": sku},
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                term: {
                    "priceDimensions": {
                        rate: {
                            "unit": "Hrs",
                            "endRange": "Inf",
                            "description": f"{shown} per {called} {itype} Instance Hour",
                            "appliesTo": [],
                            "rateCode": rate,
                            "beginRange": "0",
                            "pricePerUnit": {"USD": usd},
                        }
                    },
                    "sku": sku,
                    "effectiveDate": "2026-09-01T00:00:00Z",
                    "offerTermCode": ON_DEMAND,
                    "termAttributes": {},
                }
            }
        },
        "version": VERSION,
        "publicationDate": PUBLISHED,
    }


PRODUCTS: tuple[dict[str, Any], ...] = tuple(_product(row) for row in _ROWS)


def _value(doc: dict[str, Any], field: str) -> str | None:
    if field == "ServiceCode":
        return str(doc["serviceCode"])
    product = doc["product"]
    if field in ("productFamily", "sku"):
        return str(product[field])
    found = product["attributes"].get(field)
    return None if found is None else str(found)


def _holds(doc: dict[str, Any], kind: str, field: str, wanted: str) -> bool:
    value = _value(doc, field)
    if kind == "NONE_OF":
        return value is None or value not in [w.strip() for w in wanted.split(",")]
    if value is None:
        return False
    if kind == "CONTAINS":
        return wanted in value
    if kind == "ANY_OF":
        return value in [w.strip() for w in wanted.split(",")]
    return value == wanted  # TERM_MATCH, EQUALS


def get_products(call: Call) -> Answer:
    """GetProducts: the recorded products that meet every filter, a page at a time."""
    if call.region not in REGIONS:
        return p.json_error(
            404,
            "NotFoundException",
            f"the Price List Query API has no endpoint in {call.region} (it answers in "
            f"{', '.join(REGIONS)})",
        )
    params = call.params
    service = str(params.get("ServiceCode", ""))
    if service not in KNOWN_SERVICES:
        return p.json_error(400, "NotFoundException", f"no service {service!r}")
    if params.get("FormatVersion", "aws_v1") != "aws_v1":
        return p.json_error(400, "InvalidParameterException", "FormatVersion must be aws_v1")
    size = int(params.get("MaxResults", 100))
    if not 1 <= size <= 100:
        return p.json_error(400, "InvalidParameterException", "MaxResults is 1 to 100")
    rules = []
    for rule in params.get("Filters", []):
        if rule.get("Type") not in FILTER_TYPES:
            return p.json_error(400, "InvalidParameterException", f"filter type {rule}")
        rules.append((str(rule["Type"]), str(rule["Field"]), str(rule["Value"])))
    found = [
        doc
        for doc in PRODUCTS
        if doc["serviceCode"] == service and all(_holds(doc, *rule) for rule in rules)
    ]
    token = params.get("NextToken")
    start = 0
    if token:
        if not str(token).isdigit() or int(token) > len(found):
            return p.json_error(400, "InvalidNextTokenException", "the token is not valid")
        start = int(token)
    page = found[start : start + size]
    body: dict[str, Any] = {
        "FormatVersion": "aws_v1",
        "PriceList": [json.dumps(doc) for doc in page],
    }
    if start + size < len(found):
        body["NextToken"] = str(start + size)
    return p.json_response(body)
