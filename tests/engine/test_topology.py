"""The topology model read from the emulator's DescribeInstanceTopology: 3 layers for p5en,
4 for p6-b200, UltraServer domains for GB200, and holes filled from what was published."""

from __future__ import annotations

import itertools
from typing import Any

from provisioner.catalog import load_catalog
from provisioner.ops.topology import compute_instances, read_topology
from provisioner.ops.topology_model import Placed, carry_over, pool_trees, to_json
from tests.engine.harness import Sandbox

CATALOG = load_catalog()
REGION = "us-west-2"


def _launch(sandbox: Sandbox, cluster: str, itype: str, count: int, queue: str) -> list[str]:
    ec2 = sandbox.aws(REGION).client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [
        {"Key": "parallelcluster:cluster-name", "Value": cluster},
        {"Key": "parallelcluster:node-type", "Value": "Compute"},
        {"Key": "parallelcluster:queue-name", "Value": queue},
    ]
    made = ec2.run_instances(
        ImageId=image,
        MinCount=count,
        MaxCount=count,
        InstanceType=itype,
        Placement={"AvailabilityZone": f"{REGION}a"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return [i["InstanceId"] for i in made["Instances"]]


def _cleanup(sandbox: Sandbox, ids: list[str]) -> None:
    sandbox.aws(REGION).client("ec2").terminate_instances(InstanceIds=ids)


def _one_parent_each(placed: list[Placed]) -> None:
    """Every network node has one parent: a tree, as EC2's hierarchy is, not a mesh."""
    parent: dict[str, str] = {}
    for p in placed:
        for up, down in itertools.pairwise(p.network_nodes):
            assert parent.setdefault(down, up) == up, (p, parent[down])


def test_three_and_four_layer_pools(sandbox: Sandbox) -> None:
    ids = _launch(sandbox, "topo-layers", "p5en.48xlarge", 6, "train")
    ids += _launch(sandbox, "topo-layers", "p6-b200.48xlarge", 5, "b200")
    try:
        aws = sandbox.aws(REGION)
        placed = read_topology(aws, compute_instances(aws, "topo-layers"))
        assert {p.instance_id for p in placed} == set(ids)
        trees = {t.pool: t for t in pool_trees(placed, CATALOG)}
        assert trees["train"].layers == 3 and len(trees["train"].nodes_per_layer) == 3
        assert trees["b200"].layers == 4 and len(trees["b200"].nodes_per_layer) == 4
        assert trees["train"].nodes_per_layer[0] == 1  # one spine per AZ
        assert trees["train"].instances == 6 and trees["b200"].instances == 5
        assert all(
            len(p.network_nodes) == CATALOG[p.instance_type].network_layers.count
            for p in placed
            if CATALOG[p.instance_type].network_layers
        )
        # Stable across calls: the same account reads the same ids.
        again = read_topology(aws, compute_instances(aws, "topo-layers"))
        assert sorted(map(to_json, again), key=str) == sorted(map(to_json, placed), key=str)
        _one_parent_each(placed)
    finally:
        _cleanup(sandbox, ids)


def test_gb200_capacity_blocks_are_ultraserver_domains(sandbox: Sandbox) -> None:
    ids = _launch(sandbox, "topo-gb200", "p6e-gb200.36xlarge", 18, "gb")
    ids += _launch(sandbox, "topo-gb200", "p6e-gb200.36xlarge", 9, "gb")
    try:
        aws = sandbox.aws(REGION)
        placed = read_topology(aws, compute_instances(aws, "topo-gb200"))
        (tree,) = pool_trees(placed, CATALOG)
        assert sorted(n for _, n in tree.ultraservers) == [9, 18]
        assert tree.largest_group == 18  # an UltraServer hangs off one bottom-layer node
        first = {p.capacity_block_id for p in placed if p.instance_id in ids[:18]}
        assert len(first) == 1 and None not in first
        _one_parent_each(placed)
    finally:
        _cleanup(sandbox, ids)


def test_a_partial_read_keeps_what_was_published() -> None:
    """A running instance EC2 did not answer for, and one whose capacityBlockId has not
    propagated, keep their earlier place: a good topology is never replaced by a worse."""
    good = [
        Placed("i-1", "10.0.0.1", "p6e-gb200.36xlarge", ("a", "b", "c"), "gb", "cb-1"),
        Placed("i-2", "10.0.0.2", "p6e-gb200.36xlarge", ("a", "b", "c"), "gb", "cb-1"),
    ]
    previous: dict[str, Any] = {"instances": [to_json(p) for p in good]}
    now = [Placed("i-1", "10.0.0.1", "p6e-gb200.36xlarge", ("a", "b", "c"), "gb", None)]
    merged, carried = carry_over(now, previous, ["i-1", "i-2"])
    assert carried == 2
    assert sorted(map(to_json, merged), key=str) == sorted(map(to_json, good), key=str)
    # An instance that is no longer running is not carried over.
    merged, _ = carry_over(now, previous, ["i-1"])
    assert [p.instance_id for p in merged] == ["i-1"]
    assert carry_over(now, None, ["i-1", "i-2"]) == (now, 0)


def test_eks_nodes_carry_their_layers_as_labels() -> None:
    """The sandbox's EKS nodes: one label per network layer (4 on p6-b300), none on types
    EC2 does not place, and ids hashed per account as EC2's are."""
    from fmctl_sandbox.topology import layer_labels

    b300 = layer_labels("111111111111", "us-west-2a", "i-0abc", "p6-b300.48xlarge")
    assert sorted(b300) == [f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3, 4)]
    assert layer_labels("111111111111", "us-west-2a", "i-0abc", "g5.xlarge") == {}
    other = layer_labels("222222222222", "us-west-2a", "i-0abc", "p6-b300.48xlarge")
    assert set(other.values()).isdisjoint(b300.values())
