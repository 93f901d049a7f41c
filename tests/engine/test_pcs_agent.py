"""fmctl's health agent on a PCS cluster's nodes, end to end in the sandbox with Slurm
running (issue 33): `fmctl sandbox fault` on a PCS instance reaches the agent on its node
(the harness gives the node the fault as its hardware would show it: a kernel line, a
device gone, tests/tools/standin/pcs_fleet.py), and the agent acts through PCS's Slurm as
on ParallelCluster:

- an application Xid (13) is counted, never acted on: the node keeps its work;
- an Xid PCS's own monitoring does not count (145, an NVLink error NVIDIA's catalog says
  to replace the node for) drains the node with the reason users grep, and, the node
  having no job, the agent reboots it into its nodeBootstrapped stage, which fails for a
  node the agent condemned: PCS terminates the instance and the group launches another,
  which passes the gate, takes the Slurm node and the drain its predecessor left, resumes
  it (a drain of fmctl's that says replace) and pairs with the healthy node;
- a second node's fault (EFA devices gone), with one of the two nodes in repair already,
  is held by the repair budget (10% of 2: one node): the node keeps working and `fmctl
  health` shows it suspect, and healthy again once the devices are back. (The first
  node's reboot is held meanwhile, as a slow reboot would hold it.)

What is fmctl's: the agent, its fault table, the timer the user data installs, `fmctl
health`'s cluster-health.sh; what is PCS's (its controller, the nodes' boot) and the
hardware's is the harness's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.engine.harness import Sandbox, raw_leftovers
from tests.tools.standin import rootfs
from tests.tools.standin.node import SSM_ENV, StandinNode
from tests.tools.standin.pcs_fleet import Boot, PcsFleet, example_spec, p5_ami, running, up_healthy

pytestmark = rootfs.required()
NAME, REGION = "e2e-pcs-agent", "us-east-2"
#: The agent's period here (the spec's shortest, health.interval): each wait below allows
#: a few.
INTERVAL_S = 10
FAULTS_LOG = "/var/lib/fmctl/health/faults.log"


def _p5(node: StandinNode, nth: int) -> None:
    p5_ami(node)


@pytest.fixture
def fleet(sandbox: Sandbox, tmp_path: Path) -> Iterator[PcsFleet]:
    with running(sandbox, REGION, NAME, _p5, tmp_path) as found:
        yield found


def _spec(folder: Path) -> Path:
    path = example_spec(folder, NAME, REGION)
    data = yaml.safe_load(path.read_text())
    data["health"] = {"interval": f"{INTERVAL_S}s"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _node(fleet: PcsFleet, name: str) -> Boot:
    return next(b for b in fleet.boots if b.name == name and b.node is not None)


def _replaced(fleet: PcsFleet, old: Boot, name: str) -> Boot | None:
    """The instance that took Slurm node ``name`` from ``old`` and got through every stage,
    if any."""
    return next(
        (b for b in fleet.boots if b.instance != old.instance and b.name == name and b.ready),
        None,
    )


def _logged(boot: Boot, text: str, timeout: float = 6 * INTERVAL_S) -> str:
    """The node's fault log once it has a line with ``text`` (the agent has looked)."""
    assert boot.node is not None
    log = boot.node.path(FAULTS_LOG)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = log.read_text() if log.exists() else ""
        if text in seen:
            return seen
        time.sleep(0.5)
    raise AssertionError(f"{boot.name}: no {text!r} in {FAULTS_LOG} in {timeout} s")


def _fault(sandbox: Sandbox, boot: Boot, *how: str) -> str:
    said = sandbox.fmctl("sandbox", "fault", NAME, boot.instance, *how, "--region", REGION)
    assert said.returncode == 0, said.stdout + said.stderr
    return said.stdout


@pytest.mark.timeout(900)
def test_the_agent_on_pcs_nodes_drains_through_slurm_within_its_budget(
    sandbox: Sandbox, fleet: PcsFleet, tmp_path: Path
) -> None:
    spec = _spec(tmp_path)
    try:
        up_healthy(sandbox, fleet, spec)
        assert fleet.slurm is not None
        first, second = _node(fleet, "train-1"), _node(fleet, "train-2")

        # An application Xid: counted by the agent, the node keeps working; PCS's
        # monitoring does not count it either.
        said = _fault(sandbox, first, "--xid", "13")
        assert "a warning" in said, said
        _logged(first, "xid:13")
        time.sleep(INTERVAL_S)  # another look: still nothing acted on
        assert fleet.slurm.node_state("train-1") == "IDLE", fleet.story()

        # An NVLink Xid PCS's monitoring does not act on here: fmctl's agent drains the
        # node, the reason saying the Xid, NVIDIA's class and the repair, and condemns it.
        fleet.reboot_gate.clear()  # its reboot waits until the budget has been seen
        said = _fault(sandbox, first, "--xid", "145")
        assert "leaves the instance" in said, said
        why = "fmctl-health: XID 145 WORKFLOW_NVLINK5_ERR -> replace"
        deadline = time.monotonic() + 6 * INTERVAL_S
        while "DRAIN" not in fleet.slurm.node_state("train-1"):
            assert time.monotonic() < deadline, fleet.story()
            time.sleep(0.5)
        reasons = fleet.slurm.head.run(
            ["/opt/slurm/bin/sinfo", "-R", "-h", "-N", "-o", "%N|%E"], env=SSM_ENV
        ).stdout
        assert f"train-1|{why}" in reasons, reasons
        assert first.instance in [b.instance for b in fleet.boots if b.node is not None], (
            "PCS's monitoring replaced the node: the agent's drain is not what was tested"
        )
        assert first.node is not None
        condemned = first.node.path("/var/lib/fmctl/health/replace")
        assert condemned.read_text() == why + "\n"
        # Idle (no job ran there), so the agent asked for the reboot in the same look.
        deadline = time.monotonic() + 6 * INTERVAL_S
        while not first.rebooting:
            assert time.monotonic() < deadline, fleet.story()
            time.sleep(0.5)

        # EFA devices gone on the other node, with train-1 in repair: the budget (one node
        # of two) holds it; the node keeps working.
        _fault(sandbox, second, "--efa-down", "4")
        _logged(second, "efa-count")
        time.sleep(INTERVAL_S)
        assert fleet.slurm.node_state("train-2") == "IDLE", fleet.story()

        health = sandbox.fmctl("health", NAME, "-f", str(spec), "--sandbox", "-o", "json")
        assert health.returncode == 0, health.stdout + health.stderr
        seen = json.loads(health.stdout)
        nodes = {n["name"]: n for n in seen["nodes"]}
        # Drained, idle and rebooting into its replacement.
        assert nodes["train-1"]["state"] == "repairing", nodes
        assert nodes["train-1"]["detail"] == why, nodes
        assert nodes["train-1"]["fault"]["code"] == "xid:145", nodes
        assert nodes["train-1"]["fault"]["class"] == "WORKFLOW_NVLINK5_ERR", nodes
        assert nodes["train-2"]["state"] == "suspect", nodes
        assert nodes["train-2"]["fault"]["code"] == "efa-count", nodes
        pool = next(p for p in seen["pools"] if p["name"] == "train")
        assert (pool["inRepair"], pool["budget"]) == (1, 1), seen["pools"]

        # The devices come back (`--clear` lays the node's hardware out anew): the agent's
        # next look finds nothing and clears the fault it held from the node's Comment.
        _fault(sandbox, second, "--clear")
        deadline = time.monotonic() + 6 * INTERVAL_S
        while "Comment=fmctl-health:" in fleet.slurm.scontrol("show", "node", "train-2", "-o"):
            assert time.monotonic() < deadline, fleet.story()
            time.sleep(0.5)
        health = sandbox.fmctl("health", NAME, "-f", str(spec), "--sandbox", "-o", "json")
        nodes = {n["name"]: n for n in json.loads(health.stdout)["nodes"]}
        assert (nodes["train-2"]["state"], nodes["train-2"]["fault"]) == ("healthy", None), nodes
        assert nodes["train-1"]["state"] == "repairing", nodes  # its fault was no device's

        # The reboot goes on: the stage fails for the condemned node, PCS ends it and the
        # group launches another, which takes train-1 and its predecessor's drain, resumes
        # it, pairs with train-2 and takes work.
        fleet.reboot_gate.set()
        deadline = time.monotonic() + 600
        while not _replaced(fleet, first, "train-1"):
            assert time.monotonic() < deadline, fleet.story()
            time.sleep(0.5)
        story = fleet.story()
        assert first.reboots == 1 and first.failed.startswith("nodeBootstrapped "), story
        assert f"asked for a new instance ({why})" in "\n".join(first.output), story
        assert first.node is None, story  # terminated
        new = _replaced(fleet, first, "train-1")
        assert new is not None and new.node is not None, story
        said = "\n".join(new.output)
        assert f"train-1 kept the drain of the instance it replaces ({why}): resumed" in said
        report = new.node.run(["cat", "/var/lib/fmctl/health/verify.txt"], env=SSM_ENV).stdout
        assert "ok nccl-pair: 465.9 GB/s with train-2" in report, story
        assert fleet.slurm.wait_state("train-1", ("IDLE",), timeout=60) == "IDLE", story
        health = sandbox.fmctl("health", NAME, "-f", str(spec), "--sandbox", "-o", "json")
        nodes = {n["name"]: n for n in json.loads(health.stdout)["nodes"]}
        assert [nodes[n]["state"] for n in ("train-1", "train-2")] == ["healthy"] * 2, nodes
    finally:
        down = sandbox.fmctl("down", NAME, "--region", REGION, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, REGION) == []
