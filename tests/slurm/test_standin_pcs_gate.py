"""fmctl's verify gate on a PCS node (issue 33), on a fresh stand-in node laid out as a PCS
AMI (tests/slurm/test_standin_pcs.py's layout): the GPU node group's nodeBootstrapped and
nodeReady scripts, fetched as the request names them (the artifact bucket's object, checked
against the request's SHA-256 as PCS checks it) and run with the request's arguments.

What PCS does around them is botocore's PCS model (NodeLifecycleStages,
NodeLifecycleScript): nodeBootstrapped runs before slurmd at every boot and a failure
terminates the node; nothing orders it after cloud-init's user data, so this node runs it
first, and the user data after it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.render.placeholders import fill, find
from tests.slurm.test_standin_pcs import BUCKET, _files, _shell_part
from tests.slurm.test_standin_pcs import pcs_node as laid_out
from tests.tools.standin import rootfs
from tests.tools.standin.node import CLOUD_INIT_ENV, StandinNode

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
S3 = f"/var/lib/standin-s3/{BUCKET}"

pytestmark = rootfs.required()


def _filled(value: Any) -> Any:
    """A request's placeholders filled as `up` fills them (the bucket is the only one in the
    scripts' places and arguments here: no FSx in the example)."""
    text = json.dumps(value)
    return json.loads(fill(text, {n: BUCKET for n in find(text)}))


def _fetch(node: StandinNode, script: dict[str, Any]) -> str:
    """A lifecycle script as PCS gets it: the object at scriptLocation, which must match the
    request's checksum; kept where this stand-in of PCS's agent runs it from."""
    where = script["scriptSource"]["scriptLocation"].removeprefix("s3://")
    body = node.path(f"/var/lib/standin-s3/{where}").read_bytes()
    assert hashlib.sha256(body).hexdigest() == script["scriptSource"]["checksum"], where
    inside = f"/var/lib/standin-pcs/scripts/{script['name']}"
    node.write(inside, body.decode(), 0o700)
    return inside


@pytest.fixture(scope="module")
def pcs_node() -> Iterator[tuple[StandinNode, dict[str, str]]]:
    files = _files()
    node = laid_out("ip-10-0-16-31", files)
    try:
        yield node, files
    finally:
        node.stop()


def _stages(files: dict[str, str]) -> dict[str, Any]:
    body = json.loads(files["pcs/compute-node-groups/train.json"])
    return dict(_filled(body["nodeLifecycleActions"])["stages"])


def test_the_stages_bootstrap_verify_pair_and_terminate_a_failing_node(
    pcs_node: tuple[StandinNode, dict[str, str]],
) -> None:
    """One node's life, in order: the stages need the bootstrap's state."""
    node, files = pcs_node
    (gate,) = _stages(files)["nodeBootstrapped"]
    (ready,) = _stages(files)["nodeReady"]
    script = _fetch(node, gate)

    # First boot, PCS's stage before cloud-init's user data: the script bootstraps the node
    # itself, then runs the gate, which passes on a healthy p5.
    ran = node.run([script, *gate["arguments"]], env=CLOUD_INIT_ENV, timeout=300)
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    assert "fmctl on-node-configured: compute done" in ran.stdout
    assert node.path("/var/lib/fmctl/bootstrapped").is_file()
    report = node.path("/var/lib/fmctl/health/verify.txt").read_text()
    assert "ok gpus: 8 of 8" in report and "ok efa: 32 of 32" in report, report
    # The pair's unit is there for the nodeReady stage, with no [Install]: on PCS nothing
    # but that stage (and the agent's retry) starts it.
    unit = node.path("/etc/systemd/system/fmctl-verify-pair.service").read_text()
    assert "lib/verify-pair.sh" in unit and "[Install]" not in unit, unit
    # ParallelCluster's boot unit is not: the stage is PCS's gate at every boot, which the
    # node's health agent is told of (a node it condemns is replaced through it).
    assert not node.path("/etc/systemd/system/fmctl-verify.service").exists()
    assert "nodeBootstrapped stage at every boot" in node.path("/etc/fmctl/pcs-gate").read_text()

    # Then cloud-init's user data: the bootstrap ran already, and is not run twice.
    text = json.loads(files["pcs/launch-templates/train.json"])["LaunchTemplateData"]["UserData"]
    part = fill(_shell_part(text), {n: BUCKET for n in find(_shell_part(text))})
    node.write("/var/lib/cloud/instance/scripts/part-001", part, 0o700)
    late = node.run(["/var/lib/cloud/instance/scripts/part-001"], env=CLOUD_INIT_ENV, timeout=300)
    assert late.returncode == 0, f"{late.stdout}\n{late.stderr}"
    assert "bootstrap ran already" in late.stdout and "compute done" not in late.stdout

    # The same boot again (a stage re-run): passed since this boot, not checked twice.
    again = node.run([script, *gate["arguments"]], env=CLOUD_INIT_ENV, timeout=120)
    assert again.returncode == 0 and "passed already since this boot" in again.stdout

    # Once slurmd has registered, the nodeReady stage starts the pair's unit (the stand-in's
    # systemctl verifies the unit with systemd-analyze first, and records the start in /run).
    assert "arguments" not in ready
    pair = _fetch(node, ready)
    started = ["/bin/test", "-e", "/run/standin-systemd/fmctl-verify-pair.service"]
    assert node.run(started).returncode == 1
    ran = node.run([pair], env=CLOUD_INIT_ENV, timeout=60)
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    assert node.run(started).returncode == 0
    # A pair that drained the node (slow with two peers) fails the stage: PCS terminates it.
    node.write(
        "/var/lib/fmctl/health/pair-drained",
        "fmctl-health: nccl-pair 120.4 GB/s < 396 GB/s -> replace\n",
    )
    try:
        slow = node.run([pair], env=CLOUD_INIT_ENV, timeout=60)
    finally:
        node.path("/var/lib/fmctl/health/pair-drained").unlink()
    assert slow.returncode == 1 and "PCS terminates it" in slow.stderr, slow.stderr
    # Without the unit (health off, or not one of fmctl's GPU nodes) it says so and passes.
    saved = node.path("/etc/systemd/system/fmctl-verify-pair.service").read_text()
    node.path("/etc/systemd/system/fmctl-verify-pair.service").unlink()
    try:
        bare = node.run([pair], env=CLOUD_INIT_ENV, timeout=60)
    finally:
        node.write("/etc/systemd/system/fmctl-verify-pair.service", saved)
    assert bare.returncode == 0 and "no verify pair here" in bare.stdout, bare.stdout

    # A reboot (/run is cleared) with a GPU fallen off the bus: the gate fails, and the
    # script's exit status is what has PCS terminate the node (onError TERMINATE).
    node.run(["/bin/rm", "-rf", "/run/fmctl"])
    node.write("/etc/standin/nvidia-smi.csv", (DATA / "check/nvidia-smi-lost-gpu.csv").read_text())
    try:
        failed = node.run([script, *gate["arguments"]], env=CLOUD_INIT_ENV, timeout=120)
    finally:
        node.write(
            "/etc/standin/nvidia-smi.csv", (DATA / "check/nvidia-smi-healthy.csv").read_text()
        )
    assert failed.returncode == 1, f"{failed.stdout}\n{failed.stderr}"
    assert "PCS terminates it" in failed.stderr
    # What the gate found is in the script's own output, which PCS writes to the script's
    # log file ("writes its output to a dedicated log file", the PCS User Guide's node
    # lifecycle actions page): what a log forwarder keeps once the node is gone.
    assert "FAIL gpus: 7 of 8" in failed.stdout, failed.stdout
    assert "FAIL gpus: 7 of 8" in node.path("/var/lib/fmctl/health/verify.txt").read_text()

    # A node its health agent condemned (lib/health-agent.sh, which then reboots it): both
    # stages fail at once, the gate not run (its report stays the last one), so PCS ends it.
    why = "fmctl-health: XID 145 WORKFLOW_NVLINK5_ERR -> replace"
    node.run(["/bin/rm", "-rf", "/run/fmctl"])
    node.write("/var/lib/fmctl/health/replace", why + "\n")
    try:
        condemned = node.run([script, *gate["arguments"]], env=CLOUD_INIT_ENV, timeout=120)
        at_ready = node.run([pair], env=CLOUD_INIT_ENV, timeout=60)
    finally:
        node.path("/var/lib/fmctl/health/replace").unlink()
    for ran in (condemned, at_ready):
        assert ran.returncode == 1, f"{ran.stdout}\n{ran.stderr}"
        assert f"asked for a new instance ({why}): PCS terminates it" in ran.stderr
    assert "FAIL gpus: 7 of 8" in node.path("/var/lib/fmctl/health/verify.txt").read_text()

    # The reboot the agent asked for (health.repair: reboot) is the boot itself: the stage
    # clears the request and the gate judges the node (healthy again here), before slurmd.
    node.write("/var/lib/fmctl/health/reboot", "fmctl-health: XID 79 RESTART_BM -> reboot\n")
    rebooted = node.run([script, *gate["arguments"]], env=CLOUD_INIT_ENV, timeout=300)
    assert rebooted.returncode == 0, f"{rebooted.stdout}\n{rebooted.stderr}"
    assert not node.path("/var/lib/fmctl/health/reboot").exists()
    assert "ok gpus: 8 of 8" in node.path("/var/lib/fmctl/health/verify.txt").read_text()
