"""The blueprint's parts list checks what mypy checks, at run time too: a resource's params
must be its kind's, a reference must name a kind that gives the outputs asked for, and a
resource id is planned once. Each mistake fails the plan's build, before any AWS call."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.blueprint import Where, build
from provisioner.blueprint.infra import Parts
from provisioner.blueprint.model import BlueprintError
from provisioner.catalog import load_catalog
from provisioner.render.context import build_context
from provisioner.resources.gateways import EipParams, ElasticIp
from provisioner.resources.network import SubnetOut, Vpc, VpcOut, VpcParams
from provisioner.resources.registry import kinds
from tests.conftest import ROOT, validate_text


def _parts() -> Parts:
    validation = validate_text((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    assert validation.ok and validation.resolved is not None, validation.problems
    spec = validation.resolved
    return Parts(spec, build_context(spec, load_catalog()))


def test_add_returns_a_reference_to_the_kinds_outputs() -> None:
    parts = _parts()
    ref = parts.add("vpc", Vpc, VpcParams("10.0.0.0/16", parts.tags("vpc")))
    assert (ref.target, ref.outputs) == ("vpc", VpcOut)
    assert [(i.id, i.kind) for i in parts.items] == [("vpc", "vpc")]
    assert parts.ref("vpc", VpcOut) == ref


def test_params_of_another_kind_are_refused() -> None:
    parts = _parts()
    with pytest.raises(BlueprintError, match="a vpc takes VpcParams, not EipParams"):
        parts.add("vpc", Vpc, EipParams(parts.tags("vpc")))  # type: ignore[arg-type]
    assert parts.items == []


def test_a_reference_to_the_wrong_kind_fails_the_build() -> None:
    parts = _parts()
    parts.add("eip/nat", ElasticIp, EipParams(parts.tags("eip/nat")))
    with pytest.raises(
        BlueprintError, match="eip/nat is a eip: its outputs are EipOut, not SubnetOut"
    ):
        parts.ref("eip/nat", SubnetOut)
    with pytest.raises(KeyError, match="subnet/private is not planned"):
        parts.ref("subnet/private", SubnetOut)
    assert parts.maybe("subnet/private", SubnetOut) is None


def test_an_id_is_planned_once() -> None:
    parts = _parts()
    parts.add("vpc", Vpc, VpcParams("10.0.0.0/16", parts.tags("vpc")))
    with pytest.raises(BlueprintError, match="vpc is planned twice"):
        parts.add("vpc", Vpc, VpcParams("10.1.0.0/16", parts.tags("vpc")))


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_every_example_builds_with_every_reference_to_its_kinds_outputs(example: str) -> None:
    """Every planned resource's references (in its params) name planned resources whose
    kinds give the outputs the reference says."""
    from provisioner.graph.ref import refs_in

    validation = validate_text((ROOT / "examples" / example).read_text())
    assert validation.ok and validation.resolved is not None, validation.problems
    items = {
        i.id: i for i in build(validation.resolved, load_catalog(), Where(Path("/x"), Path("/x/k")))
    }
    checked = 0
    for item in items.values():
        for ref in refs_in(item.params):
            assert ref.target in items, f"{item.id} refers to {ref.target}, not planned"
            assert kinds()[items[ref.target].kind].outputs is ref.outputs, (item.id, ref)
            checked += 1
    assert checked > 10
