"""`fmctl check`'s NCCL step on a cluster shaped as PCS's: the login node and the compute
nodes share no /home (PCS exports none; ParallelCluster NFS-exports the head node's), only
the file system the spec mounts on all of them (FSx, here a folder the nodes share). The NCCL
job's log is written by its first node: under /home the login node never sees it ("no
log" for every PCS check before); under the FSx folder fmctl names, it comes back.

Slurm here is the stand-in's real slurmctld and slurmd; /opt/slurm is shared so that every
node reads the same slurm.conf (PCS runs configless, its nodes fetch it from the controller:
the stand-in's stand-in for that, not a folder the check may write to).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import ROOT
from tests.tools.standin import rootfs
from tests.tools.standin.node import SSM_ENV, StandinNode
from tests.tools.standin.slurm import ComputeNode, StandinSlurm

pytestmark = rootfs.required()
POOL = "train"
#: What the NCCL job prints, in all_reduce_perf's summary form (recorded in tests/data).
JOB = """#!/bin/bash
echo "# Out of bounds values : 0 OK"
echo "# Avg bus bandwidth    : 401.25 "
echo "ran on $(hostname)"
"""


@dataclass
class Cluster:
    login: StandinNode
    computes: list[ComputeNode]
    slurm: StandinSlurm


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    image = rootfs.ensure()
    login = StandinNode(image, "ip-10-0-0-20")
    nodes = [
        StandinNode(image, f"ip-10-0-16-{i}", shared_from=login, shares=("opt/slurm", "fsx"))
        for i in (31, 32)
    ]
    try:
        shutil.copytree(ROOT / "slurm", login.path("/opt/fmctl/slurm"), dirs_exist_ok=True)
        # The cluster's Prolog and Epilog globs name fmctl's drop-ins (on a node without
        # fmctl's node.env they exit 0); an empty glob would fail every job's prolog.
        for kind in ("prolog.d", "epilog.d"):
            shutil.copytree(
                ROOT / "slurm" / kind,
                login.path(f"/opt/slurm/etc/scripts/{kind}"),
                dirs_exist_ok=True,
            )
        login.write("/opt/fmctl/nccl-job.sh", JOB, 0o755)
        computes = [
            ComputeNode(node, f"train-{i}", POOL, 1, 2, 1, addr=f"127.0.16.{30 + i}")
            for i, node in enumerate(nodes, 1)
        ]
        # An include file of one setting (slurmctld refuses an empty one).
        slurm = StandinSlurm(login, computes, [("PrologFlags", "Alloc")])
        slurm.start_slurmd()
        yield Cluster(login, computes, slurm)
    finally:
        login.stop()
        for node in nodes:
            node.stop()


def _nccl(cluster: Cluster, shared: str) -> str:
    hosts = ",".join(c.name for c in cluster.computes)
    done = cluster.login.run(
        [
            "/bin/bash",
            "/opt/fmctl/slurm/lib/cluster-check.sh",
            "nccl",
            "--timeout",
            "60",
            "--shared",
            shared,
            f"{POOL}:0:2:{hosts}",
        ],
        env={**SSM_ENV, "FMCTL_NCCL_JOB": "/opt/fmctl/nccl-job.sh"},
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr + cluster.slurm.log()
    return done.stdout


def test_the_nccl_log_comes_back_through_the_shared_file_system(cluster: Cluster) -> None:
    out = _nccl(cluster, "/fsx/.fmctl-check")
    assert "==> fmctl-check-nccl train <==" in out
    assert "Avg bus bandwidth    : 401.25" in out, out
    assert "ran on ip-10-0-16-31" in out  # the job's first node wrote it
    assert list(cluster.login.path("/fsx/.fmctl-check").iterdir()) == []  # taken, not left


def test_under_home_the_login_node_never_sees_it(cluster: Cluster) -> None:
    """What every PCS check said before: /home is the node's own on each of them."""
    out = _nccl(cluster, "/home/fmctl-check")
    assert "error: the NCCL job left no log" in out and "Avg bus bandwidth" not in out, out
