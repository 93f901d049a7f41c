"""The EKS verify gate end to end in the sandbox (health.verify.kubernetesGate): `up` makes
GPU node groups whose nodes join with the taint fmctl.dev/unverified; fmctl's verify
controller (the very script `up` ships in its ConfigMap) runs the gate's Job on each node,
lifts the taint from the nodes that pass and keeps out of service the one that fails; `fmctl
health` shows both.

What is real: the rendered objects `up` applies, the controller's calls to the cluster's
API (as a process of its own, with a bearer token and the cluster's CA, as in a pod), the
Jobs' scheduling by the sandbox (every GPU and EFA device of the node; the startup taint
tolerated), verify-node.sh as the Job's containers run it, the patches and annotations.
What is fake: the node's tools (nvidia-smi, dcgmi, fi_info, fi_pingpong), which print the
recorded outputs of tests/data (a GPU fallen off the bus on the broken node). The sandbox does
not check the controller's RBAC (its API authorizes by access entry, not by role);
tests/render/test_verify_gate.py checks what the role allows.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.check import fakes
from tests.conftest import ROOT
from tests.engine.harness import Sandbox, kube_client, owned, region_of

DATA, REAL = ROOT / "tests/data/check", ROOT / "tests/data/real"
TAINT = "fmctl.dev/unverified"
CONTROLLER = ROOT / "templates/kubernetes/health-verify/verify_controller.py"

#: The node's tools, each answering the question verify-node.sh asks with what a p5en node
#: printed (tests/data/check/README.md, tests/data/real/README.md); the node named in
#: $FAKE/broken has a GPU fallen off the bus. fi_pingpong passes and says it ran.
TOOLS = {
    "nvidia-smi": """#!/bin/bash
csv="$DATA/nvidia-smi-p5en.csv"
if grep -qx "$NODE_NAME" "$FAKE/broken"; then csv="$DATA/nvidia-smi-lost-gpu.csv"; fi
case "$*" in
  *--query-gpu=index,ecc.errors.uncorrected.volatile.total*)
    awk -F', ' '/^[0-9]/ { print $1 ", " $6; next } { print }' "$csv" ;;
  "nvlink -s") cat "$DATA/nvidia-smi-nvlink-p5-healthy.txt" ;;
  "-q -d ROW_REMAPPER") cat "$REAL/nvidia-smi-q-remapped-rows-h100x8.txt" ;;
  *) cat "$csv" ;;
esac
""",
    "dcgmi": '#!/bin/sh\ncat "$DATA/dcgmi-diag-healthy.json"\n',
    "nv-hostengine": "#!/bin/sh\nexit 0\n",
    "fi_info": '#!/bin/sh\ncat "$DATA/fi_info-p5en-healthy.txt"\n',
    "fi_pingpong": """#!/bin/bash
case " $* " in
  *" localhost "*) echo "$NODE_NAME $*" >> "$FAKE/pingpong" ;;
  *) sleep 2 ;;
esac
""",
}


@pytest.fixture
def tools(sandbox: Sandbox, tmp_path: Path) -> Iterator[Path]:
    """The sandbox's nodes run with TOOLS (wrappers carry the fakes' settings)."""
    real, folder = fakes.install(tmp_path / "fakes", TOOLS), tmp_path / "tools"
    folder.mkdir()
    (tmp_path / "broken").write_text("\n")
    for name in TOOLS:
        wrapper = folder / name
        wrapper.write_text(
            f'#!/bin/bash\nexport FAKE="{tmp_path}" DATA="{DATA}" REAL="{REAL}"\n'
            f'exec "{real / name}" "$@"\n'
        )
        wrapper.chmod(0o755)
    sandbox.node_tools(folder)
    yield tmp_path
    sandbox.node_tools(None)


def _command(sandbox: Sandbox, name: str, region: str, where: Path) -> list[str]:
    """The shipped controller, as its pod would run it: the cluster's API, a bearer token
    and the cluster's CA, and the Job templates `up` applied."""
    from provisioner.drivers.eks_auth import token

    aws = sandbox.aws(region)
    cluster = aws.client("eks").describe_cluster(name=name)["cluster"]
    account = where / "account"
    account.mkdir(exist_ok=True)
    (account / "token").write_text(token(aws, name))
    (account / "ca.crt").write_bytes(base64.b64decode(cluster["certificateAuthority"]["data"]))
    api = kube_client(sandbox, name, region)
    try:
        config = api.get("v1", "ConfigMap", "fmctl-verify-controller", "fmctl-system")
    finally:
        api.close()
    assert config is not None
    jobs = where / "jobs"
    jobs.mkdir(exist_ok=True)
    for key, text in config["data"].items():
        if key.endswith(".json"):
            (jobs / key).write_text(text)
    # The controller `up` shipped is the one in the repository, byte for byte.
    script = where / "verify_controller.py"
    script.write_text(config["data"]["verify_controller.py"])
    assert script.read_text() == CONTROLLER.read_text()
    return [
        sys.executable,
        str(script),
        f"--server={cluster['endpoint']}",
        f"--account={account}",
        f"--templates={jobs}",
    ]


def _controller(sandbox: Sandbox, name: str, region: str, where: Path) -> str:
    """One pass of the controller; what it said."""
    run = subprocess.run(
        [*_command(sandbox, name, region, where), "--once"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def _nodes(sandbox: Sandbox, name: str, region: str) -> dict[str, dict[str, Any]]:
    api = kube_client(sandbox, name, region)
    try:
        return {
            n["metadata"]["name"]: n for n in api.list("v1", "Node", selector="fmctl.dev/pool=gpu")
        }
    finally:
        api.close()


def _tainted(node: dict[str, Any]) -> bool:
    return any(t["key"] == TAINT for t in node["spec"].get("taints") or [])


def test_new_nodes_take_work_once_they_pass(sandbox: Sandbox, tools: Path, tmp_path: Path) -> None:
    name = "e2e-verify-eks"
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = name
    data["compute"]["gpuPools"][0]["count"] = 3
    data.setdefault("health", {}).setdefault("verify", {})["kubernetesGate"] = True
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    region = region_of(spec)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        nodes = _nodes(sandbox, name, region)
        assert len(nodes) == 3 and all(_tainted(n) for n in nodes.values())
        good, also_good, broken = sorted(nodes)
        (tools / "broken").write_text(broken + "\n")
        health = sandbox.fmctl("health", name, "-f", str(spec), "--sandbox", "-o", "json")
        assert health.stdout, health.stderr
        states = {n["name"]: n["state"] for n in json.loads(health.stdout)["nodes"]}
        assert states == dict.fromkeys(nodes, "verifying"), health.stdout + health.stderr

        # First pass: a Job per node, pinned to it, holding all its GPUs and EFA devices.
        said = _controller(sandbox, name, region, tmp_path)
        assert said.count(": verifying (Job fmctl-verify-") == 3, said
        # Second pass: the Jobs have run; their verdicts are acted on.
        said = _controller(sandbox, name, region, tmp_path)
        assert f"{good}: passed, {TAINT} lifted" in said, said
        assert f"{broken}: failed, kept out of service: FAIL gpus: 7 of 8" in said, said

        nodes = _nodes(sandbox, name, region)
        for ok in (good, also_good):
            assert not _tainted(nodes[ok])
            assert nodes[ok]["metadata"]["annotations"]["fmctl.dev/verify"].startswith("passed ")
            # The node's other taint (GPU work only) is untouched.
            assert [t["key"] for t in nodes[ok]["spec"]["taints"]] == ["nvidia.com/gpu"]
        assert _tainted(nodes[broken])
        verdict = nodes[broken]["metadata"]["annotations"]["fmctl.dev/verify"]
        assert verdict.startswith("failed ") and "FAIL gpus: 7 of 8" in verdict
        # The EFA loopback ran on every device of the nodes (16 on p5en), one at a time.
        loops = (tools / "pingpong").read_text().splitlines()
        assert sum(1 for line in loops if line.startswith(good + " ")) == 16

        # A third pass changes nothing: the failed node is not tried again.
        said = _controller(sandbox, name, region, tmp_path)
        assert "verifying" not in said and "passed" not in said, said
        api = kube_client(sandbox, name, region)
        try:
            left = [
                j["metadata"]["annotations"]["fmctl.dev/node"]
                for j in api.list("batch/v1", "Job", "fmctl-system")
                if j["metadata"]["name"].startswith("fmctl-verify-")
            ]
        finally:
            api.close()
        assert left == [broken]  # kept for its logs; the passed ones' are deleted

        health = sandbox.fmctl("health", name, "-f", str(spec), "--sandbox", "-o", "json")
        report = json.loads(health.stdout)
        states = {n["name"]: n for n in report["nodes"]}
        assert states[good]["state"] == states[also_good]["state"] == "healthy"
        assert states[broken]["state"] == "failed"
        assert states[broken]["fault"]["class"] == "VERIFY_FAILED"

        # The loop closed: a GPU falls off the bus on a verified node; the node monitoring
        # agent reports it, node auto repair replaces the node, and the replacement joins
        # tainted and takes work only once the controller (running now) has verified it.
        running = subprocess.Popen(
            [*_command(sandbox, name, region, tmp_path), "--interval=0.2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            said = sandbox.fmctl("sandbox", "fault", name, good, "--xid", "79", "--region", region)
            assert said.returncode == 0, said.stdout + said.stderr
            deadline, new = time.monotonic() + 120, ""
            while time.monotonic() < deadline:
                nodes = _nodes(sandbox, name, region)
                fresh = set(nodes) - {good, also_good, broken}
                if good not in nodes and fresh:
                    (new,) = fresh
                    if not _tainted(nodes[new]):
                        break
                time.sleep(0.1)
            assert new, "node auto repair replaced the node"
            verdict = nodes[new]["metadata"].get("annotations", {}).get("fmctl.dev/verify", "")
            assert verdict.startswith("passed "), nodes[new]
            # `up --wait-healthy`: every node but the one that failed its gate is in service;
            # it names that one.
            waited = sandbox.fmctl(
                "up", "-f", str(spec), "--sandbox", "--yes", "--wait-healthy",
                "--healthy-timeout", "3", timeout=300,
            )  # fmt: skip
            assert waited.returncode == 1, waited.stdout + waited.stderr
            assert f"{broken} failed" in waited.stderr, waited.stderr
        finally:
            running.terminate()
            log, _ = running.communicate(timeout=30)
        assert f"{new}: passed, {TAINT} lifted" in log, log
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert owned(sandbox, name, region) == []
