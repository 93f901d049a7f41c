"""block-end.sh on a cluster shaped as PCS's (a login node, two compute nodes of pool `block`,
Slurm's real slurmctld and slurmd in the stand-in), run as SSM Run Command runs it at T-60,
and at T-40 as the very text Run Command is sent: the partition's nodes reserved for
maintenance until the block's end, a running job asked once to checkpoint (its trap hears
SIGUSR1) and left running, a job submitted after it held back, and the second run changing
nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from provisioner.resources.block_ends import Block, command
from tests.tools.standin import rootfs
from tests.tools.standin.node import SSM_ENV
from tests.tools.standin.slurm import LoginCluster, login_cluster

pytestmark = rootfs.required()
POOL = "block"
SCRIPT = "/opt/fmctl/slurm/lib/block-end.sh"
#: A job that checkpoints on SIGUSR1 as a training loop would: its trap writes a line.
#: It says when it listens (/opt/slurm/listening-JOBID): Slurm shows the job RUNNING before
#: the batch shell has reached its trap, and a USR1 that comes earlier ends the shell.
CHECKPOINTING = (
    "trap 'echo checkpoint >>/opt/slurm/ckpt-$SLURM_JOB_ID' USR1; "
    "touch /opt/slurm/listening-$SLURM_JOB_ID; while :; do sleep 1; done"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LoginCluster]:
    with login_cluster(rootfs.ensure(), POOL, 19) as made:
        yield made


def _run(cluster: LoginCluster, *args: str) -> tuple[int, str]:
    done = cluster.login.run(["/bin/bash", SCRIPT, *args], env=SSM_ENV, timeout=60)
    return done.returncode, done.stdout + done.stderr


def _sbatch(cluster: LoginCluster, *args: str) -> str:
    done = cluster.login.run(
        ["/opt/slurm/bin/sbatch", "--parsable", f"--partition={POOL}", *args], env=SSM_ENV
    )
    assert done.returncode == 0, done.stdout + done.stderr + cluster.slurm.log()
    return done.stdout.strip().split(";")[0]


def _field(text: str, key: str) -> str:
    return next((w.split("=", 1)[1] for w in text.split() if w.startswith(f"{key}=")), "")


def _wait(what: str, check: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen in {timeout:.0f}s")


def _checkpointing_job(cluster: LoginCluster) -> str:
    """A running job of the pool, listening for its checkpoint signal."""
    job = _sbatch(cluster, "--nodes=1", "--output=/dev/null", f"--wrap={CHECKPOINTING}")
    _wait(
        f"job {job} running",
        lambda: _field(cluster.slurm.scontrol("show", "job", job, "-o"), "JobState") == "RUNNING",
    )
    _wait(f"job {job} listening", cluster.login.path(f"/opt/slurm/listening-{job}").exists)
    return job


def test_the_block_winds_down_once(cluster: LoginCluster) -> None:
    job = _checkpointing_job(cluster)
    ckpt = cluster.login.path(f"/opt/slurm/ckpt-{job}")
    end = int(time.time()) + 55 * 60  # T-55: the block has 55 minutes left
    try:
        code, out = _run(cluster, POOL, str(end), "--block", "cr-0123456789abcdef0")
        assert code == 0, out + cluster.slurm.log()
        lines = out.strip().splitlines()
        assert lines[0] == f"reserved fmctl-block-{POOL} {POOL} 55", out
        assert f"signalled {job} USR1" in lines and lines[-1] == "done", out

        # Slurm's reservation: every node of the partition, maintenance, to the block's end.
        res = cluster.slurm.scontrol("show", "reservation", f"fmctl-block-{POOL}", "-o")
        assert _field(res, "Nodes") == "block-[1-2]", res
        assert {"MAINT", "IGNORE_JOBS"} <= set(_field(res, "Flags").split(",")), res
        assert _field(res, "PartitionName") == POOL, res
        assert _field(res, "Duration") in ("00:55:00", "00:54:00"), res  # to the block's end

        # The job heard the signal through its trap, and runs on.
        _wait("the job's checkpoint", ckpt.exists)
        assert ckpt.read_text().strip() == "checkpoint"
        state = cluster.slurm.scontrol("show", "job", job, "-o")
        assert _field(state, "JobState") == "RUNNING", state

        # A job submitted now does not start on the block's nodes: Slurm holds it back.
        late = _sbatch(cluster, "--nodes=1", "--time=5", "--output=/dev/null", "--wrap=true")
        time.sleep(3)
        shown = cluster.slurm.scontrol("show", "job", late, "-o")
        assert _field(shown, "JobState") == "PENDING", shown
        assert _field(shown, "Reason") == "ReqNodeNotAvail,_Reserved_for_maintenance", shown
        cluster.login.run(["/opt/slurm/bin/scancel", late], env=SSM_ENV)

        # T-40: the warning's run finds the work done and asks nobody to checkpoint again.
        # It runs the very text Run Command is sent (block_ends.command: the scripts without
        # their comments, written to a scratch folder, and the block's line of the table), as
        # Run Command runs it: bash, as root, with no profile read.
        block = Block(POOL, "cr-0123456789abcdef0", "USR1")
        sent = command((block,), {block.reservation_id: float(end)}, block.reservation_id)
        done = cluster.login.run(["/bin/bash", "-c", sent], env=SSM_ENV, timeout=60)
        out = done.stdout + done.stderr
        assert done.returncode == 0 and out.split() == ["held", f"fmctl-block-{POOL}", "done"], out
        time.sleep(2)
        assert ckpt.read_text().strip() == "checkpoint", "signalled twice"
    finally:
        cluster.login.run(["/opt/slurm/bin/scancel", job], env=SSM_ENV)
        cluster.slurm.scontrol("delete", f"ReservationName=fmctl-block-{POOL}")


def test_no_signal_when_told_none(cluster: LoginCluster) -> None:
    job = _checkpointing_job(cluster)
    try:
        end = int(time.time()) + 30
        code, out = _run(cluster, POOL, str(end), "--block", "cr-1", "--signal", "none")
        # Half a minute left rounds up to a minute: a reservation is never empty.
        assert code == 0 and out.split() == ["reserved", f"fmctl-block-{POOL}", POOL, "1", "done"]
        time.sleep(2)
        assert not cluster.login.path(f"/opt/slurm/ckpt-{job}").exists()
        state = cluster.slurm.scontrol("show", "job", job, "-o")
        assert _field(state, "JobState") == "RUNNING", state
    finally:
        cluster.login.run(["/opt/slurm/bin/scancel", job], env=SSM_ENV)
        cluster.slurm.scontrol("delete", f"ReservationName=fmctl-block-{POOL}")


def test_bad_arguments_are_said(cluster: LoginCluster) -> None:
    code, out = _run(cluster, POOL, "soon", "--block", "cr-1")
    assert code == 2 and "usage: block-end.sh" in out
    code, out = _run(cluster, POOL, "1800000000")
    assert code == 2 and "usage: block-end.sh" in out
