"""The sandbox's stand-in node tools (``fmctl_sandbox.node_tools``) under fmctl's real verify
gate: verify-node.sh run with each container's env of the gate's Job as `render` makes it
for the p5en example, on a node folder the sandbox lays out (8 GPUs, 16 EFA devices,
3,200 Gbit/s). A healthy node passes every check; a GPU off the bus fails the GPU count, an
EFA device gone fails the device count and its loopback; the pair's all-reduce shows a
figure the verify controller reads (its own ``busbw_at``) above the pool's floor."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from fmctl_sandbox import node_gpus, node_tools
from fmctl_sandbox.kube_model import Hardware
from fmctl_sandbox.kube_programs import Programs
from provisioner.catalog import load_catalog
from provisioner.catalog.nccl_baselines import pair_floor
from provisioner.check.outputs import parse_nvidia_smi
from provisioner.render.context import build_context
from provisioner.render.kubernetes import verify_gate
from tests.conftest import ROOT, validate_text
from tests.render.helpers import program

LIB = ROOT / "slurm/lib"
NODE = "ip-10-0-1-1.ec2.internal"


def _context() -> Any:
    text = (ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text()
    validation = validate_text(text)
    assert validation.ok and validation.resolved is not None
    spec = validation.resolved
    health = spec.health.model_copy(
        update={"verify": spec.health.verify.model_copy(update={"kubernetes_gate": True})}
    )
    context = build_context(spec.model_copy(update={"health": health}), load_catalog())
    assert context.health_verify_kubernetes_gate
    return context


CONTEXT = _context()
POOL = CONTEXT.pools[0]


@pytest.fixture
def node(tmp_path: Path) -> tuple[Programs, dict[str, str]]:
    """A sandbox node of the pool's shape, laid out; the env the sandbox gives its pods."""
    programs = Programs()
    hardware = Hardware(POOL.gpus, POOL.efa_devices, "", 3200.0)
    env = programs.node_env("https://e", NODE, hardware)
    assert env[node_tools.HOST_ENV] == str(programs.host("https://e", NODE))
    return programs, env


def _containers() -> list[dict[str, Any]]:
    job = json.loads(verify_gate(CONTEXT).jobs[POOL.name])
    containers: list[dict[str, Any]] = job["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["gpu", "efa"]
    return containers


def _gate(container: dict[str, Any], env: dict[str, str], tmp: Path) -> tuple[int, str]:
    """One container of the gate's Job, as the sandbox's kubelet runs it."""
    assert container["command"] == ["bash", "/opt/fmctl/verify-node.sh"]
    run = dict(env)
    for item in container["env"]:
        run[item["name"]] = NODE if "valueFrom" in item else str(item["value"])
    run["FMCTL_HEALTH_DIR"] = str(tmp / container["name"])
    done = subprocess.run(
        ["bash", str(LIB / "verify-node.sh")],
        env=run,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_a_healthy_sandbox_node_passes_every_check_of_the_gate(
    node: tuple[Programs, dict[str, str]], tmp_path: Path
) -> None:
    _, env = node
    gpu, efa = _containers()
    status, said = _gate(gpu, env, tmp_path)
    assert status == 0, said
    assert "ok gpus: 8 of 8" in said
    assert "ok ecc: no uncorrectable errors" in said
    assert "ok dcgm: level 2 diagnostic passed" in said
    status, said = _gate(efa, env, tmp_path)
    assert status == 0, said
    assert "ok efa: 16 of 16 devices" in said
    assert "ok efa-loopback: 16 of 16 devices passed traffic" in said


def test_a_fault_the_sandbox_injects_fails_the_gate(
    node: tuple[Programs, dict[str, str]], tmp_path: Path
) -> None:
    programs, env = node
    gpu, efa = _containers()
    assert node_gpus.fall_off(Path(env[node_tools.HOST_ENV]), 1) == 1
    status, said = _gate(gpu, env, tmp_path)
    assert status == 1 and "FAIL gpus: 7 of 8" in said, said
    assert programs.efa_down("https://e", NODE, 2) == 2
    status, said = _gate(efa, env, tmp_path)
    assert status == 1 and "FAIL efa: 14 of 16 devices" in said, said


def test_the_pairs_all_reduce_shows_a_figure_the_controller_reads_above_the_floor(
    node: tuple[Programs, dict[str, str]],
) -> None:
    _, env = node
    pair = json.loads(verify_gate(CONTEXT).pairs[POOL.name])
    (job,) = [d for d in pair if d["kind"] == "Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = [a.replace("$(JOB_COMPLETION_INDEX)", "0") for a in container["command"]]
    assert args[0] == "torchrun"
    run = env | {"NODE_NAME": NODE}
    done = subprocess.run(args, env=run, capture_output=True, text=True, check=True)
    floor = pair_floor(POOL.instance_type, POOL.itype.network.bandwidth_gbps)
    figure = program("verify_controller").busbw_at(done.stdout, floor.size_bytes)
    assert figure == 400.0, done.stdout  # 3,200 Gbit/s
    assert figure >= floor.floor_gbs
    # The other rank prints nothing; a node of unknown bandwidth shows no figure.
    other = [a.replace("--node-rank=0", "--node-rank=1") for a in args]
    quiet = subprocess.run(other, env=run, capture_output=True, text=True, check=True)
    assert quiet.stdout == ""
    unknown = subprocess.run(
        args, env=run | {node_tools.NETWORK_ENV: "0"}, capture_output=True, text=True
    )
    assert unknown.returncode == 2 and "not known" in unknown.stderr


def test_questions_fmctl_does_not_ask_are_refused(node: tuple[Programs, dict[str, str]]) -> None:
    _, env = node
    for args in (["nvidia-smi", "-q"], ["dcgmi", "stats"], ["fi_info", "-l"]):
        done = subprocess.run(args, env=env, capture_output=True, text=True)
        assert done.returncode == 2 and "not answered here" in done.stderr, args


def test_dcgms_diagnostic_lasts_its_level_at_the_sandboxs_scale(
    node: tuple[Programs, dict[str, str]],
) -> None:
    """Level 2 normally lasts about two minutes (dcgmi-diag(1)): 1.2 s at a scale of 0.01."""
    _, env = node
    run = env | {node_tools.SCALE_ENV: "0.01"}
    start = time.monotonic()
    done = subprocess.run(["dcgmi", "diag", "-r", "2", "-j"], env=run, capture_output=True)
    assert done.returncode == 0 and time.monotonic() - start >= 1.2
    start = time.monotonic()
    subprocess.run(["dcgmi", "diag", "-r", "1", "-j"], env=run, capture_output=True, check=True)
    assert time.monotonic() - start < 1.0


def test_fmctl_checks_question_is_answered_with_the_instance_types_gpus(
    node: tuple[Programs, dict[str, str]],
) -> None:
    """`fmctl check`'s nvidia-smi question, in the recorded format, parsed by fmctl's own
    reader: every GPU of the node, DescribeInstanceTypes' model (the catalog's), no ECC."""
    _, env = node
    asked = node_tools.CHECK_QUERY.split(" ")
    done = subprocess.run(
        ["nvidia-smi", *asked],
        env=env | {node_tools.GPU_ENV: "H200,144384"},
        capture_output=True,
        text=True,
        check=True,
    )
    report = parse_nvidia_smi(done.stdout)
    assert [g.index for g in report.gpus] == list(range(8)) and not report.errors
    model = POOL.itype.gpu.model
    assert {g.name for g in report.gpus} == {f"NVIDIA {model}"}
    assert {g.memory_mib for g in report.gpus} == {144384}
    assert not any(g.ecc_uncorrected for g in report.gpus)
    recorded = (ROOT / "tests/data/check/nvidia-smi-p5en.csv").read_text().splitlines()
    buses = [line.split(", ")[3] for line in recorded]
    assert [line.split(", ")[3] for line in done.stdout.splitlines()] == buses
