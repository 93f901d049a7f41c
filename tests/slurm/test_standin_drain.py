"""drain-nodes.sh on a cluster shaped as PCS's (a login node, two compute nodes of pool
`train`, Slurm's real slurmctld and slurmd in the stand-in), run as SSM Run Command runs it:
the nodes a change takes away are drained, their jobs waited for (a timeout says which still
run) or requeued, and a drained node takes no new job."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.tools.standin import rootfs
from tests.tools.standin.node import SSM_ENV
from tests.tools.standin.slurm import LoginCluster, login_cluster

pytestmark = rootfs.required()
POOL = "train"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LoginCluster]:
    with login_cluster(rootfs.ensure(), POOL, 17) as made:
        yield made


def _run(cluster: LoginCluster, *args: str, timeout: float = 120) -> tuple[int, str]:
    done = cluster.login.run(
        ["/bin/bash", "/opt/fmctl/slurm/lib/drain-nodes.sh", *args],
        env=SSM_ENV,
        timeout=timeout,
    )
    return done.returncode, done.stdout + done.stderr


def _submit(cluster: LoginCluster, node: str, seconds: int) -> str:
    done = cluster.login.run(
        [
            "/opt/slurm/bin/sbatch",
            "--parsable",
            "--requeue",
            f"--partition={POOL}",
            f"--nodelist={node}",
            "--output=/dev/null",
            f"--wrap=sleep {seconds}",
        ],
        env=SSM_ENV,
    )
    assert done.returncode == 0, done.stdout + done.stderr + cluster.slurm.log()
    return done.stdout.strip().split(";")[0]


def _job_state(cluster: LoginCluster, job: str) -> str:
    out = cluster.slurm.scontrol("show", "job", job, "-o")
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "")


def _wait_job(cluster: LoginCluster, job: str, wanted: tuple[str, ...], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = _job_state(cluster, job)
        if state in wanted:
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {job} stayed {state}; {cluster.slurm.log()}")


def _resume(cluster: LoginCluster, *nodes: str) -> None:
    for node in nodes:
        cluster.slurm.scontrol("update", f"NodeName={node}", "State=RESUME")
        cluster.slurm.wait_state(node, ("IDLE", "ALLOCATED", "MIXED"))


def test_a_job_is_waited_for_and_the_timeout_names_it(cluster: LoginCluster) -> None:
    job = _submit(cluster, "train-2", 300)
    _wait_job(cluster, job, ("RUNNING",))
    try:
        code, out = _run(cluster, "train-2", "--timeout", "3", "--reason", "fmctl: test")
        assert code == 3, out
        assert "drained train-2" in out and f"running {job} root wrap" in out, out
        # Drained, not ended: the job goes on, and no new one lands there.
        assert _job_state(cluster, job) == "RUNNING"
        assert cluster.slurm.node_state("train-2").startswith(("MIXED+DRAIN", "ALLOCATED+DRAIN"))
        reason = cluster.slurm.scontrol("show", "node", "train-2", "-o")
        assert "Reason=fmctl: test" in reason
    finally:
        cluster.login.run(["/opt/slurm/bin/scancel", job], env=SSM_ENV)
        _wait_job(cluster, job, ("CANCELLED", "COMPLETED"))
        _resume(cluster, "train-2")
    # Nothing runs there now: drained at once.
    code, out = _run(cluster, "train-2", "--timeout", "30")
    assert code == 0 and out.strip().splitlines()[-1] == "done", out
    _resume(cluster, "train-2")


def test_requeue_puts_the_job_back_and_it_starts_elsewhere(cluster: LoginCluster) -> None:
    job = cluster.login.run(
        [
            "/opt/slurm/bin/sbatch",
            "--parsable",
            "--requeue",
            f"--partition={POOL}",
            "--exclude=train-2",
            "--output=/dev/null",
            "--wrap=sleep 300",
        ],
        env=SSM_ENV,
    ).stdout.strip()
    _wait_job(cluster, job, ("RUNNING",))
    try:
        code, out = _run(cluster, "train-1", "--timeout", "60", "--jobs", "requeue")
        assert code == 0, out + cluster.slurm.log()
        assert f"requeued {job}" in out and out.strip().splitlines()[-1] == "done", out
        # Back in the queue (it asked not to run on train-2, and train-1 is drained).
        assert _job_state(cluster, job) in ("PENDING", "REQUEUED", "CONFIGURING")
    finally:
        cluster.login.run(["/opt/slurm/bin/scancel", job], env=SSM_ENV)
        _resume(cluster, "train-1")


def test_bad_arguments_are_said(cluster: LoginCluster) -> None:
    code, out = _run(cluster, "train-1")
    assert code == 2 and "usage: drain-nodes.sh" in out
    code, out = _run(cluster, "train-1", "--timeout", "5", "--jobs", "kill")
    assert code == 2 and "usage: drain-nodes.sh" in out
