"""fmctl's node health agent on EKS end to end in the sandbox (health.kubernetesAgent): `up`
deploys the agent's DaemonSet and the controller; the sandbox runs the agent on each GPU
node (the very node_agent.py and health-detect.sh of its ConfigMap, one process a node, as
the DaemonSet's pods) and the controller; `fmctl sandbox fault` writes the Xid's kernel line
to the node's /dev/kmsg; the agent reports it in the node condition FmctlHealthy, and the
controller takes the node out of service and replaces it, never two at once (the budget).

The fault is Xid 145 (an NVLink5 error, NVIDIA's catalog: replace), which AWS's node
monitoring agent does not treat as fatal (no condition: node auto repair leaves the node),
so what acts here is fmctl's loop alone. With the verify gate on too, the replacement joins
tainted and takes work only once it has passed. What is fake: the nodes' tools (nvidia-smi
prints the recorded outputs of a p5en, tests/tools/verify_gate.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.ops.target import sandbox_fault
from tests.conftest import ROOT
from tests.engine.harness import Sandbox, kube_client, region_of, until
from tests.tools import verify_gate as gate

AGENT = ROOT / "templates/kubernetes/health-verify/node_agent.py"


@pytest.fixture
def tools(sandbox: Sandbox, tmp_path: Path) -> Iterator[Path]:
    """The sandbox's nodes answer nvidia-smi as a healthy p5en (tests/tools/verify_gate.py)."""
    sandbox.node_tools(gate.install(tmp_path))
    yield tmp_path
    sandbox.node_tools(None)


def _condition(node: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in node["status"].get("conditions") or [] if c["type"] == "FmctlHealthy"]
    return found[0] if found else {}


def _unhealthy(node: dict[str, Any]) -> bool:
    return any(t["key"] == "fmctl.dev/unhealthy" for t in node["spec"].get("taints") or [])


@contextmanager
def _healthy_cluster(
    sandbox: Sandbox, tmp_path: Path, name: str, health: dict[str, Any]
) -> Iterator[tuple[Path, str]]:
    """The EKS example as ``name`` with three GPU nodes and ``health``, up with
    `--wait-healthy` (which waits for each node's agent to have reported it healthy, and
    with the gate for each to have passed): its spec and region; down when done."""
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = name
    data["compute"]["gpuPools"][0]["count"] = 3
    data["health"] = health
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", "--wait-healthy", timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "healthy: 3 GPU nodes in service" in up.stdout, up.stdout
    region = region_of(spec)
    try:
        yield spec, region
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr


def _all_healthy(sandbox: Sandbox, name: str, spec: Path) -> dict[str, Any]:
    """`fmctl health -o json` of the cluster once every node is healthy (a replacement is
    `verifying` until it has passed the verify gate, on by default), nothing in repair."""

    def report() -> dict[str, Any] | None:
        health = sandbox.fmctl("health", name, "-f", str(spec), "--sandbox", "-o", "json")
        found: dict[str, Any] = json.loads(health.stdout)
        return found if {n["state"] for n in found["nodes"]} == {"healthy"} else None

    found = until("every node healthy", report, seconds=60)
    assert found["pools"][0]["inRepair"] == 0, found
    return found


def _agents_reported(sandbox: Sandbox, name: str, region: str) -> None:
    """Until every GPU node's agent has reported it healthy."""
    until(
        "every node reported healthy",
        lambda: all(
            _condition(n).get("status") == "True"
            for n in gate.nodes(sandbox, name, region).values()
        ),
        seconds=60,
    )


def test_a_fault_only_fmctls_agent_sees_is_taken_out_and_replaced(
    sandbox: Sandbox, tools: Path, tmp_path: Path
) -> None:
    name = "e2e-health-agent"
    with _healthy_cluster(sandbox, tmp_path, name, {"kubernetesAgent": True}) as (spec, region):

        def nodes() -> dict[str, dict[str, Any]]:
            return gate.nodes(sandbox, name, region)

        api = kube_client(sandbox, name, region)
        try:
            config = api.get("v1", "ConfigMap", "fmctl-health-agent", "fmctl-system")
        finally:
            api.close()
        assert config is not None and config["data"]["node_agent.py"] == AGENT.read_text()
        # Every GPU node's agent reported it healthy (8 GPUs, from the recorded nvidia-smi).
        first = nodes()
        assert len(first) == 3
        assert all(_condition(n)["status"] == "True" for n in first.values()), first
        one, two, three = sorted(first)
        # An application's Xid: counted, the node stays in service.
        said = sandbox.fmctl("sandbox", "fault", name, one, "--xid", "13", "--region", region)
        assert said.returncode == 0, said.stdout + said.stderr
        assert "the driver's line is in its /dev/kmsg" in said.stdout
        until(
            "Xid 13 counted",
            lambda: "counted: xid:13 RESTART_APP" in _condition(nodes()[one]).get("message", ""),
        )
        assert _condition(nodes()[one])["status"] == "True" and not _unhealthy(nodes()[one])

        # Xid 145 on two nodes at once (the sandbox's operation `fmctl sandbox fault`
        # calls, asked twice within milliseconds), a budget of one (max(1, 10% of 3)).
        for node in (one, two):
            said = sandbox_fault(sandbox.home, region, name, node, {"xid": 145})
            assert "not one the agent treats as fatal" in said  # AWS's agent
            assert "the driver's line is in its /dev/kmsg" in said  # fmctl's reads it
        reason = "fmctl-health: XID 145 WORKFLOW_NVLINK5_ERR -> replace; jobs: finish"

        def replaced() -> dict[str, dict[str, Any]] | None:
            now = nodes()
            for node in (one, two):
                if node in now and _condition(now[node]).get("status") == "False":
                    assert _condition(now[node])["message"] == reason
                    assert _condition(now[node])["reason"] == "WORKFLOW_NVLINK5_ERR"
            # Never both out of service at once: the budget is one (a node whose instance is
            # terminated may linger a moment after its replacement is Ready: done, not in
            # repair).
            out = [n for n in now.values() if _unhealthy(n)]
            assert sum(not gate.repair_note(n).startswith("replacing") for n in out) <= 1, now
            done = one not in now and two not in now and len(now) == 3
            return now if done else None

        after = until("both faulty nodes replaced", replaced, seconds=180, every=0.1)
        assert three in after and not _unhealthy(after[three])
        # Each went out of service first, then its instance was terminated (the
        # controller's log). Whether the second was held meanwhile depends on whether its
        # agent reported before the first's replacement had booted and joined (300 s on the
        # sandbox's clock, 0.6 s here): the budget's hold is the unit tests'
        # (tests/render/test_verify_controller.py); here, never both out at once (above).
        log = gate.controller_log(sandbox, name, region)
        for node in (one, two):
            out = log.index(f"{node}: {reason}: out of service (fmctl.dev/unhealthy)")
            assert log.index(f"{node}: replacing: instance i-", out) > out, log
        # The replacements' agents report them healthy.
        _agents_reported(sandbox, name, region)
        _all_healthy(sandbox, name, spec)


def test_with_the_gate_the_agents_replacement_is_verified_before_it_takes_work(
    sandbox: Sandbox, tools: Path, tmp_path: Path
) -> None:
    """The loop with both of fmctl's halves on (the agent by default, the gate asked for):
    `up --wait-healthy` returns once every node has passed the gate and its agent has
    reported; a fault only fmctl's agent sees takes the node out and has it replaced; the
    replacement joins tainted fmctl.dev/unverified and is in service only once it passed."""
    name = "e2e-health-agent-gate"
    with _healthy_cluster(sandbox, tmp_path, name, {"verify": {"kubernetesGate": True}}) as (
        spec,
        region,
    ):
        first = gate.nodes(sandbox, name, region)
        assert all(_condition(n)["status"] == "True" for n in first.values()), first
        assert not any(gate.tainted(n) for n in first.values())
        faulty = sorted(first)[0]
        said = sandbox_fault(sandbox.home, region, name, faulty, {"xid": 145})
        assert "the driver's line is in its /dev/kmsg" in said

        def verified() -> dict[str, str] | None:
            now = gate.verdicts(sandbox, name, region)
            new = set(now) - set(first)
            done = faulty not in now and len(now) == 3 and len(new) == 1
            return now if done and now[new.pop()].startswith("passed") else None

        after = until("the replacement verified", verified, seconds=240, every=0.2)
        (replacement,) = set(after) - set(first)
        log = gate.controller_log(sandbox, name, region)
        out = log.index(f"{faulty}: fmctl-health: XID 145 WORKFLOW_NVLINK5_ERR")
        asked = log.index(f"{faulty}: replacing: instance i-", out)
        lifted = log.index(f"{replacement}: passed, {gate.TAINT} lifted", asked)
        assert out < asked < lifted, log
        now = gate.nodes(sandbox, name, region)[replacement]
        assert not gate.tainted(now)
        _agents_reported(sandbox, name, region)  # the replacement's among them
        _all_healthy(sandbox, name, spec)


def test_both_loops_on_one_fault_replace_the_node_once(
    sandbox: Sandbox, tools: Path, tmp_path: Path
) -> None:
    """The default on EKS: fmctl's agent and AWS's node monitoring agent with node auto
    repair both see an Xid 79 (fatal to both). Whichever acts first replaces the node; the
    other finds its instance gone and does nothing more: one new node, none failing to be
    replaced, nothing left in repair."""
    name = "e2e-health-both"
    with _healthy_cluster(sandbox, tmp_path, name, {}) as (spec, region):
        first = gate.nodes(sandbox, name, region)
        faulty = sorted(first)[0]
        said = sandbox_fault(sandbox.home, region, name, faulty, {"xid": 79})
        assert "AcceleratedHardwareReady False" in said  # AWS's agent
        assert "the driver's line is in its /dev/kmsg" in said  # fmctl's reads it

        def replaced() -> dict[str, dict[str, Any]] | None:
            now = gate.nodes(sandbox, name, region)
            return now if faulty not in now and len(now) == 3 else None

        until("the faulty node replaced", replaced, seconds=120, every=0.1)
        # Longer than both loops' next looks (the agent's 2 s floor in the sandbox, the
        # controller's pass, node auto repair's wait and its replacement): nothing more.
        time.sleep(4)
        after = gate.nodes(sandbox, name, region)
        assert len(after) == 3 and len(set(after) - set(first)) == 1, sorted(after)
        assert set(first) - {faulty} <= set(after)
        log = gate.controller_log(sandbox, name, region)
        assert "replacing it failed" not in log and "held" not in log, log
        _agents_reported(sandbox, name, region)
        _all_healthy(sandbox, name, spec)


def test_in_a_users_sandbox_the_whole_loop_runs_on_the_sandboxs_own_node_tools(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A user's sandbox has no recorded tools: its nodes answer with the sandbox's stand-ins
    (fmctl_sandbox/node_tools.py). With the gate on, every node passes it at `up
    --wait-healthy` (GPUs, EFA devices and loopback, DCGM's diagnostic), and each node's
    agent counts its GPUs and reports it healthy, not "cannot look". `--gpu-missing 1`
    takes one away from a node's driver as well as raising AWS's agent's condition; the node
    is replaced (by whichever loop acts first) with one that has all its GPUs, which joins
    tainted and takes work only once it has passed the gate, a 2-node all-reduce with a
    verified node included."""
    name = "e2e-health-gpus"
    health = {"verify": {"kubernetesGate": True}}
    with _healthy_cluster(sandbox, tmp_path, name, health) as (spec, region):
        first = gate.nodes(sandbox, name, region)
        assert {_condition(n).get("message") for n in first.values()} == {"no node-level fault"}
        # All joined at once: none had a verified peer to pair with yet.
        verdicts = gate.verdicts(sandbox, name, region)
        assert all(v.startswith("passed") for v in verdicts.values()), verdicts
        # `fmctl check` on the same stand-ins: every node and the NCCL all-reduce pass.
        check = sandbox.fmctl("check", name, "-f", str(spec), "--sandbox", "--timeout", "120")
        assert check.returncode == 0, check.stdout + check.stderr
        assert "4 passed, 0 failed" in check.stdout and "nccl 400.0 GB/s" in check.stdout
        faulty = sorted(first)[0]
        said = sandbox_fault(sandbox.home, region, name, faulty, {"gpuMissing": 1})
        assert "AcceleratedHardwareReady False (NvidiaDeviceCountMismatch)" in said
        assert "1 GPU(s) gone from its driver" in said

        def replaced() -> dict[str, dict[str, Any]] | None:
            now = gate.nodes(sandbox, name, region)
            done = faulty not in now and len(now) == 3
            healthy = all(_condition(n).get("status") == "True" for n in now.values())
            untainted = not any(gate.tainted(n) for n in now.values())
            return now if done and healthy and untainted else None

        after = until("the node replaced and verified", replaced, seconds=180)
        (replacement,) = set(after) - set(first)
        verdict = gate.verdicts(sandbox, name, region)[replacement]
        # Paired with a verified node: a perfect fabric at p5en's 3,200 Gbit/s, 400 GB/s.
        assert verdict.startswith("passed") and "nccl-pair 400 GB/s" in verdict, verdict
        report = _all_healthy(sandbox, name, spec)
        assert {n["detail"] for n in report["nodes"]} == {"Ready"}, report
