"""`fmctl check` on UltraServer nodes: the NVLink domain formed (IMEX READY) or not."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.check import outputs
from provisioner.check.judge import judge_node
from provisioner.check.results import check_folder
from provisioner.render.context import ClusterContext, build_context
from tests.conftest import ROOT, set_path, validate_data

EXAMPLE = ROOT / "examples/p5-slurm-capacity-block.yaml"
POOL = ("compute", "gpuPools", 0)


def _context(instance_type: str, count: int, head: str) -> ClusterContext:
    data = yaml.safe_load(EXAMPLE.read_text())
    data = set_path(data, (*POOL, "instanceType"), instance_type)
    data = set_path(data, (*POOL, "count"), count)
    data = set_path(data, ("compute", "headNode", "instanceType"), head)
    result = validate_data(data)
    assert result.ok and result.resolved is not None, result.problems
    return build_context(result.resolved, load_catalog())


@pytest.fixture(scope="module")
def gb200() -> ClusterContext:
    return _context("p6e-gb200.36xlarge", 18, "m7g.4xlarge")


def test_imex_parse() -> None:
    """READY from -q is this node's daemon only: the domain is -N -j's word."""
    data = ROOT / "tests/data/check"
    up = outputs.parse_imex((data / "imex-domain-up.txt").read_text())
    assert up.ready and up.domain == "UP" and up.said == "domain UP, 2 nodes"
    peer_gone = outputs.parse_imex((data / "imex-domain-down.txt").read_text())
    assert not peer_gone.ready and peer_gone.domain == "DOWN"
    assert "10.0.16.22 UNAVAILABLE" in peer_gone.lagging
    local_only = outputs.parse_imex("READY\n")
    assert not local_only.ready and "no domain status" in local_only.said
    down = outputs.parse_imex("\nConnection refused: no IMEX daemon answers\n")
    assert not down.ready and down.said.startswith("Connection refused")
    assert outputs.parse_imex("") == outputs.ImexState(False, "no output")


@pytest.mark.parametrize(
    ("imex", "ok"),
    [
        (outputs.ImexState(True, "domain UP, 2 nodes", "UP"), True),
        (outputs.ImexState(False, "domain DOWN, 2 nodes", "DOWN", ("10.0.16.22 X",)), False),
        (outputs.ImexState(False, "nvidia-imex-ctl not installed on n1"), False),
        (None, False),
    ],
)
def test_an_ultraserver_node_is_judged_on_its_nvlink_domain(
    gb200: ClusterContext, imex: outputs.ImexState | None, ok: bool
) -> None:
    verdict = judge_node("n1", gb200.pools[0], None, None, None, [], imex)
    nvlink = [f for f in verdict.findings if f.check == "nvlink"]
    assert len(nvlink) == 1 and nvlink[0].ok is ok
    if not ok and imex is not None:
        assert nvlink[0].figure == "NVLink domain not formed"
        assert imex.said in nvlink[0].detail


def test_other_nodes_are_not_judged_on_imex() -> None:
    p5 = _context("p5.48xlarge", 2, "m7i.4xlarge").pools[0]
    verdict = judge_node("n1", p5, None, None, None, [], outputs.ImexState(False, "down"))
    assert "nvlink" not in {f.check for f in verdict.findings}


def test_node_check_records_what_imex_said(tmp_path: Path, gb200: ClusterContext) -> None:
    """node-check.sh writes imex.txt from nvidia-imex-ctl (or says it is not installed), and
    check_folder turns a not-READY node into a failed nvlink finding."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, body in {
        "nvidia-smi": "exit 9",
        "nvidia-imex-ctl": 'echo "Connection refused: no IMEX daemon answers" >&2; exit 1',
    }.items():
        (tools / name).write_text(f"#!/bin/bash\n{body}\n")
        (tools / name).chmod(0o755)
    out = tmp_path / "results"
    env = {"PATH": f"{tools}:/usr/bin:/bin", "NODE_NAME": "n1", "FMCTL_CHECK_PARTS": "gpu"}
    script = ROOT / "slurm/lib/node-check.sh"
    done = subprocess.run(["bash", str(script), str(out), "train"], env=env, check=False)
    assert done.returncode == 0
    said = (out / "nodes/n1/imex.txt").read_text()
    assert said.startswith("Connection refused")
    report = check_folder(gb200, out)
    finding = next(f for v in report.verdicts for f in v.findings if f.check == "nvlink")
    assert finding.ok is False and "Connection refused" in finding.detail
    (tools / "nvidia-imex-ctl").unlink()
    subprocess.run(["bash", str(script), str(out), "train"], env=env, check=True)
    assert "not installed on n1" in (out / "nodes/n1/imex.txt").read_text()
