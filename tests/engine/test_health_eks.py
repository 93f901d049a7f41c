"""The health loop on EKS in the sandbox, as a user rehearses it: `fmctl sandbox fault`
makes a GPU node report a fault as the node monitoring agent would (or would not), node
auto repair cordons and replaces it on the sandbox's clock, and `fmctl health` shows each
step (fmctl_sandbox/eks_repair.py follows the agent's source and the EKS User Guide).
AWS's loop alone: fmctl's own node agent (on by default) is turned off, as
`health.kubernetesAgent: false` leaves it; it would see the same Xid 79 in /dev/kmsg and
might take the node out before node auto repair's wait is up (test_health_agent.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.engine.harness import Sandbox, kube_client, raw_leftovers, spec_file, until

NAME = "e2e-health"
REGION = "us-west-2"


def _gpu_nodes(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    api = kube_client(sandbox, NAME, REGION)
    try:
        return {n["metadata"]["name"]: n for n in api.list("v1", "Node", "", "fmctl.dev/pool=gpu")}
    finally:
        api.close()


def _health(sandbox: Sandbox) -> dict[str, Any]:
    done = sandbox.fmctl("health", NAME, "--sandbox", "-o", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_a_gpu_fault_is_reported_cordoned_and_replaced(sandbox: Sandbox, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, NAME, health={"kubernetesAgent": False})
    made = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", "--wait-healthy", timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "healthy: 8 GPU nodes in service" in made.stdout, made.stdout
    try:
        before = _gpu_nodes(sandbox)
        assert len(before) == 8
        sick, other = sorted(before)[:2]
        healthy = _health(sandbox)
        assert {n["state"] for n in healthy["nodes"]} == {"healthy"}
        assert healthy["pools"] == [{"name": "gpu", "nodes": 8, "inRepair": 0, "budget": 1}]

        # Xid 13 is the application's: the agent only records an event.
        said = sandbox.fmctl("sandbox", "fault", NAME, sick, "--xid", "13", "--region", REGION)
        assert said.returncode == 0, said.stdout + said.stderr
        assert "no node condition" in said.stdout
        assert {n["state"] for n in _health(sandbox)["nodes"]} == {"healthy"}
        # No argument, or two: a located refusal, nothing injected.
        none = sandbox.fmctl("sandbox", "fault", NAME, sick, "--region", REGION)
        assert none.returncode == 1 and "say one fault" in none.stderr

        # A GPU off the bus (Xid 79): the condition, then the repair.
        said = sandbox.fmctl("sandbox", "fault", NAME, sick, "--xid", "79", "--region", REGION)
        assert said.returncode == 0 and "AcceleratedHardwareReady False" in said.stdout
        seen = {n["name"]: n for n in _health(sandbox)["nodes"]}
        if sick in seen:  # not yet replaced (the sandbox's 10 minutes are 1.2 s)
            assert seen[sick]["state"] in ("suspect", "repairing"), seen[sick]
            assert seen[sick]["fault"]["code"] == "xid:79"
            assert seen[sick]["fault"]["class"] == "RESTART_BM"
        cordoned, deadline = False, time.monotonic() + 60
        while time.monotonic() < deadline:
            nodes = _gpu_nodes(sandbox)
            if sick in nodes:
                cordoned |= bool(nodes[sick]["spec"].get("unschedulable"))
                assert other in nodes and not nodes[other]["spec"].get("unschedulable")
            elif len(nodes) == 8:
                break
            time.sleep(0.05)
        after = _gpu_nodes(sandbox)
        assert sick not in after and len(after) == 8, sorted(after)
        assert cordoned, "node auto repair cordons before it replaces"
        (new,) = set(after) - set(before)
        assert after[new]["metadata"]["labels"]["fmctl.dev/pool"] == "gpu"
        # The replacement joined tainted: `verifying` until it passed the verify gate (on by
        # default), then healthy like the rest, nothing in repair.
        states = {n["name"]: n["state"] for n in _health(sandbox)["nodes"]}
        assert states[new] in ("verifying", "healthy"), states

        def all_healthy() -> dict[str, Any] | None:
            found = _health(sandbox)
            return found if {n["state"] for n in found["nodes"]} == {"healthy"} else None

        back = until("the replacement verified", all_healthy, seconds=60)
        assert back["pools"][0]["inRepair"] == 0
    finally:
        down = sandbox.fmctl("down", NAME, "--region", REGION, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, REGION) == []
