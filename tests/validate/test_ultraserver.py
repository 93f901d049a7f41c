"""fmctl's UltraServer and architecture rules against ParallelCluster's own validators.

fmctl refuses before any AWS call what ParallelCluster would refuse at create time: the
catalog's Capacity Block sizes are ParallelCluster's allowed ones, and a head node whose
architecture is not the pools' is refused exactly where InstanceArchitectureCompatibility-
Validator fails it (tests/tools/pcluster_facts.py runs them in .venv-pcluster).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from provisioner.catalog import architecture_of, load_catalog
from tests.conftest import DELETE, set_path, validate_data
from tests.tools.pcluster_venv import run_json

CATALOG = load_catalog()
HEADS = ("m7i.4xlarge", "m7g.4xlarge", "c7gn.2xlarge", "r7i.2xlarge")
POOLS = {"p5.48xlarge": 16, "p6e-gb200.36xlarge": 18, "p6-b200.48xlarge": 4}


def _pcluster(cases: list[list[str]], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    out: dict[str, Any] = run_json("pcluster_facts.py", str(path))
    return out


def test_fmctl_refuses_what_parallelcluster_refuses(base: dict[str, Any], tmp_path: Path) -> None:
    pairs = [(head, pool) for head in HEADS for pool in POOLS]
    cases = [
        [architecture_of(head, CATALOG), pool, CATALOG[pool].architecture] for head, pool in pairs
    ]
    theirs = _pcluster(cases, tmp_path)
    ultra = {t.family: list(t.block_sizes) for t in CATALOG.types.values() if t.ultra_server}
    assert ultra == theirs["blockSizes"]
    assert any(theirs["refused"]) and not all(theirs["refused"])  # both kinds are exercised
    for (head, pool), refused in zip(pairs, theirs["refused"], strict=True):
        data = set_path(base, ("compute", "headNode", "instanceType"), head)
        data = set_path(data, ("compute", "gpuPools", 0, "instanceType"), pool)
        data = set_path(data, ("compute", "gpuPools", 0, "count"), POOLS[pool])
        found = [p for p in validate_data(data).problems if p.code == "architecture-mix"]
        assert bool(found) == refused, (head, pool, found)


def test_without_a_head_node_type_fmctl_picks_one_parallelcluster_accepts(
    base: dict[str, Any], tmp_path: Path
) -> None:
    cases = []
    for pool, count in POOLS.items():
        data = set_path(base, ("compute", "headNode"), DELETE)
        data = set_path(data, ("compute", "gpuPools", 0, "instanceType"), pool)
        data = set_path(data, ("compute", "gpuPools", 0, "count"), count)
        result = validate_data(data)
        assert result.ok and result.resolved is not None, result.problems
        head = result.resolved.compute.head_node.instance_type
        cases.append([architecture_of(head, CATALOG), pool, CATALOG[pool].architecture])
    assert not any(_pcluster(cases, tmp_path)["refused"])


def test_pcs_runs_ultraservers_on_slurm_25_05_or_later(base: dict[str, Any]) -> None:
    """AWS PCS's UltraServer guide asks for Slurm 25.05+ (24.11 is a located error) and an
    AMI with nvidia-imex enabled (no sample AMI has it: slurm.amiId is required)."""
    data = set_path(base, ("compute", "gpuPools", 0, "instanceType"), "p6e-gb200.36xlarge")
    data = set_path(data, ("compute", "gpuPools", 0, "count"), 18)
    data = set_path(data, ("compute", "headNode"), DELETE)
    ami = {"amiId": "ami-0123456789abcdef0"}
    for version, refused in (("24.11", True), ("25.05", False), ("25.11", False)):
        slurm = {"provider": "pcs", "pcs": {"slurmVersion": version}, **ami}
        spec = set_path(data, ("slurm",), slurm)
        found = [p for p in validate_data(spec).problems if p.code == "ultraserver-pcs-slurm"]
        assert bool(found) == refused, (version, found)
        if found:
            assert found[0].path == ("slurm", "pcs", "slurmVersion")
            assert '"25.11"' in found[0].hint
    sample = set_path(data, ("slurm",), {"provider": "pcs", "pcs": {"slurmVersion": "25.11"}})
    (found,) = [p for p in validate_data(sample).problems if p.code == "ultraserver-pcs-slurm"]
    assert found.path == ("slurm", "amiId") and "nvidia-imex" in found.message
    # The same pool on ParallelCluster is not PCS's business.
    assert not [p for p in validate_data(data).problems if p.code == "ultraserver-pcs-slurm"]
