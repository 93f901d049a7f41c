"""The plan as data: waves, critical path, cycles, and the mirror order of down."""

from __future__ import annotations

import pytest

from provisioner.catalog import load_catalog
from provisioner.drivers.kinds import all_kinds
from provisioner.plan.graph import Found, Node, Plan, deletion_order
from provisioner.plan.infra import build_plan
from provisioner.render.context import build_context
from tests.conftest import EXAMPLES


def _plan(*nodes: Node) -> Plan:
    return Plan({n.id: n for n in nodes})


def test_waves_and_critical_path() -> None:
    plan = _plan(
        Node("a", "k"), Node("b", "k", ("a",)), Node("c", "k", ("a",)), Node("d", "k", ("b", "c"))
    )
    assert plan.levels() == [["a"], ["b", "c"], ["d"]]
    seconds, chain = plan.critical_path({"a": 1, "b": 10, "c": 3, "d": 2})
    assert seconds == 13 and chain == ["a", "b", "d"]


def test_cycles_and_unknown_dependencies_are_refused() -> None:
    with pytest.raises(ValueError, match="cycle"):
        _plan(Node("a", "k", ("b",)), Node("b", "k", ("a",)))
    with pytest.raises(AssertionError, match="unknown"):
        _plan(Node("a", "k", ("zzz",)))


def test_deletion_waits_for_dependents() -> None:
    kinds = all_kinds()
    found = [
        Found("vpc", "vpc", "vpc-1"),
        Found("subnet", "subnet/private", "subnet-1"),
        Found("fsx", "fsx", "fs-1"),
        Found("dra", "dra/s3", "dra-1"),
        Found("sg", "sg/efa", "sg-1"),
        Found("bucket", "bucket", "b"),
    ]
    plan = deletion_order(found, kinds)
    waves = plan.levels()
    position = {n: i for i, wave in enumerate(waves) for n in wave}
    assert position["dra:dra-1"] < position["fsx:fs-1"] < position["subnet:subnet-1"]
    assert position["fsx:fs-1"] < position["sg:sg-1"] < position["vpc:vpc-1"]
    assert position["bucket:b"] == 0


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_infra_plans_of_the_examples(example: object) -> None:
    from provisioner.spec.source import load_source
    from provisioner.validate import validate_document

    doc, _ = load_source(str(example))
    spec = validate_document(doc).resolved
    assert spec is not None
    plan = build_plan(build_context(spec, load_catalog()))
    kinds = all_kinds()
    assert {n.kind for n in plan.nodes.values()} <= set(kinds)
    # down orders deletions by kind: every edge between owned resources must be one the
    # kinds declare (or within a kind, like the FSx group referring to the EFA group).
    for node in plan.nodes.values():
        for dep in node.deps:
            other = plan.nodes[dep]
            if node.owned and other.owned and other.kind != node.kind:
                assert other.kind in kinds[node.kind].after, (node.id, dep)
    if spec.network.vpc_id:
        assert plan.nodes["vpc"].owned is False and plan.nodes["vpc"].kind == "existing-vpc"
