"""`fmctl check`: the node tools' outputs (recorded, healthy and broken) parsed and judged
against the catalog, the results folder node-check.sh writes, and the command's verdicts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from provisioner.catalog import load_catalog
from provisioner.catalog.nccl_baselines import NcclBaseline
from provisioner.check import outputs
from provisioner.check.judge import (
    NCCL_FLOOR,
    Verdict,
    expected_busbw_gbs,
    judge_nccl,
    judge_node,
)
from provisioner.check.results import check_folder
from provisioner.render.context import ClusterContext, build_context
from provisioner.render.pools import PoolContext
from tests.conftest import ROOT, validate_text
from tests.tools.efa_rule import efa_devices
from tests.tools.standin import recorded

DATA = ROOT / "tests/data/check"
P5_SPEC = ROOT / "examples/p5-slurm-capacity-block.yaml"


def _data(name: str) -> str:
    return (DATA / name).read_text()


def _context() -> ClusterContext:
    validation = validate_text(P5_SPEC.read_text())
    assert validation.ok and validation.resolved is not None
    return build_context(validation.resolved, load_catalog())


@pytest.fixture(scope="module")
def pool() -> PoolContext:
    found = _context().pools[0]
    assert found.name == "train" and found.gpus == 8 and found.efa_devices == 32
    return found


# -- parsers -----------------------------------------------------------------------------


def test_nvidia_smi() -> None:
    healthy = outputs.parse_nvidia_smi(_data("nvidia-smi-healthy.csv"))
    assert [g.index for g in healthy.gpus] == list(range(8)) and healthy.errors == []
    assert healthy.gpus[0].name == "NVIDIA H100 80GB HBM3" and healthy.gpus[0].memory_mib == 81559
    lost = outputs.parse_nvidia_smi(_data("nvidia-smi-lost-gpu.csv"))
    assert len(lost.gpus) == 7 and outputs.LOST.search(lost.errors[0])
    ecc = outputs.parse_nvidia_smi(_data("nvidia-smi-ecc.csv"))
    assert {g.index: g.ecc_uncorrected for g in ecc.gpus if g.ecc_uncorrected} == {5: 2}
    none = outputs.parse_nvidia_smi(_data("nvidia-smi-no-driver.csv"))
    assert none.gpus == [] and "NVIDIA-SMI has failed" in none.errors[0]


def test_dcgm_diag_both_layouts() -> None:
    healthy = outputs.parse_dcgm_diag(_data("dcgmi-diag-healthy.json"))
    assert healthy.error is None and len(healthy.results) == 9 + 16 and healthy.failed() == []
    failed = outputs.parse_dcgm_diag(_data("dcgmi-diag-memory-fail.json")).failed()
    assert [(r.test, r.gpu) for r in failed] == [("GPU Memory", 3)]
    assert "double-bit ECC" in failed[0].message
    warned = outputs.parse_dcgm_diag(_data("dcgmi-diag-row-remap-warn.json"))
    assert warned.failed() == [] and "row remaps" in warned.warned()[0].message
    v4 = outputs.parse_dcgm_diag(_data("dcgmi-diag-v4-memory-fail.json")).failed()
    assert [(r.test, r.gpu) for r in v4] == [("memory", 6)]
    down = outputs.parse_dcgm_diag(_data("dcgmi-diag-hostengine-down.json"))
    assert down.results == [] and down.error and "host engine" in down.error.lower()


def _efa(name: str) -> outputs.EfaReport:
    """What fmctl reads from a node whose fi_info printed the recorded ``name``."""
    text = _data(name)
    return outputs.efa_report(efa_devices(text), text)


def test_fi_info() -> None:
    assert len(_efa("fi_info-p5-healthy.txt").domains) == 32
    assert len(_efa("fi_info-p5-one-missing.txt").domains) == 31
    none = _efa("fi_info-no-efa.txt")
    assert none.domains == [] and none.error == "fi_getinfo: -61 (No data available)"


@pytest.mark.parametrize("libfabric", [1, 2])
def test_efa_counting_rule_counts_devices_not_entries(libfabric: int) -> None:
    """libfabric 2.x lists each device under efa-direct and efa (and a DGRAM -dgrm entry):
    a p5 prints 96 entries for its 32 devices; the rule the prolog, node-check and fmctl
    share counts 32 (counting `provider: efa` lines, the prolog's old rule, gave 64 RDM)."""
    text = recorded.fi_info(recorded.p5_domains(32), libfabric)
    assert len(efa_devices(text).split()) == 32
    assert text.count("provider: efa") == (96 if libfabric == 2 else 64)
    real = (ROOT / "tests/data/real/fi_info-libfabric2-one-device.txt").read_text()
    assert efa_devices(real).split() == ["rdmap49s0-rdm"]


def test_exporters_record() -> None:
    states = outputs.parse_exporters("node ok\ndcgm missing: no dcgm-exporter binary\n")
    assert [(s.name, s.ok, s.reason) for s in states] == [
        ("node", True, ""),
        ("dcgm", False, "no dcgm-exporter binary"),
    ]


def test_a_node_the_health_agent_drained_fails_the_check(tmp_path: Path) -> None:
    """node-check.sh brings back the health agent's state line; a node it drained fails
    (it has left the scheduler), a fault it held is shown, a healthy one passes."""
    assert outputs.parse_health("no health agent record on n1") is None
    folder = tmp_path / "results"
    state = tmp_path / "state"
    os.environ["FMCTL_HEALTH_STATE"] = str(state)
    try:
        for node, line in (
            ("n1", "draining fmctl-health: XID 79 RESTART_BM -> replace"),
            ("n2", "held fmctl-health: XID 109 RESET_GPU -> replace (budget: 1 of 3 nodes)"),
            ("n3", "healthy no node-level fault"),
        ):
            state.write_text(line + "\n")
            _gather(folder, tmp_path, node, HEALTHY)
    finally:
        del os.environ["FMCTL_HEALTH_STATE"]
    report = check_folder(_context(), folder)
    health = {v.subject: f for v in report.verdicts for f in v.findings if f.check == "health"}
    assert health["n1"].ok is False and "XID 79 RESTART_BM" in health["n1"].detail
    assert health["n2"].ok is None and "budget" in health["n2"].detail
    assert health["n3"].ok is True
    assert [v.ok for v in report.verdicts if v.subject in health] == [False, True, True]


def test_nccl() -> None:
    healthy = outputs.parse_nccl(_data("nccl-p5-2nodes-degraded.txt"))
    assert healthy.ranks == 16 and healthy.hosts == ["ip-10-1-32-11", "ip-10-1-32-57"]
    largest = healthy.largest
    assert largest is not None and largest.size_bytes == 16 * 2**30
    assert largest.busbw_gbs == pytest.approx(362.0) and largest.wrong == 0
    assert healthy.avg_busbw_gbs is not None and healthy.avg_busbw_gbs < largest.busbw_gbs
    wrong = outputs.parse_nccl(_data("nccl-p5-2nodes-wrong.txt"))
    assert sum(r.wrong for r in wrong.rows) == 1024
    assert outputs.parse_nccl("srun: error: task 3 launch failed\n").largest is None


# -- verdicts ----------------------------------------------------------------------------


def _verdict(pool: PoolContext, smi: str, diag: str, efa: str) -> Verdict:
    """One node judged from recorded outputs."""
    return judge_node(
        "node-1",
        pool,
        outputs.parse_nvidia_smi(_data(smi)),
        outputs.parse_dcgm_diag(_data(diag)),
        _efa(efa),
    )


def _node(pool: PoolContext, smi: str, diag: str, efa: str) -> list[tuple[str, bool | None]]:
    return [(f.check, f.ok) for f in _verdict(pool, smi, diag, efa).findings]


def test_a_healthy_node_passes(pool: PoolContext) -> None:
    found = _node(
        pool, "nvidia-smi-healthy.csv", "dcgmi-diag-healthy.json", "fi_info-p5-healthy.txt"
    )
    assert found == [("gpus", True), ("dcgm", True), ("efa", True)]
    # A warning is shown, not failed.
    warned = _node(
        pool, "nvidia-smi-healthy.csv", "dcgmi-diag-row-remap-warn.json", "fi_info-p5-healthy.txt"
    )
    assert warned == [("gpus", True), ("dcgm", True), ("efa", True)]


@pytest.mark.parametrize(
    ("smi", "diag", "efa", "failing"),
    [
        ("nvidia-smi-lost-gpu.csv", "dcgmi-diag-healthy.json", "fi_info-p5-healthy.txt", "gpus"),
        ("nvidia-smi-ecc.csv", "dcgmi-diag-healthy.json", "fi_info-p5-healthy.txt", "gpus"),
        ("nvidia-smi-no-driver.csv", "dcgmi-diag-healthy.json", "fi_info-p5-healthy.txt", "gpus"),
        # H200s where the catalog says H100 (the wrong instance type, or a mislabelled pool).
        ("nvidia-smi-p5en.csv", "dcgmi-diag-healthy.json", "fi_info-p5-healthy.txt", "gpus"),
        ("nvidia-smi-healthy.csv", "dcgmi-diag-memory-fail.json", "fi_info-p5-healthy.txt", "dcgm"),
        (
            "nvidia-smi-healthy.csv",
            "dcgmi-diag-v4-memory-fail.json",
            "fi_info-p5-healthy.txt",
            "dcgm",
        ),
        (
            "nvidia-smi-healthy.csv",
            "dcgmi-diag-hostengine-down.json",
            "fi_info-p5-healthy.txt",
            "dcgm",
        ),
        ("nvidia-smi-healthy.csv", "dcgmi-diag-healthy.json", "fi_info-p5-one-missing.txt", "efa"),
        ("nvidia-smi-healthy.csv", "dcgmi-diag-healthy.json", "fi_info-no-efa.txt", "efa"),
    ],
)
def test_a_broken_node_fails_on_what_is_broken(
    pool: PoolContext, smi: str, diag: str, efa: str, failing: str
) -> None:
    found = dict(_node(pool, smi, diag, efa))
    assert found.pop(failing) is False
    assert all(ok is not False for ok in found.values()), found


def test_nccl_against_the_efa_bandwidth(pool: PoolContext) -> None:
    # p5.48xlarge: 3,200 Gbps of EFA = 400 GB/s, and AWS's measured 2-node figures.
    assert expected_busbw_gbs(pool) == 400.0
    healthy = judge_nccl(pool, outputs.parse_nccl(recorded.nccl_p5_2nodes()))
    assert healthy.ok and healthy.findings[0].ok is True
    sockets = judge_nccl(pool, outputs.parse_nccl(_data("nccl-p5-2nodes-sockets.txt")))
    assert not sockets.ok and ">= 414 GB/s" in sockets.findings[0].expected
    assert "NCCL_DEBUG=INFO" in sockets.findings[0].detail
    # Where nothing was measured (2 x p5en), EFA's line rate is the yardstick.
    p5en = replace(pool, itype=load_catalog()["p5en.48xlarge"])
    assert expected_busbw_gbs(p5en) == 400.0
    coarse = judge_nccl(p5en, outputs.parse_nccl(_data("nccl-p5-2nodes-sockets.txt")))
    assert not coarse.ok and f">= {NCCL_FLOOR * 400:.0f} GB/s" in coarse.findings[0].expected
    assert "--save-baseline" in coarse.findings[0].detail
    assert "line-rate estimate" in coarse.findings[0].expected  # said, not passed off as measured
    one = judge_nccl(pool, outputs.parse_nccl(_data("nccl-p5-1node.txt")))
    assert one.ok and one.findings[0].ok is None and "EFA not exercised" in one.findings[0].detail
    wrong = judge_nccl(pool, outputs.parse_nccl(_data("nccl-p5-2nodes-wrong.txt")))
    assert not wrong.ok and "corruption" in wrong.failed()[0].detail


# -- the results folder and the command --------------------------------------------------


def _fake_tools(bin_dir: Path, smi: str, diag: str, efa: str) -> None:
    """nvidia-smi, dcgmi and fi_info that print recorded outputs."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool, name in (("nvidia-smi", smi), ("dcgmi", diag), ("fi_info", efa)):
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\ncat '{DATA / name}'\n")
        script.chmod(0o755)


def _gather(folder: Path, tmp: Path, node: str, files: tuple[str, str, str]) -> None:
    """Run the real node-check.sh as node ``node`` with fake tools on PATH."""
    bin_dir = tmp / f"bin-{node}"
    _fake_tools(bin_dir, *files)
    hostname = bin_dir / "hostname"
    hostname.write_text(f"#!/bin/sh\necho {node}\n")
    hostname.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    script = ROOT / "slurm/lib/node-check.sh"
    done = subprocess.run(
        ["bash", str(script), str(folder), "train"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


HEALTHY = ("nvidia-smi-healthy.csv", "dcgmi-diag-healthy.json", "fi_info-p5-healthy.txt")


def _fmctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provisioner", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_node_check_script_asks_nvidia_smi_for_the_parsed_fields() -> None:
    text = (ROOT / "slurm/lib/node-check.sh").read_text()
    asked = re.search(r"--query-gpu=(\S+)", text)
    assert asked is not None and asked.group(1) == ",".join(outputs.NVIDIA_SMI_FIELDS)


def test_save_a_baseline_and_be_judged_by_it(tmp_path: Path) -> None:
    """--save-baseline keeps a healthy run's figure (private to the user); a later, slower
    run of the pool is judged against it; an unhealthy run is never kept."""
    state = tmp_path / "state"
    healthy = tmp_path / "healthy"
    for node in ("train-st-p5-1", "train-st-p5-2"):
        _gather(healthy, tmp_path, node, HEALTHY)
    (healthy / "nccl").mkdir()
    (healthy / "nccl/train.txt").write_text(recorded.nccl_p5_2nodes())
    common = ("-f", str(P5_SPEC), "--state-dir", str(state))
    done = _fmctl("check", *common, "--from", str(healthy), "--save-baseline")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "baseline saved for pool train: 444.3 GB/s at 2 GiB across 2 nodes" in done.stderr
    saved = state / "clusters/llm-pretrain/nccl-baselines.json"
    assert saved.stat().st_mode & 0o777 == 0o600
    # The same nodes later, at 362 GB/s: below 85% of this pool's own 444.
    slower = tmp_path / "slower"
    shutil.copytree(healthy, slower)
    shutil.copy(DATA / "nccl-p5-2nodes-degraded.txt", slower / "nccl/train.txt")
    done = _fmctl("check", *common, "--from", str(slower), "--save-baseline")
    assert done.returncode == 1
    assert "85% of 444 at 2 GiB on 2 x p5.48xlarge: saved by fmctl check" in done.stderr
    assert "no baseline saved: a baseline comes from a healthy run" in done.stderr
    assert json.loads(saved.read_text())[0]["busbw_gbs"] == 444.31  # kept as it was


def test_check_a_healthy_cluster(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    for node in ("train-st-p5-1", "train-st-p5-2"):
        _gather(folder, tmp_path, node, HEALTHY)
    (folder / "nccl").mkdir()
    (folder / "nccl/train.txt").write_text(recorded.nccl_p5_2nodes())
    done = _fmctl("check", "-f", str(P5_SPEC), "--from", str(folder))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed, 0 failed: fit for a training run" in done.stdout
    # 2 of the spec's 16 nodes reported: said, not failed.
    assert "pool train: 2 of 16 nodes reported" in done.stdout


def test_check_names_the_broken_node_and_what_to_do(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    _gather(folder, tmp_path, "train-st-p5-1", HEALTHY)
    broken = ("nvidia-smi-lost-gpu.csv", "dcgmi-diag-healthy.json", "fi_info-p5-one-missing.txt")
    _gather(folder, tmp_path, "train-st-p5-2", broken)
    done = _fmctl("check", "-f", str(P5_SPEC), "--from", str(folder))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "error: train-st-p5-2: gpus: 7 GPUs, expected 8 x H100: GPU lost" in done.stderr
    assert "error: train-st-p5-2: efa: 31 EFA devices, expected 32 EFA devices" in done.stderr
    assert "scontrol update nodename=train-st-p5-2 state=drain" in done.stderr
    assert "train-st-p5-1" not in done.stderr and "Traceback" not in done.stderr
    as_json = _fmctl("check", "-f", str(P5_SPEC), "--from", str(folder), "--json")
    data = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and data["ok"] is False
    assert [v["subject"] for v in data["verdicts"] if not v["ok"]] == ["train-st-p5-2"]


def test_check_refuses_a_folder_that_is_not_results(tmp_path: Path) -> None:
    done = _fmctl("check", "-f", str(P5_SPEC), "--from", str(tmp_path))
    assert done.returncode == 1 and "no nodes/ folder of results" in done.stderr
    assert "Traceback" not in done.stderr
    (tmp_path / "nodes/stray").mkdir(parents=True)
    (tmp_path / "nodes/stray/pool").write_text("inference\n")
    done = _fmctl("check", "-f", str(P5_SPEC), "--from", str(tmp_path))
    assert done.returncode == 1 and "not a pool of this spec" in done.stderr


def test_the_verdicts_follow_the_spec_not_the_outputs() -> None:
    """The p5en pool expects H200s and 16 EFA devices: the p5 outputs fail there."""
    text = (ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text()
    validation = validate_text(text)
    assert validation.resolved is not None
    p5en = build_context(validation.resolved, load_catalog()).pools[0]
    good = _verdict(
        p5en, "nvidia-smi-p5en.csv", "dcgmi-diag-healthy.json", "fi_info-p5en-healthy.txt"
    )
    assert good.ok
    wrong = _verdict(p5en, *HEALTHY)
    assert {f.check for f in wrong.failed()} == {"gpus", "efa"}


def test_check_says_what_it_needs(tmp_path: Path) -> None:
    """Asked wrongly, `check` says how to ask, before any AWS call."""
    nothing = _fmctl("check")
    assert nothing.returncode == 1 and "fmctl check NAME" in nothing.stderr
    no_spec = _fmctl("check", "--from", str(tmp_path))
    assert no_spec.returncode == 1 and "--from needs the cluster's spec" in no_spec.stderr
    other = _fmctl("check", "not-this-one", "-f", str(P5_SPEC))
    assert other.returncode == 1 and "not not-this-one" in other.stderr
    unsaved = _fmctl("check", "never-up", "--state-dir", str(tmp_path))
    assert unsaved.returncode == 1 and "no spec saved for never-up" in unsaved.stderr
    assert all("Traceback" not in d.stderr for d in (nothing, no_spec, other, unsaved))


def test_a_folder_with_no_node_is_not_a_pass(tmp_path: Path) -> None:
    (tmp_path / "nodes").mkdir()
    done = _fmctl("check", "-f", str(P5_SPEC), "--from", str(tmp_path))
    assert done.returncode == 1 and "error: no node was checked" in done.stderr
    assert "fit for a training run" not in done.stdout


def test_nccl_against_the_measured_baseline(pool: PoolContext) -> None:
    """p5.48xlarge x 2 has AWS's measured figures (480 GB/s at 8-16 GiB): a real healthy run
    (444 GB/s at 2 GiB, judged against the 4 GiB row) passes; a run at 362 GB/s at 16 GiB,
    75% of healthy, which the line-rate floor let through, now fails."""
    healthy = judge_nccl(pool, outputs.parse_nccl(recorded.nccl_p5_2nodes()))
    assert healthy.ok, healthy.findings
    assert "85% of 466 at 4 GiB on 2 x p5.48xlarge" in healthy.findings[0].expected
    degraded = judge_nccl(pool, outputs.parse_nccl(_data("nccl-p5-2nodes-degraded.txt")))
    assert not degraded.ok
    assert degraded.findings[0].expected.startswith(">= 414 GB/s (85% of 487 at 16 GiB")
    assert NCCL_FLOOR * expected_busbw_gbs(pool) < 362  # what used to let it pass


def test_nccl_small_messages_are_not_judged(pool: PoolContext) -> None:
    big = ("1073741824", "2147483648")
    text = "\n".join(
        line for line in recorded.nccl_p5_2nodes().splitlines() if not line.strip().startswith(big)
    )
    verdict = judge_nccl(pool, outputs.parse_nccl(text))
    assert not verdict.ok and "-e 16G" in verdict.findings[0].detail


def test_a_saved_baseline_comes_first(pool: PoolContext) -> None:
    report = outputs.parse_nccl(_data("nccl-p5-2nodes-degraded.txt"))
    mine = NcclBaseline("p5.48xlarge", 2, 16 * 2**30, 370.0, "saved", pool=pool.name)
    verdict = judge_nccl(pool, report, (mine,))
    assert verdict.ok and "85% of 370" in verdict.findings[0].expected
    other_pool = NcclBaseline("p5.48xlarge", 2, 16 * 2**30, 370.0, "saved", pool="other")
    assert not judge_nccl(pool, report, (other_pool,)).ok
