"""fmctl's node health agent (slurm/lib/health-agent.sh, issue 33) on stand-in GPU nodes of a
Slurm cluster (a controller, three compute nodes of one partition, Slurm's real slurmctld and
slurmd), run as its systemd service runs it: recorded real kernel lines with XIDs, GPUs and EFA
devices gone. Application-class XIDs drain nothing; a node-level fault drains the node with a
reason `sinfo -R` shows; a node someone else drained keeps their reason; beyond the repair
budget the agent only records; every fault is counted in the metrics the EFA exporter serves.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from provisioner.catalog import load_catalog
from provisioner.check.health import HealthReport, parse_slurm, slurm_use
from provisioner.check.health_gather import health_script
from provisioner.render.context import ClusterContext, build_context
from provisioner.render.slurm import health_env
from tests.conftest import ROOT, validate_text
from tests.tools.standin import recorded, rootfs
from tests.tools.standin.node import SSM_ENV, StandinNode
from tests.tools.standin.slurm import ComputeNode, StandinSlurm

pytestmark = rootfs.required()
POOL = "gpu"
REAL = ROOT / "tests" / "data" / "real"
DATA = ROOT / "tests" / "data" / "check"
HEALTHY_GPUS = (ROOT / "tests/data/check/nvidia-smi-healthy.csv").read_text()
#: What systemd gives a oneshot service: no login environment, a minimal PATH.
SERVICE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
REBOOT_PROGRAM = "/usr/local/sbin/standin-reboot"
REBOOT_SCRIPT = "#!/bin/sh\ndate -u +%s >>/var/lib/standin-reboots\n"
NODE_ENV = (
    "FMCTL_EFA_ENABLED=true\nFMCTL_EXPECTED_GPUS=8\nFMCTL_EXPECTED_EFA=32\n"
    "FMCTL_EFA_RDMA_READ=true\nFMCTL_IMEX=false\n"
)


def _context() -> ClusterContext:
    """The p5 Slurm example's context: its health settings are the spec's defaults."""
    validation = validate_text((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    assert validation.ok and validation.resolved is not None
    return build_context(validation.resolved, load_catalog())


@dataclass
class Cluster:
    head: StandinNode
    computes: list[ComputeNode]
    slurm: StandinSlurm


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    image = rootfs.ensure()
    head = StandinNode(image, "ip-10-0-0-50")
    nodes = [
        StandinNode(image, f"ip-10-0-18-{i}", shared_from=head, shares=("opt/slurm",))
        for i in (51, 52, 53)
    ]
    try:
        computes = [
            ComputeNode(node, f"gpu-st-p5-{i}", POOL, 1, 2, 1, addr=f"127.0.18.{50 + i}")
            for i, node in enumerate(nodes, 1)
        ]
        for node in nodes:
            shutil.copytree(ROOT / "slurm", node.path("/opt/fmctl/slurm"), dirs_exist_ok=True)
            # What `up` uploads beside the scripts: the spec's health settings, rendered.
            node.write("/opt/fmctl/slurm/health.env", health_env(_context()))
            node.write("/etc/fmctl/node.env", NODE_ENV)
            node.path("/var/lib/fmctl-efa").mkdir(parents=True, exist_ok=True)
        for node in nodes:
            node.write(REBOOT_PROGRAM, REBOOT_SCRIPT, 0o755)
        # ParallelCluster's slurm.conf sets RebootProgram=/sbin/reboot (the cookbook's
        # slurm.conf.erb); the stand-in's only records the call: the test boots the node.
        for node in nodes:
            _mount(node)
        # fmctl's prolog and epilog, where ParallelCluster's slurm.conf globs them (jobs run).
        for kind in ("prolog.d", "epilog.d"):
            shutil.copytree(
                ROOT / "slurm" / kind,
                head.path(f"/opt/slurm/etc/scripts/{kind}"),
                dirs_exist_ok=True,
            )
        slurm = StandinSlurm(head, computes, [("RebootProgram", REBOOT_PROGRAM)])
        slurm.start_slurmd()
        for c in computes:
            _healthy(c.node)
        yield Cluster(head, computes, slurm)
    finally:
        head.stop()
        for node in nodes:
            node.stop()


#: The example's storage (storage.fsxLustre, storage.localNvme), mounted on every node before
#: OnNodeConfigured runs; here a tmpfs stands in for each (the agent asks only that it be a
#: mount point that answers).
MOUNTS = ("/fsx", "/scratch")


def _mount(node: StandinNode) -> None:
    for path in MOUNTS:
        if node.run(["mountpoint", "-q", path], env=SERVICE_ENV).returncode != 0:
            node.run(["mkdir", "-p", path], env=SERVICE_ENV)
            done = node.run(["mount", "-t", "tmpfs", "tmpfs", path], env=SERVICE_ENV)
            assert done.returncode == 0, done.stderr


def _healthy(node: StandinNode) -> None:
    _mount(node)
    node.write("/etc/standin/nvidia-smi.csv", HEALTHY_GPUS)
    node.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32), 2))
    node.path("/etc/standin/kernel.log").unlink(missing_ok=True)
    node.path("/etc/standin/nvidia-smi-q.txt").unlink(missing_ok=True)


def _agent(c: ComputeNode) -> str:
    """One run of the agent as fmctl-health.service runs it; its state record."""
    done = c.node.run(["/bin/bash", "/opt/fmctl/slurm/lib/health-agent.sh"], env=SERVICE_ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    return c.node.path("/var/lib/fmctl/health/state").read_text().strip()


def _reason(cluster: Cluster, c: ComputeNode) -> tuple[str, str]:
    """(state, reason) as `sinfo -R`'s reasons and the node's state show them."""
    out = cluster.head.run(
        ["/opt/slurm/bin/sinfo", "-h", "-N", "-n", c.name, "-o", "%T|%E"], env=SERVICE_ENV
    ).stdout.strip()
    state, _, reason = out.partition("|")
    return state, "" if reason == "none" else reason  # sinfo's %E for no reason


def _kernel(c: ComputeNode, recording: str) -> None:
    log = c.node.path("/etc/standin/kernel.log")
    old = log.read_text() if log.exists() else ""
    log.write_text(old + (REAL / recording).read_text())


def _metrics(c: ComputeNode) -> str:
    return c.node.path("/var/lib/fmctl-efa/fmctl-health.prom").read_text()


def test_the_loop_on_slurm(cluster: Cluster) -> None:
    """In one cluster, in order: application XIDs, a GPU off the bus, the budget (and the
    spec's wider one), a person's drain (one scenario: the budget depends on what is already
    in repair)."""
    first, second, third = cluster.computes
    assert _agent(first).startswith("healthy")

    # Xid 13 (RESTART_APP) and 109 (RESET_GPU) on the first node: 109 is node-level.
    _kernel(second, "kernel-xid13-109-gpud.txt")
    # Only the application-class lines first: the 109 line is cut off.
    log = second.node.path("/etc/standin/kernel.log")
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:4]))
    assert _agent(second).startswith("healthy")
    assert _reason(cluster, second)[1] == ""
    assert 'fmctl_node_faults_total{code="xid:13",class="RESTART_APP"} 3' in _metrics(second)
    assert 'fmctl_node_health_state{state="healthy"} 1' in _metrics(second)
    # Read once: the cursor moved past them, a second run counts nothing again.
    assert _agent(second).startswith("healthy")
    assert 'fmctl_node_faults_total{code="xid:13",class="RESTART_APP"} 3' in _metrics(second)

    # A GPU falls off the bus on the first node (recorded real lines): drained, with the reason.
    _kernel(first, "kernel-xid79-open-gpu-kernel-modules-1151.txt")
    state = _agent(first)
    want = "fmctl-health: XID 79 RESTART_BM -> replace"
    assert state == f"draining {want}"
    node_state, reason = _reason(cluster, first)
    assert reason == want and node_state.startswith(("drain", "drained")), (node_state, reason)
    assert 'fmctl_node_health_state{state="draining"} 1' in _metrics(first)
    # It stays so on the next runs (clustermgtd replaces it once idle).
    assert _agent(first) == f"draining {want}"
    assert 'fmctl_repairs_total{action="replace",outcome="drained"} 1' in _metrics(first)

    # The budget: 1 of 3 nodes (max(1, 10%)) is in repair; the 109 on the second node is held.
    log.write_text((REAL / "kernel-xid13-109-gpud.txt").read_text())
    held = _agent(second)
    assert held.startswith("held fmctl-health: XID 109 RESET_GPU -> replace"), held
    assert "budget: 1 of 3 nodes of gpu in repair, at most 1" in held
    assert _reason(cluster, second)[1] == ""
    # A hold is one decision, however many runs it lasts.
    second.node.path("/var/lib/fmctl/health/kernel.cursor").write_text("standin-line:4\n")
    assert _agent(second).startswith("held")
    assert 'fmctl_repairs_total{action="replace",outcome="held-budget"} 1' in _metrics(second)
    # health.maxInRepair: 2 in the spec (rendered as up uploads it): now it drains.
    wider = dataclasses.replace(_context(), health_max_in_repair="2")
    second.node.write("/opt/fmctl/slurm/health.env", health_env(wider))
    second.node.path("/var/lib/fmctl/health/kernel.cursor").write_text("standin-line:4\n")
    assert _agent(second) == "draining fmctl-health: XID 109 RESET_GPU -> replace"
    assert 'fmctl_repairs_total{action="replace",outcome="drained"} 1' in _metrics(second)
    assert _reason(cluster, second)[1] == "fmctl-health: XID 109 RESET_GPU -> replace"

    # A person drained the third node; an EFA device then goes: their reason stays.
    done = cluster.head.run(
        ["/opt/slurm/bin/scontrol", "update", "NodeName=" + third.name, "State=DRAIN",
         "Reason=ops: cable check"],
        env=SERVICE_ENV,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    third.node.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32)[:31], 2))
    kept = _agent(third)
    assert kept.startswith("held fmctl-health: EFA_MISSING (31 of 32 EFA devices) -> replace"), kept
    assert "by someone else: ops: cable check" in kept
    assert 'fmctl_repairs_total{action="replace",outcome="held-other"} 1' in _metrics(third)
    assert _reason(cluster, third)[1] == "ops: cable check"


def _controller_view(cluster: Cluster) -> HealthReport:
    """`fmctl health`'s Run Command script, run on the head node as SSM runs it, read by
    fmctl's parser."""
    done = cluster.head.run(["/bin/bash", "-c", health_script()], env=SSM_ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    return parse_slurm("llm-pretrain", done.stdout, "10%", (POOL,))


def test_fmctl_health_reads_the_loop_from_the_controller(cluster: Cluster) -> None:
    """After the loop above, from scratch: a GPU off the bus (drained by the agent), a fault
    the budget holds (suspect: the agent keeps it in the node's Comment) and a person's drain
    (theirs, untouched): `fmctl health` tells them apart from what slurmctld holds."""
    first, second, third = cluster.computes
    _reset(cluster)
    before = _controller_view(cluster)
    assert [n.state for n in before.nodes] == ["healthy"] * 3, before
    assert before.pools[0].as_data() == {"name": POOL, "nodes": 3, "inRepair": 0, "budget": 1}

    _kernel(first, "kernel-xid79-open-gpu-kernel-modules-1151.txt")
    assert _agent(first).startswith("draining")
    _kernel(second, "kernel-xid13-109-gpud.txt")
    assert _agent(second).startswith("held")
    done = cluster.head.run(
        ["/opt/slurm/bin/scontrol", "update", f"NodeName={third.name}", "State=DRAIN",
         "Reason=ops: cable check"],
        env=SERVICE_ENV,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    view = _controller_view(cluster)
    nodes = {n.name: n for n in view.nodes}
    drained = nodes[first.name]
    assert drained.state == "repairing", drained  # drained and idle: clustermgtd's to replace
    assert drained.fault is not None and drained.fault.code == "xid:79"
    assert (drained.fault.fault_class, drained.fault.action) == ("RESTART_BM", "replace")
    assert drained.since, drained
    suspect = nodes[second.name]
    assert suspect.state == "suspect", suspect
    assert suspect.fault is not None and suspect.fault.code == "xid:109", suspect
    assert "budget: 1 of 3 nodes of gpu in repair" in suspect.detail
    theirs = nodes[third.name]
    assert (theirs.state, theirs.detail, theirs.fault) == ("drained", "ops: cable check", None)
    assert view.pools[0].in_repair == 1 and view.pools[0].budget == 1
    assert [e.node for e in view.events] and first.name in {e.node for e in view.events}
    json.dumps(view.as_data())  # what -o json prints

    # The held fault passes (no new kernel lines): the agent clears its Comment.
    assert _agent(second).startswith("healthy")
    assert {n.name: n.state for n in _controller_view(cluster).nodes}[second.name] == "healthy"


def test_efa_error_counters_are_counted_never_acted_on(cluster: Cluster) -> None:
    """The EFA devices' error counters (sysfs hw_counters, laid out as the kernel's
    sysfs-class-infiniband ABI; an EFA device is vendor 0x1d0f): a rise is counted as
    EFA_ERRORS in the metrics and the log, and the node keeps working; another vendor's
    device is not looked at."""
    c = cluster.computes[2]
    sysfs = "/var/tmp/sys"
    efa = f"{sysfs}/class/infiniband/rdmap16s27"
    other = f"{sysfs}/class/infiniband/mlx5_0"
    c.node.write(f"{efa}/device/vendor", "0x1d0f\n")
    c.node.write(f"{efa}/device/device", "0xefa1\n")
    c.node.write(f"{other}/device/vendor", "0x15b3\n")
    c.node.write(f"{other}/device/device", "0x101b\n")
    for name, value in (("rx_drops", 10), ("rdma_read_wr_err", 0), ("retrans_bytes", 5)):
        c.node.write(f"{efa}/ports/1/hw_counters/{name}", f"{value}\n")
    c.node.write(f"{other}/ports/1/hw_counters/rx_drops", "7\n")
    env = {**SERVICE_ENV, "FMCTL_SYSFS": sysfs}

    def run() -> str:
        done = c.node.run(["/bin/bash", "/opt/fmctl/slurm/lib/health-agent.sh"], env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return c.node.path("/var/lib/fmctl/health/state").read_text()

    first = run()  # the baseline
    assert 'code="efa-errors"' not in _metrics(c), first
    c.node.write(f"{efa}/ports/1/hw_counters/rx_drops", "15\n")
    c.node.write(f"{efa}/ports/1/hw_counters/retrans_bytes", "9000\n")  # not an error count
    c.node.write(f"{other}/ports/1/hw_counters/rx_drops", "70\n")
    state = run()
    assert not state.startswith("draining"), state
    assert 'fmctl_node_faults_total{code="efa-errors",class="EFA_ERRORS"} 1' in _metrics(c)
    log = c.node.path("/var/lib/fmctl/health/faults.log").read_text()
    assert "efa-errors EFA_ERRORS none rdmap16s27/1/rx_drops +5" in log
    assert "mlx5_0" not in log and "retrans_bytes" not in log
    # No rise, nothing new; another rise is another fault (the table's "seen": an event).
    run()
    assert 'fmctl_node_faults_total{code="efa-errors",class="EFA_ERRORS"} 1' in _metrics(c)
    c.node.write(f"{efa}/ports/1/hw_counters/rx_drops", "16\n")
    run()
    assert 'fmctl_node_faults_total{code="efa-errors",class="EFA_ERRORS"} 2' in _metrics(c)


def _idle(cluster: Cluster, c: ComputeNode) -> None:
    """Wait for the node to be IDLE: slurmctld pings a resumed node, and until it answers,
    it is "not responding"."""
    deadline = time.monotonic() + 60
    while cluster.slurm.node_state(c.name) != "IDLE" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert cluster.slurm.node_state(c.name) == "IDLE"


def _reset(cluster: Cluster) -> None:
    """Every node back in service, healthy, with a fresh kernel log and the spec's settings."""
    for c in cluster.computes:
        if cluster.slurm.node_state(c.name) != "IDLE":  # one in service needs no resume
            done = cluster.head.run(
                ["/opt/slurm/bin/scontrol", "update", f"NodeName={c.name}", "State=RESUME"],
                env=SERVICE_ENV,
            )
            assert done.returncode == 0, cluster.slurm.node_state(c.name) + ": " + done.stderr
        _idle(cluster, c)
        _healthy(c.node)
        # A fresh kernel log (as on a new instance): no cursor into the old one.
        c.node.path("/var/lib/fmctl/health/kernel.cursor").unlink(missing_ok=True)
        c.node.write("/opt/fmctl/slurm/health.env", health_env(_context()))
        assert _agent(c).startswith("healthy")


def test_dcgm_health_watches(cluster: Cluster) -> None:
    """DCGM's health watches (`dcgmi health`, answers recorded in the shape its source
    prints): off at first, so the agent turns them on; a Warning is counted and the node
    keeps working; a Failure drains it with the failing system in the reason."""
    _reset(cluster)
    c = cluster.computes[1]
    # A host engine runs (the stand-in dcgmi answers), its health watches still off.
    c.node.write("/etc/standin/dcgmi-diag.json", (DATA / "dcgmi-diag-healthy.json").read_text())
    assert _agent(c).startswith("healthy")
    assert c.node.path("/etc/standin/dcgmi-health-watches").exists()
    c.node.write("/etc/standin/dcgmi-health.json", (DATA / "dcgmi-health-warn.json").read_text())
    assert _agent(c).startswith("healthy")
    counted = 'fmctl_node_faults_total{code="dcgm-health-warn",class="DCGM_HEALTH_WARNING"} 1'
    assert counted in _metrics(c)
    # A Warning that lasts is one fault, however many runs see it (counted, and logged, when
    # it appears).
    assert _agent(c).startswith("healthy")
    assert counted in _metrics(c)
    log = c.node.path("/var/lib/fmctl/health/faults.log").read_text()
    assert log.count(" dcgm-health-warn ") == 1, log
    c.node.write("/etc/standin/dcgmi-health.json", (DATA / "dcgmi-health-fail.json").read_text())
    want = "fmctl-health: DCGM_HEALTH_FAILURE (Memory system: Failure) -> replace"
    assert _agent(c) == f"draining {want}"
    assert _reason(cluster, c)[1] == want
    for name in ("dcgmi-diag.json", "dcgmi-health.json", "dcgmi-health-watches"):
        c.node.path(f"/etc/standin/{name}").unlink()


def _settings(c: ComputeNode, **changes: object) -> None:
    """The spec's health settings with ``changes``, rendered as `up` uploads them."""
    c.node.write(
        "/opt/fmctl/slurm/health.env", health_env(dataclasses.replace(_context(), **changes))
    )


def install_unit(c: ComputeNode, name: str) -> None:
    """The systemd unit ``name`` as OnNodeConfigured writes it on ParallelCluster
    (test_standin_node checks it does)."""
    script = (ROOT / "slurm/actions/on-node-configured.sh").read_text()
    unit = script.split(f"{name} <<UNIT\n", 1)[1].split("\nUNIT\n", 1)[0]
    c.node.write(f"/etc/systemd/system/{name}", unit.replace("$home", "/opt/fmctl/slurm") + "\n")


def _boot_gate(c: ComputeNode) -> None:
    """fmctl-verify.service: the agent reboots only where it is."""
    install_unit(c, "fmctl-verify.service")


def _own_checks(c: ComputeNode) -> subprocess.CompletedProcess[str]:
    """The verify gate run with the node's own checks only (no EFA loopback, DCGM
    diagnostic or NCCL pair), as its step runs it."""
    _settings(
        c,
        health_verify_efa_loopback=False,
        health_verify_dcgm_level=0,
        health_verify_nccl_pair=False,
    )
    return c.node.run(["/bin/bash", "/opt/fmctl/slurm/lib/verify-node.sh"], env=SERVICE_ENV)


def test_repair_drain_only_and_reboot(cluster: Cluster) -> None:
    """health.repair: drain-only leaves the node drained with its reason (PCS); reboot has
    Slurm reboot a node for a fault a reboot cures, through RebootProgram once it is idle,
    and counts it against the budget; without the boot gate it replaces instead; a fault a
    reboot does not cure is replaced either way."""
    _reset(cluster)
    first, second, third = cluster.computes

    _settings(first, health_repair="drain-only")
    _kernel(first, "kernel-xid79-open-gpu-kernel-modules-1151.txt")
    want = "fmctl-health: XID 79 RESTART_BM -> drain"
    assert _agent(first) == f"draining {want}"
    assert _reason(cluster, first)[1] == want
    assert 'fmctl_repairs_total{action="drain",outcome="drained"} 1' in _metrics(first)
    _reset(cluster)

    # reboot, but no boot gate on the node: a reboot would return it unverified.
    _settings(second, health_repair="reboot")
    _kernel(second, "kernel-xid79-open-gpu-kernel-modules-1151.txt")
    assert _agent(second) == "draining fmctl-health: XID 79 RESTART_BM -> replace"
    _reset(cluster)

    # With the gate: Slurm reboots the node (ASAP: drained, rebooted once idle).
    for c in (first, second):
        _boot_gate(c)
        _settings(c, health_repair="reboot")
    _kernel(first, "kernel-xid79-open-gpu-kernel-modules-1151.txt")
    want = "fmctl-health: XID 79 RESTART_BM -> reboot"
    assert _agent(first) == f"draining {want}"
    deadline = time.monotonic() + 30
    reboots = first.node.path("/var/lib/standin-reboots")
    while not reboots.exists() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert reboots.exists(), cluster.slurm.log()
    assert 'fmctl_repairs_total{action="reboot",outcome="drained"} 1' in _metrics(first)
    state, reason = _reason(cluster, first)
    assert state == "reboot^" and reason.startswith(want), (state, reason)
    # The rebooting node is in repair: a fault on another is held (budget 1 of 3).
    _kernel(second, "kernel-xid79-open-gpu-kernel-modules-1151.txt")
    held = _agent(second)
    assert held.startswith("held fmctl-health: XID 79 RESTART_BM -> reboot"), held
    # A fault a reboot does not cure (an EFA device gone) is a replacement.
    _settings(third, health_repair="reboot", health_max_in_repair="3")
    _boot_gate(third)
    third.node.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32)[:31], 2))
    assert _agent(third) == "draining fmctl-health: EFA_MISSING (31 of 32 EFA devices) -> replace"


def test_an_nvlink_down_drains_the_node_and_fails_the_gate(cluster: Cluster) -> None:
    """`nvidia-smi nvlink -s`: the recorded p4de answer (one GPU, 12 links up) and a p5's 8
    GPUs of 18 are healthy; one link of GPU 3 down drains the node (NVLINK_DOWN) and fails
    the verify gate, which names the GPU."""
    _reset(cluster)
    c = cluster.computes[2]
    nvlink = "/etc/standin/nvidia-smi-nvlink.txt"
    c.node.write(nvlink, (REAL / "nvidia-smi-nvlink-p4de-gpu0.txt").read_text())
    assert _agent(c).startswith("healthy")
    c.node.path("/var/lib/fmctl/health/nvlinks").unlink()  # another machine's record
    c.node.write(nvlink, (DATA / "nvidia-smi-nvlink-p5-healthy.txt").read_text())
    assert _agent(c).startswith("healthy")
    assert c.node.path("/var/lib/fmctl/health/nvlinks").read_text().strip() == "18"
    done = _own_checks(c)
    assert done.returncode == 0 and "ok nvlink: 8 GPUs with 18 links up each" in done.stdout
    c.node.write(nvlink, (DATA / "nvidia-smi-nvlink-p5-link-down.txt").read_text())
    done = _own_checks(c)
    assert done.returncode == 1 and "FAIL nvlink: GPU 3: 17 of 18 up" in done.stdout, done.stdout
    want = "fmctl-health: NVLINK_DOWN (GPU 3: 17 of 18 NVLinks up) -> replace"
    assert _agent(c) == f"draining {want}"
    assert _reason(cluster, c)[1] == want
    c.node.path(nvlink).unlink()


def test_row_remapping_drains_the_node_and_fails_the_gate(cluster: Cluster) -> None:
    """`nvidia-smi -q -d ROW_REMAPPER`: the recorded 8 x H100 answer is healthy; the recorded
    A100 whose remap is pending (after its Xid 63) drains the node, its jobs left to finish
    (the table's reboot, a replacement under the spec's health.repair: replace); a failed
    remap (the H100 recording with one GPU's failure flag set) drains it too. Both fail the
    verify gate, which names the GPU."""
    _reset(cluster)
    c = cluster.computes[1]
    answer = "/etc/standin/nvidia-smi-q.txt"
    healthy = (REAL / "nvidia-smi-q-remapped-rows-h100x8.txt").read_text()
    c.node.write(answer, healthy)
    assert _agent(c).startswith("healthy")
    done = _own_checks(c)
    assert done.returncode == 0, done.stdout
    assert "ok row-remap: no remap failed or pending" in done.stdout
    c.node.write(answer, (REAL / "nvidia-smi-q-remapped-rows-a100-pending.txt").read_text())
    done = _own_checks(c)
    assert done.returncode == 1 and "FAIL row-remap: GPU 00000000:10:1C.0 pending" in done.stdout
    gpu = "GPU 00000000:10:1C.0: row remapping pending"
    want = f"fmctl-health: ROW_REMAP_PENDING ({gpu}) -> replace"
    assert _agent(c) == f"draining {want}"
    assert _reason(cluster, c)[1] == want
    _reset(cluster)

    flag = "Remapping Failure Occurred        : "
    c.node.write(answer, healthy.replace(f"{flag}No", f"{flag}Yes", 1))
    done = _own_checks(c)
    assert done.returncode == 1 and "FAIL row-remap: GPU 00000000:18:00.0 failure" in done.stdout
    want = "fmctl-health: ROW_REMAP_FAILURE (GPU 00000000:18:00.0: row remapping failed) -> replace"
    assert _agent(c) == f"draining {want}"
    assert _reason(cluster, c)[1] == want
    c.node.path(answer).unlink()


def test_storage_gone_drains_the_node(cluster: Cluster) -> None:
    """The spec's FSx file system and instance-store array (health.env): a node where one is
    no longer mounted is drained, naming the path."""
    _reset(cluster)
    c = cluster.computes[0]
    assert "FMCTL_FSX_MOUNT=/fsx" in c.node.path("/opt/fmctl/slurm/health.env").read_text()
    assert c.node.run(["umount", "/scratch"], env=SERVICE_ENV).returncode == 0
    want = "fmctl-health: NVME_UNAVAILABLE (/scratch not mounted) -> replace"
    assert _agent(c) == f"draining {want}"
    assert _reason(cluster, c)[1] == want
    _mount(c.node)


def _job(cluster: Cluster, node: ComputeNode) -> str:
    """A requeueable batch job running on ``node``; its id."""
    done = cluster.head.run(
        ["/opt/slurm/bin/sbatch", "-w", node.name, "--requeue", "-o", "/dev/null",
         "--wrap", "sleep 600"],
        env=SERVICE_ENV,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = done.stdout.split()[-1]
    deadline = time.monotonic() + 60
    while _job_field(cluster, job, "JobState") != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _job_field(cluster, job, "JobState") == "RUNNING", cluster.slurm.log()
    # And its process on the node: slurmctld says RUNNING before slurmd has run the prolog,
    # which checks the node's devices too and would drain it for a fault a test then makes.
    while node.node.run(["pgrep", "-f", "sleep 600"], env=SERVICE_ENV).returncode != 0:
        assert time.monotonic() < deadline, cluster.slurm.log()
        time.sleep(0.3)
    return job


def _job_field(cluster: Cluster, job: str, field: str) -> str:
    out = cluster.slurm.scontrol("show", "job", job, "-o")
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith(f"{field}=")), "")


def test_a_fault_that_lost_the_work_requeues_the_jobs(cluster: Cluster) -> None:
    """The table's jobs column: a GPU off the bus (Xid 79, RESTART_BM) has lost the work on
    the node, so its job is requeued at once (to restart elsewhere) as the node drains; an
    EFA device gone lets the job on its node run to its end."""
    _reset(cluster)
    first, second, third = cluster.computes
    lost, kept = _job(cluster, first), _job(cluster, second)
    try:
        # Each run exports the CPUs Slurm has allocated on the node (GpuNodeIdle's "no job"):
        # some where a job runs, 0 where none does.
        assert _agent(first).startswith("healthy") and _agent(third).startswith("healthy")
        assert re.search(r"^fmctl_node_alloc_cpus [1-9][0-9]*$", _metrics(first), re.M)
        assert re.search(r"^fmctl_node_alloc_cpus 0$", _metrics(third), re.M)
        # `fmctl cost`'s idle share reads the same from the controller: one node runs no job.
        done = cluster.head.run(["/bin/bash", "-c", health_script()], env=SSM_ENV)
        assert done.returncode == 0, done.stdout + done.stderr
        use = slurm_use(done.stdout, (POOL,))
        assert use.idle == (third.name,), done.stdout
        assert {n for n, _ in use.nodes} == {first.name, second.name, third.name}
        _kernel(first, "kernel-xid79-open-gpu-kernel-modules-1151.txt")
        assert _agent(first) == "draining fmctl-health: XID 79 RESTART_BM -> replace"
        assert _job_field(cluster, lost, "Restarts") == "1"
        assert _job_field(cluster, lost, "JobState") != "RUNNING" or (
            _job_field(cluster, lost, "NodeList") != first.name
        )
        log = first.node.path("/var/lib/fmctl/health/faults.log").read_text()
        assert f"requeued {lost}" in log

        _settings(second, health_max_in_repair="3")
        second.node.write(
            "/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32)[:31], 2)
        )
        assert _agent(second).startswith("draining fmctl-health: EFA_MISSING")
        assert _job_field(cluster, kept, "JobState") == "RUNNING"
        assert _job_field(cluster, kept, "Restarts") == "0"
        assert _reason(cluster, second)[0].startswith(("drng", "draining", "mix-", "alloc"))
    finally:
        cluster.head.run(["/opt/slurm/bin/scancel", lost, kept], env=SERVICE_ENV)


#: The stand-in systemctl's record of `systemctl reboot` (tests/tools/standin/bin/systemctl).
REBOOT_ASKED = "/var/lib/standin-reboot-asked"
CONDEMNED = "/var/lib/fmctl/health/replace"


def test_on_pcs_a_condemned_node_is_rebooted_once_its_jobs_end(cluster: Cluster) -> None:
    """Where the node's boots pass through fmctl's gate in PCS's nodeBootstrapped stage
    (/etc/fmctl/pcs-gate), a node drained for a new instance is condemned, and rebooted into
    that stage (which then fails for it: test_standin_pcs_gate.py) only once its jobs have
    ended; without the stage (ParallelCluster: clustermgtd replaces the node) nothing of it.
    A person who returns the node to service has the last word: the condemnation goes."""
    _reset(cluster)
    first, second, _ = cluster.computes
    first.node.write("/etc/fmctl/pcs-gate", "the stage runs at every boot\n")
    job = _job(cluster, first)
    try:
        first.node.write(
            "/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32)[:31], 2)
        )
        why = "fmctl-health: EFA_MISSING (31 of 32 EFA devices) -> replace"
        assert _agent(first) == f"draining {why}"
        assert first.node.path(CONDEMNED).read_text() == why + "\n"
        # Its job runs on: an EFA device gone leaves it to finish, and no reboot cuts it.
        assert _agent(first) == f"draining {why}"
        assert _job_field(cluster, job, "JobState") == "RUNNING"
        assert not first.node.path(REBOOT_ASKED).exists()

        cluster.head.run(["/opt/slurm/bin/scancel", job], env=SERVICE_ENV)
        deadline = time.monotonic() + 60
        while cluster.slurm.node_state(first.name) != "IDLE+DRAIN":
            assert time.monotonic() < deadline, cluster.slurm.node_state(first.name)
            time.sleep(0.3)
        assert _agent(first) == f"draining {why}"
        assert first.node.path(REBOOT_ASKED).exists()
        log = first.node.path("/var/lib/fmctl/health/faults.log").read_text()
        assert f"reboot {why} (PCS replaces the instance at its nodeBootstrapped stage)" in log

        # A person resumes it with the device back: in service, no longer condemned.
        first.node.path(REBOOT_ASKED).unlink()
        done = cluster.head.run(
            ["/opt/slurm/bin/scontrol", "update", f"NodeName={first.name}", "State=RESUME"],
            env=SERVICE_ENV,
        )
        assert done.returncode == 0, done.stderr
        _idle(cluster, first)
        _healthy(first.node)
        assert _agent(first).startswith("healthy")
        assert not first.node.path(CONDEMNED).exists()

        # ParallelCluster (no stage): drained, idle, and left to clustermgtd.
        _settings(second, health_max_in_repair="3")
        second.node.write(
            "/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32)[:31], 2)
        )
        assert _agent(second) == f"draining {why}"
        assert not second.node.path(CONDEMNED).exists()
        assert not second.node.path(REBOOT_ASKED).exists()
    finally:
        cluster.head.run(["/opt/slurm/bin/scancel", job], env=SERVICE_ENV)
        for c in (first, second):
            for path in ("/etc/fmctl/pcs-gate", CONDEMNED, REBOOT_ASKED):
                c.node.path(path).unlink(missing_ok=True)


def test_on_pcs_a_reboot_the_table_allows_is_the_agents_and_the_node_comes_back(
    cluster: Cluster,
) -> None:
    """health.repair: reboot on PCS: the stage is the boot's gate, so a fault a reboot cures
    drains the node for a reboot the agent makes itself once it is idle (not Slurm's
    `scontrol reboot`: RebootProgram is PCS's); after the boot, whose gate passed, the
    nodeReady stage (pcs-node-ready.sh) resumes a drain of fmctl's saying reboot, and not
    a person's."""
    _reset(cluster)
    first, second, _ = cluster.computes
    ready = ["/bin/bash", "/opt/fmctl/slurm/actions/pcs-node-ready.sh"]
    first.node.write("/etc/fmctl/pcs-gate", "the stage runs at every boot\n")
    try:
        _settings(first, health_repair="reboot")
        _kernel(first, "kernel-xid79-open-gpu-kernel-modules-1151.txt")
        why = "fmctl-health: XID 79 RESTART_BM -> reboot"
        assert _agent(first) == f"draining {why}"
        assert first.node.path("/var/lib/fmctl/health/reboot").read_text() == why + "\n"
        assert not first.node.path(CONDEMNED).exists()
        assert first.node.path(REBOOT_ASKED).exists()  # idle: at once
        assert _reason(cluster, first) == ("drained", why)  # drained, not Slurm's reboot^

        # The boot: its nodeBootstrapped stage cleared the request and the gate passed (the
        # stage's part is test_standin_pcs_gate.py's); then the nodeReady stage.
        for path in (REBOOT_ASKED, "/var/lib/fmctl/health/reboot", "/etc/standin/kernel.log"):
            first.node.path(path).unlink(missing_ok=True)
        first.node.path("/var/lib/fmctl/health/kernel.cursor").unlink(missing_ok=True)
        back = first.node.run(ready, env=SERVICE_ENV)
        assert back.returncode == 0, back.stdout + back.stderr
        assert f"{first.name} passed the gate at this boot" in back.stdout, back.stdout
        _idle(cluster, first)
        assert _agent(first).startswith("healthy")

        # A person's drain is theirs: the stage leaves it.
        done = cluster.head.run(
            ["/opt/slurm/bin/scontrol", "update", f"NodeName={second.name}", "State=DRAIN",
             "Reason=ops: cable check"],
            env=SERVICE_ENV,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        kept = second.node.run(ready, env=SERVICE_ENV)
        assert kept.returncode == 0 and "resumed" not in kept.stdout, kept.stdout
        assert _reason(cluster, second) == ("drained", "ops: cable check")
    finally:
        for path in ("/etc/fmctl/pcs-gate", "/var/lib/fmctl/health/reboot", REBOOT_ASKED):
            first.node.path(path).unlink(missing_ok=True)
