"""The verify gate's last check (slurm/lib/verify-pair.sh, issue 33) on stand-in GPU nodes of a
Slurm cluster (a controller, three compute nodes of one partition, Slurm's real slurmctld,
slurmd and srun): a node that passed its own checks is held (reserved to root) before slurmd
starts, so no job lands on it when it registers; a 2-node all-reduce with an idle peer then
returns it, or, below the pool's floor with two peers, drains it with a reason `sinfo -R`
shows; a slow peer is told from a slow node by the second peer.

all_reduce_perf is a stand-in (tests/tools/standin/nccl/all_reduce_perf: the recorded real
table's shape, the test's figures); the floor is what `fmctl render` writes for the p5
example (85% of the 465.9 GB/s the AWS samples measured on 2 x p5.48xlarge at 4 GiB)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Iterator

import pytest

from provisioner.check.health import parse_slurm
from provisioner.check.health_gather import health_script
from provisioner.render.slurm import health_env
from tests.conftest import ROOT
from tests.slurm.test_standin_health import Cluster, _context, install_unit
from tests.tools.standin import recorded, rootfs
from tests.tools.standin.node import SSM_ENV, StandinNode
from tests.tools.standin.slurm import ComputeNode, StandinSlurm

pytestmark = rootfs.required()
POOL = "train"  # the p5 example's pool: its partition
SERVICE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
NODE_ENV = "FMCTL_EFA_ENABLED=true\nFMCTL_EXPECTED_GPUS=8\nFMCTL_EXPECTED_EFA=32\n"
#: The AWS samples' 2 x p5.48xlarge all_reduce_perf at 4 GiB (catalog/nccl_baselines.py).
HEALTHY = "465.9"
SLOW = "120.4"  # NCCL off EFA or a slow link: far below the floor
FIGURES = "/opt/slurm/etc/standin-nccl"
HEALTHY_GPUS = (ROOT / "tests/data/check/nvidia-smi-healthy.csv").read_text()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    image = rootfs.ensure()
    head = StandinNode(image, "ip-10-0-0-60")
    nodes = [
        StandinNode(image, f"ip-10-0-19-{i}", shared_from=head, shares=("opt/slurm",))
        for i in (61, 62, 63)
    ]
    try:
        computes = [
            ComputeNode(node, f"train-st-p5-{i}", POOL, 1, 2, 1, addr=f"127.0.19.{60 + i}")
            for i, node in enumerate(nodes, 1)
        ]
        env = health_env(_context())
        assert 'FMCTL_NCCL_PAIR_FLOORS="train:396:4294967296"' in env  # what render writes
        for node in nodes:
            shutil.copytree(ROOT / "slurm", node.path("/opt/fmctl/slurm"), dirs_exist_ok=True)
            node.write("/opt/fmctl/slurm/health.env", env)
            node.write("/etc/fmctl/node.env", NODE_ENV)
            stand_in = (ROOT / "tests/tools/standin/nccl/all_reduce_perf").read_text()
            node.write("/opt/nccl-tests/build/all_reduce_perf", stand_in, 0o755)
            # A healthy p5 as the prolog sees it (every job's, the pair's too).
            node.write("/etc/standin/nvidia-smi.csv", HEALTHY_GPUS)
            node.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32), 2))
        # fmctl's prolog and epilog, where ParallelCluster's slurm.conf globs them.
        for kind in ("prolog.d", "epilog.d"):
            shutil.copytree(
                ROOT / "slurm" / kind,
                head.path(f"/opt/slurm/etc/scripts/{kind}"),
                dirs_exist_ok=True,
            )
        head.write(f"{FIGURES}/healthy", HEALTHY)
        slurm = StandinSlurm(head, computes, [])
        yield Cluster(head, computes, slurm)
    finally:
        head.stop()
        for node in nodes:
            node.stop()


def _pair(c: ComputeNode, *args: str) -> tuple[int, str]:
    """verify-pair.sh as its step runs it (as root, a service's PATH); exit status and the
    lines it added to verify.txt."""
    report = c.node.path("/var/lib/fmctl/health/verify.txt")
    before = report.read_text() if report.exists() else ""
    done = c.node.run(["/bin/bash", "/opt/fmctl/slurm/lib/verify-pair.sh", *args], env=SERVICE_ENV)
    after = report.read_text() if report.exists() else ""
    return done.returncode, after[len(before) :] + done.stderr


def _sinfo(cluster: Cluster, c: ComputeNode) -> tuple[str, str]:
    out = cluster.head.run(
        ["/opt/slurm/bin/sinfo", "-h", "-N", "-n", c.name, "-o", "%T|%E"], env=SSM_ENV
    ).stdout.strip()
    state, _, reason = out.partition("|")
    return state, "" if reason == "none" else reason


def _settled(cluster: Cluster, c: ComputeNode) -> tuple[str, str]:
    """``_sinfo`` once the node is no longer completing: a job that just ended (the pair's
    srun) leaves it COMPLETING until slurmd reports the job's end, a moment later (seen once
    in a loaded run: the node still "completing" right after the pair passed)."""
    deadline = time.monotonic() + 30
    while (state := _sinfo(cluster, c))[0] == "completing" and time.monotonic() < deadline:
        time.sleep(0.5)
    return state


def _held(cluster: Cluster, c: ComputeNode) -> bool:
    return f"ReservationName=fmctl-verify-{c.name}" in cluster.slurm.scontrol("show", "reservation")


def _figure(cluster: Cluster, c: ComputeNode, busbw: str | None) -> None:
    path = cluster.head.path(f"{FIGURES}/{c.name}")
    if busbw is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(busbw)


def _job_state(cluster: Cluster, job: str) -> str:
    out = cluster.head.run(
        ["/opt/slurm/bin/squeue", "-h", "-j", job, "-o", "%T"], env=SSM_ENV
    ).stdout.strip()
    return out or "GONE"


def test_a_new_node_is_held_until_its_pair_passes(cluster: Cluster) -> None:
    new, peer, other = cluster.computes
    # The peers serve already; the new node's slurmd has not started (OnNodeConfigured runs
    # the gate before the finalize recipe starts it).
    cluster.slurm.start_slurmd([peer.name, other.name])
    code, said = _pair(new, "--hold")
    assert code == 0 and f"ok nccl-pair: {new.name} held for its pair" in said, said
    assert _held(cluster, new)
    cluster.slurm.start_slurmd([new.name])
    # Registered, and reserved: a user's job asking for it waits.
    job = cluster.head.run(
        ["/opt/slurm/bin/sbatch", "--parsable", "-p", POOL, "-w", new.name, "-o", "/dev/null",
         "--wrap", "true"],
        env=SSM_ENV,
    ).stdout.strip()  # fmt: skip
    assert job.isdigit(), job
    time.sleep(2)
    assert _job_state(cluster, job) == "PENDING"
    # `fmctl health` (its script on the head node, as Run Command runs it) says so.
    done = cluster.head.run(["/bin/bash", "-c", health_script()], env=SSM_ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    states = {n.name: n.state for n in parse_slurm("llm", done.stdout, "10%", (POOL,)).nodes}
    assert states == {new.name: "verifying", peer.name: "healthy", other.name: "healthy"}
    # The pair (as fmctl-verify-pair.service runs it once slurmd has started): healthy.
    code, said = _pair(new)
    assert code == 0, said
    assert f"ok nccl-pair: 465.9 GB/s with {peer.name} (floor 396 GB/s at 4294967296 B)" in said
    assert not _held(cluster, new)
    # The node takes work: the waiting job ran.
    deadline = time.monotonic() + 30
    while _job_state(cluster, job) != "GONE" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _job_state(cluster, job) == "GONE"
    assert _settled(cluster, new) == ("idle", "")
    # Nothing held: the service at a later start of slurmd does nothing.
    assert _pair(new) == (0, "")


def test_a_slow_peer_is_told_from_a_slow_node(cluster: Cluster) -> None:
    new, peer, other = cluster.computes
    _figure(cluster, peer, SLOW)
    try:
        assert _pair(new, "--hold")[0] == 0
        code, said = _pair(new)
        assert code == 0, said
        assert f"ok nccl-pair: 465.9 GB/s with {other.name}" in said
        assert f"with {peer.name} 120.4: {peer.name} is the suspect" in said
        assert not _held(cluster, new) and _settled(cluster, new) == ("idle", "")
    finally:
        _figure(cluster, peer, None)


def test_a_slow_node_is_drained_for_replacement_after_two_peers(cluster: Cluster) -> None:
    new, peer, other = cluster.computes
    _figure(cluster, new, SLOW)
    try:
        assert _pair(new, "--hold")[0] == 0
        code, said = _pair(new)
        assert code == 1, said
        assert f"FAIL nccl-pair: 120.4 GB/s with {other.name}, 120.4 with {peer.name}" in said
        state, reason = _sinfo(cluster, new)
        assert reason == "fmctl-health: nccl-pair 120.4 GB/s < 396 GB/s -> replace"
        assert state.startswith(("drain", "drained")), state
        assert not _held(cluster, new)  # drained, not reserved: clustermgtd replaces it
        # ... and said for PCS's nodeReady stage, which then has PCS terminate the node.
        drained = new.node.path("/var/lib/fmctl/health/pair-drained").read_text()
        assert drained.strip() == reason
        # The peers were given back.
        assert _settled(cluster, peer) == ("idle", "") and _settled(cluster, other) == ("idle", "")
    finally:
        _figure(cluster, new, None)
        cluster.slurm.scontrol("update", f"NodeName={new.name}", "State=RESUME")


def test_with_one_idle_peer_a_slow_pair_keeps_the_node_held(cluster: Cluster) -> None:
    new, peer, other = cluster.computes
    cluster.slurm.scontrol("update", f"NodeName={other.name}", "State=DRAIN", "Reason=ops: busy")
    _figure(cluster, new, SLOW)
    try:
        assert _pair(new, "--hold")[0] == 0
        code, said = _pair(new)
        assert code == 1, said
        assert f"with {peer.name}, the one idle peer" in said and "stays held" in said
        assert _held(cluster, new)
        assert _sinfo(cluster, new)[1] == ""  # not drained: it cannot be told from its peer
        assert _sinfo(cluster, other)[1] == "ops: busy"  # a person's drain left alone
    finally:
        _figure(cluster, new, None)
        cluster.slurm.scontrol("delete", f"ReservationName=fmctl-verify-{new.name}")
        new.node.path("/var/lib/fmctl/health/pair-first").unlink(missing_ok=True)
        cluster.slurm.scontrol("update", f"NodeName={other.name}", "State=RESUME")


def test_a_held_node_pairs_again_once_another_peer_is_idle(cluster: Cluster) -> None:
    """With one idle peer a slow pair holds the node. Run again while no other peer is
    idle, the pair keeps it held and says nothing new; once another peer is idle, the node's
    health agent starts the pair's unit again (verify-pair.sh --retry), and that run pairs
    with the new peer only: a fast pair returns the node, the first peer named the
    suspect."""
    new, peer, other = cluster.computes
    first = new.node.path("/var/lib/fmctl/health/pair-first")
    install_unit(new, "fmctl-verify-pair.service")
    unit = "fmctl-verify-pair.service"

    def started() -> bool:
        """The stand-in systemd's record of a start (its /run is the node's own)."""
        return (
            new.node.run(["systemctl", "is-active", "--quiet", unit], env=SERVICE_ENV).returncode
            == 0
        )

    new.node.run(["systemctl", "stop", unit], env=SERVICE_ENV)
    cluster.slurm.scontrol("update", f"NodeName={other.name}", "State=DRAIN", "Reason=ops: busy")
    _figure(cluster, peer, SLOW)
    try:
        assert _pair(new, "--hold")[0] == 0
        code, said = _pair(new)
        assert code == 1 and "stays held until another peer is idle" in said, said
        assert first.read_text().strip() == f"{peer.name} {SLOW}"
        # No other idle peer: nothing to start, and a run again changes nothing.
        assert _pair(new, "--retry") == (0, "") and not started()
        assert _pair(new) == (1, "") and _held(cluster, new)

        cluster.slurm.scontrol("update", f"NodeName={other.name}", "State=RESUME")
        deadline = time.monotonic() + 30
        while _sinfo(cluster, other)[0] != "idle" and time.monotonic() < deadline:
            time.sleep(0.3)
        # The agent's run (no storage to check in this cluster's settings) starts the unit.
        bare = dataclasses.replace(_context(), fsx=None, local_nvme_path=None)
        new.node.write("/opt/fmctl/slurm/health.env", health_env(bare))
        agent = ["/bin/bash", "/opt/fmctl/slurm/lib/health-agent.sh"]
        done = new.node.run(agent, env=SERVICE_ENV)
        assert done.returncode == 0, done.stdout + done.stderr
        assert started(), new.node.path("/var/lib/fmctl/health/state").read_text()
        # What the unit runs: the pair with the new peer only.
        code, said = _pair(new)
        assert code == 0, said
        assert f"ok nccl-pair: {HEALTHY} GB/s with {other.name}" in said
        assert f"with {peer.name} {SLOW}: {peer.name} is the suspect" in said
        assert not _held(cluster, new) and not first.exists()
    finally:
        _figure(cluster, peer, None)
        new.node.write("/opt/fmctl/slurm/health.env", health_env(_context()))
        new.node.run(["systemctl", "stop", unit], env=SERVICE_ENV)
        if _held(cluster, new):
            cluster.slurm.scontrol("delete", f"ReservationName=fmctl-verify-{new.name}")
        first.unlink(missing_ok=True)
        if _sinfo(cluster, other)[0] != "idle":
            cluster.slurm.scontrol("update", f"NodeName={other.name}", "State=RESUME")


def test_the_pair_is_off_when_the_spec_says_so(cluster: Cluster) -> None:
    new = cluster.computes[0]
    env = new.node.path("/opt/fmctl/slurm/health.env")
    text = env.read_text()
    env.write_text(
        text.replace("FMCTL_HEALTH_VERIFY_NCCL_PAIR=true", "FMCTL_HEALTH_VERIFY_NCCL_PAIR=false")
    )
    try:
        assert _pair(new, "--hold") == (0, "")
        assert not _held(cluster, new)
    finally:
        env.write_text(text)


def test_the_pair_reads_a_real_all_reduce_perf_table(cluster: Cluster) -> None:
    """verify-pair.sh's reading of all_reduce_perf's table, on a recorded real run over EFA
    (2 x p5.48xlarge, tests/data/real/nccl-p5-2nodes-eks-blueprints.txt: 444.31 GB/s
    out-of-place at 2 GiB, its largest size), with the floor set at that size."""
    new = cluster.computes[0]
    env = new.node.path("/opt/fmctl/slurm/health.env")
    text = env.read_text()
    recording = (ROOT / "tests/data/real/nccl-p5-2nodes-eks-blueprints.txt").read_text()
    cluster.head.write(f"{FIGURES}/recorded", recording)
    env.write_text(text.replace("train:396:4294967296", "train:396:2147483648"))
    try:
        assert _pair(new, "--hold")[0] == 0
        code, said = _pair(new)
        assert code == 0, said
        assert "ok nccl-pair: 444.31 GB/s with" in said and "at 2147483648 B" in said
        assert not _held(cluster, new)
    finally:
        env.write_text(text)
        cluster.head.path(f"{FIGURES}/recorded").unlink()
