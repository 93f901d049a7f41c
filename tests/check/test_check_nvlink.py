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


# -- EKS: the NVLink domain is each job's ComputeDomain (NVIDIA's DRA driver) -------------
def _eks_gb200() -> ClusterContext:
    result = validate_data(yaml.safe_load((ROOT / "tests/data/specs/gb200-eks.yaml").read_text()))
    assert result.ok and result.resolved is not None
    return build_context(result.resolved, load_catalog())


def _domain(*nodes: tuple[str, str, str], status: str = "Ready") -> dict[str, object]:
    return {
        "status": status,
        "nodes": [
            {"name": n, "ipAddress": "10.0.0.1", "cliqueID": clique, "index": 0, "status": s}
            for n, clique, s in nodes
        ],
    }


@pytest.mark.parametrize(
    ("domain", "nodes", "ok", "said"),
    [
        (_domain(("a", "u.1", "Ready"), ("b", "u.1", "Ready")), ["a", "b"], True, "clique u.1"),
        # Ready by its own word with no node listed (numNodes 0): not a formed domain.
        (_domain(), ["a", "b"], False, "no ready IMEX daemon on a, b"),
        (
            _domain(("a", "u.1", "Ready"), ("b", "u.1", "NotReady"), status="NotReady"),
            ["a", "b"],
            False,
            "no ready IMEX daemon on b",
        ),
        (
            _domain(("a", "u.1", "Ready"), ("b", "u.2", "Ready")),
            ["a", "b"],
            False,
            "cliques u.1, u.2",
        ),
        ({}, ["a", "b"], False, "DRA driver"),
    ],
)
def test_an_eks_job_is_judged_on_its_compute_domain(
    domain: dict[str, object], nodes: list[str], ok: bool, said: str
) -> None:
    from provisioner.check.judge import judge_domain

    verdict = judge_domain(_eks_gb200().pools[0], domain, nodes)
    (finding,) = verdict.findings
    assert finding.check == "nvlink" and finding.ok is ok
    assert said in finding.figure + finding.detail


def test_on_eks_a_node_is_not_judged_on_a_host_imex_daemon(tmp_path: Path) -> None:
    """EKS nodes run no IMEX daemon of their own (the DRA driver starts one per domain): no
    per-node nvlink finding there; the job's domain is judged from check's domain file."""
    import json

    context = _eks_gb200()
    verdict = judge_node("n1", context.pools[0], None, None, None, [], None, nvlink_on_node=False)
    assert "nvlink" not in {f.check for f in verdict.findings}
    (tmp_path / "nccl").mkdir()
    said = {
        "status": _domain(("n1", "u.1", "Ready"), ("n2", "u.1", "Ready")),
        "nodes": ["n1", "n2"],
    }
    (tmp_path / "nccl" / "nvl72.domain.json").write_text(json.dumps(said))
    report = check_folder(context, tmp_path)
    (domain,) = [v for v in report.verdicts if v.subject == "nvlink domain (nvl72)"]
    assert domain.ok
