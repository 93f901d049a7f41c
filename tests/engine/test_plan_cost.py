"""`plan`'s cost against the sandbox's Price List (GetProducts over a recorded slice of the
offer files): the shim's own rules first, then `fmctl plan` online and offline, its cache,
and what it says when the Price List cannot be asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError

from provisioner.drivers.aws import Aws
from provisioner.estimate.cost import Instance, NatGateway, Quote, Unpriced
from provisioner.ops.cost import PriceListBook, cache_for
from tests.engine.harness import Sandbox
from tests.tools.fake_slurm import login_slurm

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests/data/real/price-list-amazonec2-us-east-1.json"


def _recorded_rate(sku: str) -> float:
    """A product's hourly USD rate, as the recorded answer has it."""
    for text in json.loads(RECORDED.read_text())["PriceList"]:
        doc = json.loads(text)
        if doc["product"]["sku"] == sku:
            (term,) = doc["terms"]["OnDemand"].values()
            (dim,) = term["priceDimensions"].values()
            return float(dim["pricePerUnit"]["USD"])
    raise AssertionError(f"{sku} is not in the recording")


def _pricing(sandbox: Sandbox, region: str = "us-east-1") -> Any:
    return sandbox.aws(region).client("pricing")


def _term(field: str, value: str, kind: str = "TERM_MATCH") -> dict[str, str]:
    return {"Type": kind, "Field": field, "Value": value}


def test_the_shim_filters_as_the_api_says(sandbox: Sandbox) -> None:
    pricing = _pricing(sandbox)
    m5 = [_term("regionCode", "us-east-1"), _term("instanceType", "m5.xlarge")]
    every = pricing.get_products(ServiceCode="AmazonEC2", Filters=m5)["PriceList"]
    assert len(every) == 4  # the Linux row and three one attribute away from it
    linux = pricing.get_products(
        ServiceCode="AmazonEC2", Filters=[*m5, _term("operatingSystem", "Linux")]
    )["PriceList"]
    assert {json.loads(d)["product"]["sku"] for d in linux} == {
        "5G4TA8Z4MUKE6MJB",
        "AN9HBCS6XCP64Z83",
        "E9RWRGDUV5X76FUB",
    }
    dedicated = pricing.get_products(
        ServiceCode="AmazonEC2",
        Filters=[*m5, _term("usagetype", "Dedicated", "CONTAINS")],
    )["PriceList"]
    assert [json.loads(d)["product"]["sku"] for d in dedicated] == ["AN9HBCS6XCP64Z83"]
    either = pricing.get_products(
        ServiceCode="AmazonEC2",
        Filters=[_term("instanceType", "p5.48xlarge,p4d.24xlarge", "ANY_OF")],
    )["PriceList"]
    not_p4d = pricing.get_products(
        ServiceCode="AmazonEC2",
        Filters=[*m5[:1], _term("instanceType", "p4d.24xlarge,m5.xlarge", "NONE_OF")],
    )["PriceList"]
    assert len(either) == 6
    assert {json.loads(d)["product"]["attributes"]["instanceType"] for d in not_p4d} == {
        "p5.48xlarge"
    }
    # A product the slice lacks is an empty answer, as the real API gives for it.
    assert pricing.get_products(ServiceCode="AmazonEKS", Filters=m5[:1])["PriceList"] == []


def test_the_shim_pages_and_refuses_what_the_api_refuses(sandbox: Sandbox) -> None:
    pricing = _pricing(sandbox)
    where = [_term("regionCode", "us-east-1"), _term("instanceType", "m5.xlarge")]
    seen: list[str] = []
    token: str | None = None
    while True:
        page = pricing.get_products(
            ServiceCode="AmazonEC2",
            Filters=where,
            MaxResults=3,
            **({"NextToken": token} if token else {}),
        )
        assert len(page["PriceList"]) <= 3
        seen += page["PriceList"]
        token = page.get("NextToken")
        if not token:
            break
    assert len(seen) == 4 and len(set(seen)) == 4
    with pytest.raises(ClientError) as bad:
        pricing.get_products(ServiceCode="AmazonEC2", NextToken="not-a-token")
    assert bad.value.response["Error"]["Code"] == "InvalidNextTokenException"
    with pytest.raises(ClientError) as nowhere:
        # The Query API answers in us-east-1, eu-central-1 and ap-south-1 only.
        _pricing(sandbox, "us-west-2").get_products(ServiceCode="AmazonEC2")
    assert nowhere.value.response["Error"]["Code"] == "NotFoundException"


def _spec(tmp_path: Path, name: str) -> Path:
    data = {
        "apiVersion": "fmctl.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "region": "us-east-1", "ttl": "10h"},
        "scheduler": "slurm",
        "slurm": {"provider": "pcs"},
        "network": {"availabilityZone": "us-east-1a"},
        "compute": {
            "gpuPools": [
                {"name": "train", "instanceType": "p5.48xlarge", "count": 2},
                {
                    "name": "block",
                    "instanceType": "p5.48xlarge",
                    "count": 1,
                    "capacity": {"type": "capacity-block", "reservationId": "cr-0a1b2c3d4e5f60718"},
                },
            ]
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _plan_cost(sandbox: Sandbox, spec: Path, *extra: str) -> dict[str, Any]:
    done = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json", *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    cost: dict[str, Any] = json.loads(done.stdout)["cost"]
    return cost


def test_plan_prices_the_pools_from_the_price_list_and_caches_what_it_read(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, "priced")
    cache = sandbox.home / "price-list-cache.json"
    cache.unlink(missing_ok=True)
    before = len(sandbox.requests())
    cost = _plan_cost(sandbox, spec)
    asked = [r for r in sandbox.requests()[before:] if r["action"] == "GetProducts"]
    assert asked, "plan online asks the Price List"
    items = {i["resource"]: i for i in cost["items"]}
    on_demand = _recorded_rate("3D4V8UAYEMB38GU2")
    assert items["pcs/node-group/train"]["unitHourly"] == on_demand == 55.04
    assert items["pcs/node-group/train"]["hourly"] == round(2 * on_demand, 2)
    assert "3D4V8UAYEMB38GU2" in items["pcs/node-group/train"]["source"]
    # The block is paid for up front: its hourly price is the Capacity Block product's.
    assert items["pcs/node-group/block"]["unitHourly"] == _recorded_rate("5Q7AP3RH7KTVUNCJ")
    assert cost["offline"] is False and cost["currency"] == "USD"
    assert cost["untilTtl"] == pytest.approx(cost["hourly"] * 10, abs=0.01)
    # Parts the Price List has no product for (in this slice) stay listed, unpriced, and the
    # total says it is incomplete.
    assert items["natgw"]["hourly"] is None and cost["complete"] is False
    assert items["pcs/cluster"]["unpriced"]
    # A second plan reads the cache: the Price List is asked nothing more.
    before = len(sandbox.requests())
    again = _plan_cost(sandbox, spec)
    assert [r for r in sandbox.requests()[before:] if r["action"] == "GetProducts"] == []
    assert again["hourly"] == cost["hourly"]
    offline = sandbox.fmctl("plan", "-f", str(spec), "--offline", "-o", "json")
    shipped = json.loads(offline.stdout)["cost"]
    assert shipped["offline"] is True and shipped["asOf"]
    assert {i["resource"]: i["unitHourly"] for i in shipped["items"] if i["hourly"] is not None}[
        "pcs/node-group/train"
    ] == on_demand
    text = sandbox.fmctl("plan", "-f", str(spec), "--sandbox")
    assert f"cost: at least ${cost['hourly']:,.2f}/hour" in text.stdout, text.stdout


def test_where_the_price_list_cannot_be_asked_the_shipped_table_answers_and_says_why(
    tmp_path: Path,
) -> None:
    # A closed port: every call fails to connect, as with no route to the Price List.
    dead = Aws("us-east-1", "http://127.0.0.1:9", max_attempts=1)
    dead.credentials = ("AKIDEXAMPLE", "secret")
    dead.sandbox = True
    book = PriceListBook(dead, "us-east-1a", cache_for(tmp_path))
    p5 = book.quote("us-east-1", Instance("p5.48xlarge", "OnDemand"))
    assert isinstance(p5, Quote) and p5.usd_per_hour == 55.04
    assert "shipped table" in p5.source and "asking the AWS Price List" in p5.source
    nat = book.quote("us-east-1", NatGateway())
    assert isinstance(nat, Unpriced) and "asking the AWS Price List" in nat.why
    spot = book.quote("us-east-1", Instance("p5.48xlarge", "Spot"))
    assert isinstance(spot, Unpriced) and "Spot price history" in spot.why
    assert not (tmp_path / "price-list-cache.json").exists()  # a failure is not cached


def test_fmctl_cost_prices_what_runs_and_asks_cost_explorer_only_by_an_active_tag(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    from provisioner.resources.tags import OWNER_TAG
    from tests.engine.test_pcs import pcs_spec

    name, region = "cost-now", "us-west-2"
    spec = pcs_spec(tmp_path, name, region, instanceType="p5.48xlarge", count=2)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        done = sandbox.fmctl("cost", name, "--region", region, "--sandbox", "-o", "json")
        assert done.returncode == 0, done.stdout + done.stderr
        data = json.loads(done.stdout)
        items = {i["description"]: i for i in data["items"]}
        # The GPU pool's two instances at the recorded us-west-2 rate (its own SKU).
        p5 = items["2 x p5.48xlarge (OnDemand)"]
        assert p5["hourly"] == round(2 * 55.04, 2) and "HNW4W6GM8AE2PCQX" in p5["source"]
        assert data["hourly"] >= p5["hourly"]
        # The login node's Slurm answers no Run Command here (no tools): the idle share is
        # unknown, and says why.
        assert data["idle"]["hourly"] is None and data["idle"]["gpuNodes"] == 0, data["idle"]
        assert "ended Failed" in data["idle"]["note"], data["idle"]
        # Cost Explorer has nothing by a tag nobody activated: said, with how to activate it.
        assert (
            data["soFar"]["usd"] is None
            and "not an active cost allocation tag" in (data["soFar"]["note"])
        )
        ce = sandbox.aws("us-east-1").client("ce")
        ce.update_cost_allocation_tags_status(
            CostAllocationTagsStatus=[{"TagKey": OWNER_TAG, "Status": "Active"}]
        )
        before = len(sandbox.requests())
        again = json.loads(
            sandbox.fmctl("cost", name, "--region", region, "--sandbox", "-o", "json").stdout
        )
        asked = [r["action"] for r in sandbox.requests()[before:] if r["service"] == "ce"]
        assert asked == ["ListCostAllocationTags", "GetCostAndUsage"]
        assert "no costs by fmctl.dev/cluster yet" in again["soFar"]["note"]
        before = len(sandbox.requests())
        with login_slurm(sandbox, tmp_path / "slurm") as slurm:
            # One of the pool's two nodes runs a job: the other is idle, at the p5's rate.
            (slurm / "sinfo.txt").write_text(
                "train*|mixed|Unknown|train-1|none\ntrain*|idle|Unknown|train-2|none\n"
            )
            quiet = sandbox.fmctl(
                "cost", name, "--region", region, "--sandbox", "--no-cost-explorer"
            )
        assert quiet.returncode == 0 and "so far" not in quiet.stdout
        assert [r for r in sandbox.requests()[before:] if r["service"] == "ce"] == []
        assert "$110.08/hour" in quiet.stdout, quiet.stdout
        line = next(x for x in quiet.stdout.splitlines() if x.startswith("idle now:"))
        assert line.startswith("idle now: 1 of 2 GPU nodes ($55.04/hour, "), line
        assert line.endswith(": train-2"), line
    finally:
        ce = sandbox.aws("us-east-1").client("ce")
        ce.update_cost_allocation_tags_status(
            CostAllocationTagsStatus=[{"TagKey": OWNER_TAG, "Status": "Inactive"}]
        )
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    missing = sandbox.fmctl("cost", name, "--region", region, "--sandbox")
    assert missing.returncode == 1 and "no resource tagged" in missing.stdout
