"""A PCS cluster end to end in the sandbox with Slurm running (issue 33): `fmctl up
--wait-healthy` makes the cluster in the sandbox's PCS, whose node groups launch instances
in its EC2; each compute instance boots on a stand-in node as PCS boots it
(tests/tools/standin/pcs_fleet.py: the node group's nodeBootstrapped scripts from the
sandbox's S3, fmctl's user data, slurmd, the nodeReady scripts) against a real slurmctld
playing PCS's controller; the wait asks the login node's Slurm through Run Command, as on
AWS. What is fmctl's here is all of it: the requests, the scripts in the bucket, the
user data, the verify gate, cluster-health.sh; what is PCS's is the harness's, each rule
with its source.

Then the loop on PCS: a fault PCS's health monitoring finds has the node replaced; the
replacement, with a GPU off the bus, fails fmctl's gate in its nodeBootstrapped stage, so PCS
terminates it and launches another, which passes and takes the node's place.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.harness import Sandbox, raw_leftovers
from tests.tools.standin import rootfs
from tests.tools.standin.node import StandinNode
from tests.tools.standin.pcs_fleet import PcsFleet, example_spec, p5_ami, running, up_healthy

pytestmark = rootfs.required()
NAME, REGION = "e2e-pcs-slurm", "eu-north-1"
#: The instance that boots with a GPU off the bus, counted from 0: the third, the first
#: replacement (the test's second half).
BROKEN = 2


def _p5(node: StandinNode, nth: int) -> None:
    p5_ami(node, gpus_missing=1 if nth == BROKEN else 0)


@pytest.fixture
def fleet(sandbox: Sandbox, tmp_path: Path) -> Iterator[PcsFleet]:
    with running(sandbox, REGION, NAME, _p5, tmp_path) as found:
        yield found


def _verify(fleet: PcsFleet, name: str) -> str:
    boot = next(b for b in fleet.boots if b.name == name and b.node is not None)
    assert boot.node is not None
    return boot.node.path("/var/lib/fmctl/health/verify.txt").read_text()


@pytest.mark.timeout(900)
def test_pcs_up_wait_healthy_on_slurm_then_a_replacement_through_the_gate(
    sandbox: Sandbox, fleet: PcsFleet, tmp_path: Path
) -> None:
    spec = example_spec(tmp_path, NAME, REGION)
    try:
        said = up_healthy(sandbox, fleet, spec)
        assert "healthy: 2 GPU nodes in service" in said, said + fleet.story()
        assert fleet.slurm is not None
        # What the wait saw is Slurm's: both nodes idle, neither held any more.
        for name in ("train-1", "train-2"):
            assert fleet.slurm.node_state(name) == "IDLE", fleet.slurm.scontrol("show", "node")
            report = _verify(fleet, name)
            assert "ok gpus: 8 of 8" in report and "ok efa: 32 of 32" in report, report
            assert "FAIL" not in report, report
            # Booted together, each found the other held for its own pair (no idle peer:
            # released untested, the gate is on the node), or one found the other
            # released already and paired with it.
            assert (
                "skip nccl-pair: no idle peer" in report
                or "ok nccl-pair: 465.9 GB/s with train-" in report
            ), report
        assert "No reservations" in fleet.slurm.scontrol("show", "reservation")

        health = sandbox.fmctl("health", NAME, "-f", str(spec), "--sandbox", "-o", "json")
        assert health.returncode == 0, health.stdout + health.stderr
        nodes = json.loads(health.stdout)["nodes"]
        assert sorted((n["name"], n["state"]) for n in nodes) == [
            ("train-1", "healthy"),
            ("train-2", "healthy"),
        ], nodes

        # A fault PCS's monitoring counts (Xid 79): it replaces the instance (health.repair
        # replace -> REPLACE). The replacement lacks a GPU: the gate fails in its
        # nodeBootstrapped stage and PCS ends it too; the next one passes.
        victim = next(b for b in fleet.boots if b.name == "train-2")
        fault = sandbox.fmctl(
            "sandbox", "fault", NAME, victim.instance, "--xid", "79", "--region", REGION
        )
        assert fault.returncode == 0, fault.stdout + fault.stderr
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            late = [b for b in fleet.boots[2:] if b.ready and b.node is not None]
            if late:
                break
            time.sleep(0.5)
        story = fleet.story()
        assert len(fleet.boots) == 4, story
        broken, good = fleet.boots[BROKEN], fleet.boots[BROKEN + 1]
        assert broken.failed.startswith("nodeBootstrapped "), story
        assert "FAIL gpus: 7 of 8" in "\n".join(broken.output), story
        assert broken.node is None and not broken.registered, story
        assert good.ready and good.name == "train-2" and not good.failed, story
        # Its pair ran with the one idle peer, through the cluster's Prolog (fmctl's, as
        # PCS's slurmCustomSettings name it), and returned it.
        assert "ok nccl-pair: 465.9 GB/s with train-1" in _verify(fleet, "train-2"), story
        assert fleet.slurm.wait_state("train-2", ("IDLE",), timeout=60) == "IDLE"
    finally:
        down = sandbox.fmctl("down", NAME, "--region", REGION, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, REGION) == []
