"""What replaces a node fmctl's health agent drains on ParallelCluster: ParallelCluster's own
clustermgtd (tests/tools/standin/clustermgtd.py), run against the sandbox's EC2 and a
stand-in cluster's real slurmctld, not fmctl's reading of it.

The agent drains the node (`fmctl-health: XID 79 RESTART_BM -> replace`); clustermgtd finds
a static node drained and idle, sets it down, terminates its instance and launches another
from the queue's launch template; the new instance boots through fmctl's verify gate and
only then starts slurmd; a new instance that fails the gate never registers, shuts down,
and clustermgtd launches yet another.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from provisioner.catalog import load_catalog
from provisioner.render.context import ClusterContext, build_context
from provisioner.render.slurm import health_env
from tests.conftest import ROOT, validate_text
from tests.tools.standin import rootfs
from tests.tools.standin.clustermgtd import Emulator, Fleet, p5_instance, required
from tests.tools.standin.node import StandinNode

pytestmark = rootfs.required()
SERVICE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
HEALTHY_GPUS = (ROOT / "tests/data/check/nvidia-smi-healthy.csv").read_text()
XID79 = ROOT / "tests/data/real/kernel-xid79-open-gpu-kernel-modules-1151.txt"
#: Boots (counted from 0, the cluster's first three included) whose GPU is off the bus.
FAULTY: set[int] = set()


def _context() -> ClusterContext:
    """The Slurm example's render context (its health settings among it)."""
    validation = validate_text((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    assert validation.ok and validation.resolved is not None
    return build_context(validation.resolved, load_catalog())


CONTEXT = _context()
HEALTH_ENV = health_env(CONTEXT)


def _prepare(node: StandinNode, nth: int) -> None:
    """A new instance as `up` and the AMI leave it (one GPU short on a faulty boot)."""
    p5_instance(node, HEALTH_ENV, gpus_missing=1 if nth in FAULTY else 0)


@pytest.fixture(scope="module")
def fleet(sandbox: Any) -> Iterator[Fleet]:
    required()
    emulator = Emulator(sandbox.endpoint, sandbox.info["ca"], sandbox.credentials)
    built = Fleet(
        emulator,
        rootfs.ensure(),
        cluster=f"cmgtd-{uuid.uuid4().hex[:6]}",
        queue="gpu",
        resource="p5",
        count=3,
        prepare=_prepare,
    )
    try:
        built.start()
        yield built
    finally:
        built.stop()


def _agent(fleet: Fleet, name: str) -> str:
    """The Xid 79 the recording shows, in the node's kernel log; one run of the agent."""
    boot = next(b for b in reversed(fleet.boots) if b.name == name and b.node is not None)
    assert boot.node is not None
    boot.node.write("/etc/standin/kernel.log", XID79.read_text().splitlines()[1] + "\n")
    done = boot.node.run(["/bin/bash", "/opt/fmctl/slurm/lib/health-agent.sh"], env=SERVICE_ENV)
    assert done.returncode == 0, done.stderr
    return boot.node.path("/var/lib/fmctl/health/state").read_text().strip()


def _node(fleet: Fleet, name: str) -> dict[str, str]:
    assert fleet.slurm is not None
    out = fleet.slurm.scontrol("show", "node", name, "-o")
    return dict(w.split("=", 1) for w in out.split() if "=" in w)


def _replaced(fleet: Fleet, name: str, old: str, timeout: float = 90) -> str:
    """Wait until another instance backs ``name`` and the node is idle again; that
    instance."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = fleet.backing(name)
        if now != old and _node(fleet, name).get("State") == "IDLE":
            return now
        time.sleep(0.3)
    raise AssertionError(
        f"{name} not replaced: {_node(fleet, name)}\n{fleet.log()[-6000:]}\n"
        f"{fleet.slurm.log() if fleet.slurm else ''}"
    )


def _repair_by_reboot(node: StandinNode) -> str:
    """health.repair: reboot on ``node``, with fmctl-verify.service as OnNodeConfigured
    writes it (the agent reboots only where the gate runs at boot); the health settings it
    had."""
    before = node.path("/opt/fmctl/slurm/health.env").read_text()
    node.write(
        "/opt/fmctl/slurm/health.env",
        health_env(dataclasses.replace(CONTEXT, health_repair="reboot")),
    )
    script = (ROOT / "slurm/actions/on-node-configured.sh").read_text()
    unit = script.split("fmctl-verify.service <<UNIT\n", 1)[1].split("\nUNIT\n", 1)[0]
    node.write(
        "/etc/systemd/system/fmctl-verify.service",
        unit.replace("$home", "/opt/fmctl/slurm") + "\n",
    )
    return before


def test_clustermgtd_replaces_the_node_the_agent_drained(fleet: Fleet) -> None:
    name = fleet.names[0]
    others = {n: fleet.backing(n) for n in fleet.names[1:]}
    old = fleet.backing(name)
    assert _agent(fleet, name) == "draining fmctl-health: XID 79 RESTART_BM -> replace"
    new = _replaced(fleet, name, old)

    states = {
        i["InstanceId"]: i["State"]["Name"]
        for i in fleet.instances(("pending", "running", "shutting-down", "terminated"))
    }
    assert states[old] in ("shutting-down", "terminated")
    assert states[new] == "running"
    # The node's address is the new instance's, set by clustermgtd with its id.
    instance = next(i for i in fleet.instances() if i["InstanceId"] == new)
    shown = _node(fleet, name)
    assert shown["NodeAddr"] == instance["PrivateIpAddress"]
    assert shown.get("InstanceId") == new
    # It came back through fmctl's gate, before slurmd.
    boot = next(b for b in fleet.boots if b.instance == new)
    assert boot.passed and boot.node is not None
    verdict = boot.node.path("/var/lib/fmctl/health/verify.txt").read_text().splitlines()
    assert {line.split()[1].rstrip(":") for line in verdict if line.startswith("ok ")} >= {
        "gpus",
        "efa",
        "efa-loopback",
        "dcgm",
    }, verdict
    assert not [line for line in verdict if line.startswith("fail")], verdict
    # clustermgtd set it down (its jobs, if any, requeued) before it replaced it.
    assert fleet.head is not None
    assert (
        f"node {name} reason set to: Static node maintenance: unhealthy node is being replaced"
        in fleet.head.path("/var/log/slurmctld.log").read_text()
    )
    assert "Terminating instances backing unhealthy static nodes" in fleet.log()
    # Nothing else was touched.
    assert {n: fleet.backing(n) for n in fleet.names[1:]} == others


def test_a_replacement_that_fails_the_gate_never_registers_and_is_replaced(
    fleet: Fleet,
) -> None:
    name = fleet.names[1]
    old = fleet.backing(name)
    # The next instance to boot has a GPU off the bus.
    FAULTY.add(len(fleet.boots))
    assert _agent(fleet, name) == "draining fmctl-health: XID 79 RESTART_BM -> replace"
    new = _replaced(fleet, name, old, timeout=120)

    boots = [b for b in fleet.boots if b.name == name]
    failed = [b for b in boots if b.gated and not b.passed]
    assert len(failed) == 1, boots
    assert failed[0].instance not in (old, new)
    # The failed one never registered: slurmd never started there (it was terminated).
    assert failed[0].resumed == 0.0
    states = {
        i["InstanceId"]: i["State"]["Name"]
        for i in fleet.instances(("pending", "running", "shutting-down", "terminated"))
    }
    assert states[failed[0].instance] in ("shutting-down", "terminated")
    assert next(b for b in boots if b.instance == new).passed


def test_a_rebooting_node_is_left_alone_and_replaced_if_it_does_not_come_back(
    fleet: Fleet,
) -> None:
    """health.repair: reboot. The agent has Slurm reboot the node once idle (`scontrol
    reboot ASAP nextstate=RESUME`); clustermgtd counts a rebooting node healthy
    (slurm_resources.py is_state_healthy) and leaves its instance. Here the GPU is still off
    the bus after the reboot: the gate fails at boot, slurmd never starts, Slurm marks the
    node down at ResumeTimeout ("reboot timed out"), and clustermgtd replaces it."""
    name = fleet.names[2]
    old = fleet.backing(name)
    boot = next(b for b in reversed(fleet.boots) if b.name == name and b.node is not None)
    assert boot.node is not None
    _repair_by_reboot(boot.node)
    gone = "\n".join(HEALTHY_GPUS.splitlines()[:-1]) + "\n"
    fleet.on_reboot = lambda node: node.write("/etc/standin/nvidia-smi.csv", gone)
    assert _agent(fleet, name) == "draining fmctl-health: XID 79 RESTART_BM -> reboot"

    # While Slurm waits for the rebooted node (REBOOT_ISSUED, until ResumeTimeout),
    # clustermgtd loops and leaves it; once Slurm gives up ("reboot timed out": down),
    # clustermgtd replaces it. Watched as it happens, whatever the machine's pace.
    assert fleet.slurm is not None
    looked_while_rebooting: list[int] = []
    timed_out = False
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and fleet.backing(name) == old:
        shown = fleet.slurm.scontrol("show", "node", name)
        if "REBOOT_ISSUED" in shown:
            looked_while_rebooting.append(fleet.log().count("Managing cluster..."))
        timed_out = timed_out or "reboot timed out" in shown
        time.sleep(0.2)
    assert boot.reboots and boot.reboots[0][1] is False, boot.reboots
    assert looked_while_rebooting, "never seen rebooting"
    assert looked_while_rebooting[-1] - looked_while_rebooting[0] >= 2, looked_while_rebooting
    assert timed_out, fleet.slurm.scontrol("show", "node", name)
    # Every time clustermgtd found it unhealthy, it was down, never rebooting.
    found = [line for line in fleet.log().splitlines() if "unhealthy static nodes:" in line]
    mine = [line for line in found if f"'{name}(" in line]
    assert mine and not [line for line in mine if "REBOOT" in line], mine
    new = _replaced(fleet, name, old, timeout=120)
    replacement = next(b for b in fleet.boots if b.instance == new)
    assert replacement.passed


def test_a_node_rebooted_for_its_fault_comes_back_to_work_through_the_gate(
    fleet: Fleet,
) -> None:
    """health.repair: reboot, and the reboot cures the fault: Slurm reboots the idle node
    (RebootProgram), fmctl-verify.service passes the gate at boot, slurmd registers with its
    new boot time and Slurm resumes the node (nextstate=RESUME). The same instance, never
    replaced; the agent, on its next look at this boot's kernel log, finds it healthy."""
    name = fleet.names[0]
    old = fleet.backing(name)
    boot = next(b for b in reversed(fleet.boots) if b.name == name and b.node is not None)
    assert boot.node is not None
    fleet.on_reboot = None  # the GPU that fell off the bus is back after the reboot
    replace_env = _repair_by_reboot(boot.node)
    try:
        assert _agent(fleet, name) == "draining fmctl-health: XID 79 RESTART_BM -> reboot"
        assert fleet.slurm is not None
        deadline = time.monotonic() + 180
        while not (boot.reboots and _node(fleet, name).get("State") == "IDLE"):
            assert time.monotonic() < deadline, (
                boot.reboots,
                _node(fleet, name),
                fleet.slurm.log()[-4000:],
            )
            time.sleep(0.3)
        assert boot.reboots[0][1] is True, boot.reboots  # the gate passed at boot
        shown = _node(fleet, name)
        assert fleet.backing(name) == old, "replaced, not rebooted"
        assert "REBOOT" not in shown["State"] and "DRAIN" not in shown["State"], shown
        assert fleet.head is not None
        # slurmctld's own word that the reboot it issued is done.
        log = fleet.head.path("/var/log/slurmctld.log").read_text()
        asked = log.rindex(f"reboot request queued for nodes {name}")
        assert f"node {name} returned to service" in log[asked:], log[asked:]
        # This boot's kernel log has no Xid: the agent finds the node healthy.
        done = boot.node.run(["/bin/bash", "/opt/fmctl/slurm/lib/health-agent.sh"], env=SERVICE_ENV)
        assert done.returncode == 0, done.stderr
        state = boot.node.path("/var/lib/fmctl/health/state").read_text()
        assert state.startswith("healthy"), state
    finally:
        if boot.node is not None:  # still the same instance: its settings as they were
            boot.node.write("/opt/fmctl/slurm/health.env", replace_env)
