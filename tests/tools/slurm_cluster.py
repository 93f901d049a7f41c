"""A real Slurm controller for tests: munged and slurmctld from Debian's packages, run as
root in a temporary directory on free ports, with the node and partition lines ParallelCluster
would write for the rendered queues and fmctl's own settings and topology.conf.

No slurmd is needed: nodes are State=CLOUD (powered down until resumed), which is how
ParallelCluster declares them; slurmctld still checks every job against their shape.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from provisioner.render.context import ClusterContext
from provisioner.render.slurm import cluster_slurm_settings, pcluster_node_lines, topology_conf

BINARIES = ("munged", "slurmctld", "sinfo", "sbatch", "scontrol")


def missing_binaries() -> list[str]:
    """Slurm/munge programs not on PATH (make tools installs them)."""
    return [b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]


def free_port() -> int:
    """A port no one listens on now (tests never take fixed ones)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    """A running controller; ``run`` executes Slurm commands against it."""

    folder: Path
    conf: Path
    processes: list[subprocess.Popen[bytes]]

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        return subprocess.run(
            list(args), capture_output=True, text=True, env=env, timeout=timeout, check=False
        )

    def log(self) -> str:
        path = self.folder / "slurmctld.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


def slurm_conf(
    c: ClusterContext,
    folder: Path,
    ports: tuple[int, int],
    extra: list[str] | None = None,
    gres_types: bool = True,
) -> str:
    """slurm.conf for the cluster's queues, as ParallelCluster would write it plus fmctl's."""
    nodes, _ = pcluster_node_lines(c)
    base = [
        "ClusterName=fmctl-test",
        f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={folder / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        "ProctrackType=proctrack/cgroup",  # as ParallelCluster sets it
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "SchedulerType=sched/backfill",
        "PrivateData=cloud",
        "ReturnToService=2",
        "SuspendProgram=/bin/true",
        "ResumeProgram=/bin/true",
        "SuspendTime=600",
        "ResumeTimeout=1800",
        "MpiDefault=none",
    ]
    if gres_types:
        base.append("GresTypes=gpu")
    base += [f"{k}={v}" for k, v in cluster_slurm_settings(c)]
    return "\n".join([*base, *(extra or []), *nodes]) + "\n"


def start(c: ClusterContext, gres_types: bool = True) -> SlurmCluster:
    """Start munged and slurmctld for ``c``; raises with slurmctld's log if it will not run."""
    # Every directory on munge's socket path must be world-executable: not under pytest's
    # private tmp folder.
    folder = Path(tempfile.mkdtemp(prefix="fmctl-slurm-", dir="/tmp"))
    folder.chmod(0o755)
    munge = folder / "munge"
    munge.mkdir(mode=0o755)
    keydir = folder / "key"
    keydir.mkdir(mode=0o700)
    key = keydir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    ports = (free_port(), free_port())
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(c, folder, ports, gres_types=gres_types))
    _, gres = pcluster_node_lines(c)
    (folder / "gres.conf").write_text("\n".join(gres) + "\n")
    if c.topology_aware:
        (folder / "topology.conf").write_text(topology_conf(c))
    processes = [
        subprocess.Popen(
            [
                "munged",
                "-F",
                "--force",
                f"--socket={munge / 'munge.socket'}",
                f"--key-file={key}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={folder / 'munged.log'}",
                f"--seed-file={keydir / 'munged.seed'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    cluster = SlurmCluster(folder, conf, processes)
    deadline = time.monotonic() + 10
    while not (munge / "munge.socket").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    processes.append(
        subprocess.Popen(
            ["slurmctld", "-D", "-i", "-f", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if processes[-1].poll() is not None:
            err = processes[-1].stderr.read().decode() if processes[-1].stderr else ""
            cluster.stop()
            raise RuntimeError(f"slurmctld exited: {err}\n{cluster.log()}")
        if "is UP" in cluster.run("scontrol", "ping").stdout:
            return cluster
        time.sleep(0.2)
    log = cluster.log()
    cluster.stop()
    raise RuntimeError(f"slurmctld did not come up:\n{log}")
