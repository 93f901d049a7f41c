"""On AWS PCS, capacity taken away drains first: `up` drains the Slurm nodes a scale-in or a
removed pool takes (PCS numbers a group's nodes up to its maximum: the top ones go) on the
login node through Run Command, before it tells PCS; a job that does not leave in time stops
`up`, the nodes left drained. The login node's Slurm here is a fake that records what it
is asked (drain-nodes.sh itself runs against a real slurmctld in
tests/slurm/test_standin_drain.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.harness import Sandbox, raw_leftovers
from tests.engine.test_pcs import pcs_spec
from tests.tools.fake_slurm import calls, login_slurm


@pytest.fixture
def slurm(sandbox: Sandbox, tmp_path: Path) -> Iterator[Path]:
    with login_slurm(sandbox, tmp_path / "slurm") as folder:
        yield folder


def test_pcs_scale_in_drains_the_top_nodes_first(
    sandbox: Sandbox, slurm: Path, tmp_path: Path
) -> None:
    name, region = "e2e-drain-pcs", "us-east-2"
    made = sandbox.fmctl(
        "up", "-f", str(pcs_spec(tmp_path, name, region, count=4)), "--sandbox", "--yes"
    )
    assert made.returncode == 0, made.stdout + made.stderr
    try:
        # `fmctl cost` asks the login node's Slurm which GPU nodes run no job: two of four.
        (slurm / "sinfo.txt").write_text(
            "train*|allocated|Unknown|train-[1-2]|none\ntrain*|idle|Unknown|train-[3-4]|none\n"
        )
        cost = sandbox.fmctl(
            "cost", name, "--region", region, "--sandbox", "-o", "json", "--no-cost-explorer"
        )
        assert cost.returncode == 0, cost.stdout + cost.stderr
        data = json.loads(cost.stdout)
        idle = data["idle"]
        assert (idle["idleNodes"], idle["gpuNodes"]) == (["train-3", "train-4"], 4), idle
        # The sandbox's Price List has no p5en in us-east-2: the share is not guessed.
        (p5en,) = [i for i in data["items"] if "p5en.48xlarge" in i["description"]]
        assert p5en["count"] == 4 and p5en["hourly"] is None, data
        assert idle["hourly"] is None and idle["share"] is None, idle
        assert "sinfo -h -a -o %P|%T|%H|%N|%E" in calls(slurm)
        smaller = pcs_spec(tmp_path, name, region, count=2)
        planned = sandbox.fmctl("plan", "-f", str(smaller), "--sandbox", "-o", "json")
        notes = [
            f.get("note", "")
            for c in json.loads(planned.stdout)["changes"]
            for f in c["fields"]
            if c["resource"] == "pcs/node-group/train"
        ]
        assert any("up first drains train-[3-4] on the login node" in n for n in notes), notes

        # A job that holds a node past the timeout: up stops, PCS is not told.
        (slurm / "squeue.txt").write_text("41 alice pretrain\n")
        seen = len(sandbox.requests())
        held = sandbox.fmctl("up", "-f", str(smaller), "--sandbox", "--yes", timeout=300)
        assert held.returncode == 1, held.stdout + held.stderr
        assert "1 job(s) still running on train-[3-4]" in held.stderr, held.stderr
        assert "41 alice pretrain" in held.stderr
        actions = [r["action"] for r in sandbox.requests()[seen:]]
        assert "SendCommand" in actions and "UpdateComputeNodeGroup" not in actions
        assert "scontrol update NodeName=train-[3-4] State=DRAIN" in " ".join(calls(slurm))

        # Nothing runs there now: drained, then PCS scales the group in.
        (slurm / "squeue.txt").write_text("")
        seen = len(sandbox.requests())
        done = sandbox.fmctl("up", "-f", str(smaller), "--sandbox", "--yes", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        actions = [r["action"] for r in sandbox.requests()[seen:]]
        assert actions.index("SendCommand") < actions.index("UpdateComputeNodeGroup"), actions
    finally:
        seen = len(sandbox.requests())
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
    # down takes the whole cluster (the user was asked first): no drain of its own.
    assert "SendCommand" not in [r["action"] for r in sandbox.requests()[seen:]]
