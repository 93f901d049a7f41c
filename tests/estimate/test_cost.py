"""The plan's cost: what is billable in each scheduler's plan, the Price List read from a
recorded answer, the shipped table, and the totals `plan -o json` shows."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from provisioner.catalog import prices
from provisioner.estimate.cost import (
    EksControlPlane,
    Instance,
    NatGateway,
    Product,
    Quote,
    ShippedBook,
    Unpriceable,
    Unpriced,
    billable_parts,
    estimate,
)
from provisioner.estimate.price_list import answer, hourly_rates
from provisioner.ops.engine import blueprint_of
from tests.conftest import validate_text

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests/data/real/price-list-amazonec2-us-east-1.json"
TODAY = date(2026, 12, 4)


def _recorded() -> list[str]:
    documents: list[str] = json.loads(RECORDED.read_text())["PriceList"]
    return documents


def test_the_linux_on_demand_rate_is_picked_out_of_its_near_twins() -> None:
    # Four m5.xlarge products share region, type and usage type's family: only the
    # Linux, shared, used, licence-free, On-Demand one is the rate.
    query = prices.ec2_filters("us-east-1", "m5.xlarge", "OnDemand")
    rates = hourly_rates(_recorded(), query)
    assert [(r.sku, r.usd_per_hour) for r in rates] == [("5G4TA8Z4MUKE6MJB", 0.192)]


def test_a_capacity_block_is_not_priced_as_on_demand_nor_the_reverse() -> None:
    on_demand = answer(
        hourly_rates(_recorded(), prices.ec2_filters("us-east-1", "p5.48xlarge", "OnDemand"))
    )
    block = answer(
        hourly_rates(_recorded(), prices.ec2_filters("us-east-1", "p5.48xlarge", "CapacityBlock"))
    )
    assert on_demand is not None and on_demand.rate.usd_per_hour == 55.04
    assert on_demand.rate.description == "$55.04 per On Demand Linux p5.48xlarge Instance Hour"
    assert block is not None and block.rate.usd_per_hour == 0.0
    assert block.rate.sku == "5Q7AP3RH7KTVUNCJ"


def test_without_the_licence_filter_two_windows_rates_match_and_the_higher_is_taken() -> None:
    loose = prices.Query(
        "AmazonEC2",
        (
            prices.Filter("regionCode", "us-east-1"),
            prices.Filter("instanceType", "m5.xlarge"),
            prices.Filter("operatingSystem", "Windows"),
        ),
    )
    found = answer(hourly_rates(_recorded(), loose))
    assert found is not None and found.distinct == 2
    assert found.rate.usd_per_hour == 0.376  # never the lower one: a cost is not understated


def test_the_free_tier_allowance_is_never_a_rate() -> None:
    # The pseudo-product has no region and a 750-hour tier: no filter of fmctl's selects it,
    # and a tiered dimension is not read even when a question would.
    anything = prices.Query("AmazonEC2", (prices.Filter("usagetype", "BoxUsage", "CONTAINS"),))
    skus = {r.sku for r in hourly_rates(_recorded(), anything)}
    assert "R3WPVNCD34N9W7UV" not in skus
    assert "3D4V8UAYEMB38GU2" in skus


def test_an_answer_for_another_service_is_not_read() -> None:
    eks = prices.eks_cluster_filters("us-east-1")
    assert hourly_rates(_recorded(), eks) == []


def _spec(scheduler: str, **extra: Any) -> Any:
    data: dict[str, Any] = {
        "apiVersion": "fmctl.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "costly", "region": "us-east-1", "ttl": "8h"},
        "scheduler": scheduler,
        "network": {"availabilityZone": "us-east-1a"},
        "compute": {
            "gpuPools": [
                {"name": "train", "instanceType": "p5.48xlarge", "count": 4, "minCount": 1},
                {
                    "name": "spare",
                    "instanceType": "p5.48xlarge",
                    "count": 2,
                    "capacity": {"type": "spot"},
                },
            ]
        },
        "storage": {"fsxLustre": {"capacityGiB": 1200}},
        **extra,
    }
    import yaml

    result = validate_text(yaml.safe_dump(data))
    assert result.ok and result.resolved is not None, result.problems
    return result.resolved


def _kinds(spec: Any) -> dict[str, str]:
    return {item.id: item.kind for item in blueprint_of(spec, None)}


def test_every_billable_part_of_an_eks_plan_is_listed() -> None:
    spec = _spec("kubernetes")
    parts = {p.resource: p for p in billable_parts(spec, _kinds(spec), TODAY)}
    assert set(parts) == {
        "natgw",
        "eks",
        "nodegroup/system",
        "nodegroup/train",
        "nodegroup/spare",
        "fsx",
        "kms/secrets",
    }
    assert parts["nodegroup/train"].product == Instance("p5.48xlarge", "OnDemand")
    assert (parts["nodegroup/train"].count, parts["nodegroup/train"].idle_count) == (4, 1)
    assert parts["nodegroup/spare"].product == Instance("p5.48xlarge", "Spot")
    assert parts["eks"].product == EksControlPlane("standard")
    assert isinstance(parts["fsx"].product, Unpriceable)
    # The secrets key: $1 a key-month, by the hour (the KMS pricing page).
    kms = ShippedBook().quote("us-east-1", parts["kms/secrets"].product)
    assert isinstance(kms, Quote) and kms.usd_per_hour == pytest.approx(1 / 730, rel=1e-3)
    assert "KMS pricing page" in kms.source


def test_a_version_past_standard_support_is_billed_extended_only_under_extended() -> None:
    spec = _spec("kubernetes", kubernetes={"version": "1.32"})
    # 1.32 left standard support on 2026-03-23 (eks_versions). Under fmctl's upgradePolicy
    # (STANDARD) AWS upgrades such a cluster, which stays on $0.10 an hour; under EXTENDED
    # it stays on 1.32 at $0.60.
    rates = {}
    for policy in ("STANDARD", "EXTENDED"):
        parts = billable_parts(spec, _kinds(spec), TODAY, policy)
        (eks,) = [p for p in parts if p.resource == "eks"]
        quote = ShippedBook().quote("us-east-1", eks.product)
        assert isinstance(quote, Quote)
        rates[policy] = (eks.product, quote.usd_per_hour)
    assert rates == {
        "STANDARD": (EksControlPlane("standard"), 0.10),
        "EXTENDED": (EksControlPlane("extended"), 0.60),
    }


def test_a_pcs_plan_has_its_login_nodes_and_its_controller() -> None:
    spec = _spec("slurm", slurm={"provider": "pcs"})
    parts = {p.resource: p for p in billable_parts(spec, _kinds(spec), TODAY)}
    assert {"pcs/cluster", "pcs/node-group/login", "pcs/node-group/train"} <= set(parts)
    assert parts["pcs/node-group/login"].count == spec.slurm.pcs.login_count
    assert isinstance(parts["pcs/cluster"].product, Unpriceable)


def test_the_shipped_table_prices_what_it_has_and_says_why_not_for_the_rest() -> None:
    book = ShippedBook()
    assert book.as_of == prices.AS_OF.isoformat()
    p5 = book.quote("us-east-1", Instance("p5.48xlarge", "OnDemand"))
    assert isinstance(p5, Quote) and p5.usd_per_hour == 55.04 and "20260910195514" in p5.source
    unknown: list[Product] = [
        Instance("p5en.48xlarge", "OnDemand"),  # no source read for it: no figure
        Instance("p5.48xlarge", "OnDemand"),  # in eu-west-1, which publishes no p5 at all
        NatGateway(),
    ]
    for product in unknown:
        assert isinstance(book.quote("eu-west-1", product), Unpriced)
    spot = book.quote("us-east-1", Instance("p5.48xlarge", "Spot"))
    assert isinstance(spot, Unpriced) and "online" in spot.why


class _Fixed:
    """A book of one rate per instance type (the totals' arithmetic, apart from prices)."""

    offline = True
    as_of: str | None = "2026-01-01"

    def quote(self, region: str, product: Product) -> Quote | Unpriced:
        if isinstance(product, Instance):
            return Quote({"OnDemand": 10.0, "Spot": 4.0}.get(product.market, 0.0), "fixed")
        if isinstance(product, EksControlPlane):
            return Quote(0.10, "fixed")
        return Unpriced("not in this book")


def test_totals_count_full_pools_and_leave_unpriced_parts_out_saying_so() -> None:
    spec = _spec("kubernetes")
    cost = estimate(spec, _kinds(spec).items(), _Fixed(), TODAY)
    data = cost.as_data()
    # train 4 x 10 + spare 2 x 4 + system nodes (2 x 10 by default) + the control plane.
    system = spec.compute.system_nodes.count
    assert data["hourly"] == pytest.approx(40 + 8 + 10 * system + 0.10)
    assert data["untilTtl"] == pytest.approx(data["hourly"] * 8, abs=0.01)
    assert data["currency"] == "USD" and data["complete"] is False and data["asOf"] == "2026-01-01"
    items = {i["resource"]: i for i in data["items"]}
    assert items["nodegroup/train"]["idleHourly"] == 10.0  # minCount 1
    assert items["natgw"]["hourly"] is None and items["natgw"]["unpriced"] == "not in this book"
    assert items["fsx"]["source"] is None
    for item in data["items"]:
        assert {"resource", "hourly", "source"} <= set(item)


def test_a_cluster_without_a_ttl_has_no_cost_until_it() -> None:
    spec = _spec("kubernetes")
    spec = spec.model_copy(update={"metadata": spec.metadata.model_copy(update={"ttl": None})})
    assert estimate(spec, _kinds(spec).items(), _Fixed(), TODAY).as_data()["untilTtl"] is None
