"""Where reservations sit before launch: the emulator's DescribeCapacityReservationTopology
(botocore's request and answer shapes, its 10-id limit, no placement outside active and
pending) read by fmctl, and `fmctl plan` saying it, read-only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provisioner.drivers.aws import error_code
from provisioner.ops.reservation_topology import ReservedPlace, describe, read_places, shared
from tests.engine.harness import Sandbox, created_calls

REGION = "us-west-2"
AZ = f"{REGION}a"


def _seed(sandbox: Sandbox, rid: str, itype: str, count: int, state: str = "active") -> None:
    sandbox.seed(
        {
            "capacityReservationId": rid,
            "instanceType": itype,
            "availabilityZone": AZ,
            "totalInstanceCount": count,
            "availableInstanceCount": count,
            "state": state,
            "reservationType": "capacity-block",
        }
    )


def test_reservations_are_placed_before_launch(sandbox: Sandbox) -> None:
    _seed(sandbox, "cr-0aaa00000000000a1", "p5en.48xlarge", 4)
    _seed(sandbox, "cr-0aaa00000000000a2", "p6-b200.48xlarge", 2)
    _seed(sandbox, "cr-0aaa00000000000a3", "p6e-gb200.36xlarge", 18)
    _seed(sandbox, "cr-0aaa00000000000a4", "p6e-gb200.36xlarge", 9, state="scheduled")
    pools = [
        ("train", "cr-0aaa00000000000a1", "p5en.48xlarge"),
        ("b200", "cr-0aaa00000000000a2", "p6-b200.48xlarge"),
        ("gb", "cr-0aaa00000000000a3", "p6e-gb200.36xlarge"),
        ("later", "cr-0aaa00000000000a4", "p6e-gb200.36xlarge"),
    ]
    aws = sandbox.aws(REGION)
    places = {p.pool: p for p in read_places(aws, pools)}
    assert len(places["train"].network_nodes) == 3
    assert len(places["b200"].network_nodes) == 4  # p6-b200: four layers
    assert places["gb"].capacity_block_id and places["gb"].capacity_block_id.startswith("cb-")
    assert places["train"].capacity_block_id is None
    # A block not yet active is not placed (EC2's NetworkNodes documentation).
    assert places["later"].network_nodes == () and places["later"].state == "scheduled"
    # The same answer on every call; all under the AZ's one spine.
    again = {p.pool: p for p in read_places(aws, pools)}
    assert again == places
    pairs = {(s.first, s.second): s for s in shared(places.values())}
    assert all(s.layer >= 1 for s in pairs.values())
    lines = describe(list(places.values()))
    assert any(line.startswith("gb: cr-0aaa00000000000a3 (active) under 3") for line in lines)
    assert "later: cr-0aaa00000000000a4 (scheduled): EC2 gives no placement" in lines
    assert any(line.startswith("train and b200 share layer") for line in lines)


def test_the_api_limits_are_the_real_ones(sandbox: Sandbox) -> None:
    ec2 = sandbox.aws(REGION).client("ec2")
    ids = [f"cr-0bbb0000000000{i:03d}" for i in range(11)]
    for rid in ids:
        _seed(sandbox, rid, "p5.48xlarge", 1)
    with pytest.raises(Exception) as refused:
        ec2.describe_capacity_reservation_topology(CapacityReservationIds=ids)
    assert error_code(refused.value) == "InvalidParameterValue"
    with pytest.raises(Exception) as missing:
        ec2.describe_capacity_reservation_topology(CapacityReservationIds=["cr-0ccc000000000dead"])
    assert error_code(missing.value) == "InvalidCapacityReservationId.NotFound"
    # fmctl asks in tens.
    pools = [(f"p{i}", rid, "p5.48xlarge") for i, rid in enumerate(ids)]
    placed = read_places(sandbox.aws(REGION), pools)
    assert all(len(p.network_nodes) == 3 for p in placed) and len(placed) == 11


def test_shared_layers() -> None:
    a = ReservedPlace("a", "cr-1", "p5.48xlarge", "active", ("s", "m1", "l1"))
    b = ReservedPlace("b", "cr-2", "p5.48xlarge", "active", ("s", "m1", "l2"))
    c = ReservedPlace("c", "cr-3", "p5.48xlarge", "active", ("t", "m9", "l9"))
    found = {(s.first, s.second): (s.layer, s.node) for s in shared([a, b, c])}
    assert found == {("a", "b"): (2, "m1"), ("a", "c"): (0, ""), ("b", "c"): (0, "")}
    assert "a and c share no network node (separate spines)" in describe([a, b, c])


def test_plan_says_where_the_blocks_sit_and_writes_nothing(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    from tests.conftest import ROOT

    data = yaml.safe_load((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    data["metadata"]["name"] = "resv-topology"
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    before = len(sandbox.requests())
    done = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
    assert done.returncode == 0, done.stderr
    capacity = json.loads(done.stdout)["capacity"]
    (place,) = capacity["reservations"]
    assert place["pool"] == data["compute"]["gpuPools"][0]["name"]
    assert len(place["networkNodes"]) == 3 and place["state"] == "active"
    assert capacity["unread"] is None
    calls = sandbox.requests()[before:]
    assert "DescribeCapacityReservationTopology" in {c.get("action") for c in calls}
    text = sandbox.fmctl("plan", "-f", str(spec), "--sandbox")
    assert f"capacity: {place['pool']}: {place['reservationId']} (active) under 3" in text.stdout
    # Seeding the reservation is the sandbox's doing, not plan's: plan itself wrote nothing.
    assert not [c for c in created_calls(sandbox.requests()[before:]) if "Seed" not in c]
