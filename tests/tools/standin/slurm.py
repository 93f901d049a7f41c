"""A Slurm cluster across stand-in nodes: the head node runs slurmctld, compute nodes
slurmd, each with its own munged and the cluster's key, configured as ParallelCluster
configures them.

slurm.conf follows the cookbook's templates/default/slurm/slurm.conf.erb line for line where
this machine allows (Prolog / Epilog globs over /opt/slurm/etc/scripts/{prolog,epilog}.d,
SchedulerParameters=nohold_on_prolog_fail, BatchStartTimeout=180, ReturnToService=1, the
two includes), plus fmctl's CustomSlurmSettings as ParallelCluster writes them into
pcluster/custom_slurm_settings_include_file_slurm.conf. Where it must differ it says so:
ports are free ones (not 6818/6820), and without a cgroup hierarchy of its own the
stand-in tracks processes with proctrack/linuxproc and binds no tasks (task/none); GPUs are
not declared as GRES (no /dev/nvidia* to point gres.conf at).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.tools.slurm_cluster import free_port
from tests.tools.standin.node import SSM_ENV, StandinNode


@dataclass(frozen=True)
class ComputeNode:
    """A compute node's Slurm name and shape, as ParallelCluster names static nodes."""

    node: StandinNode
    name: str
    partition: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    #: Its NodeAddr: an address of its own on the loopback network (127.0.0.0/8 all answers
    #: on lo), as each instance has its private IP; slurmd listens on every address.
    addr: str = "127.0.0.1"


def slurm_conf(
    head: StandinNode, ctld_port: int, settings: list[tuple[str, str]], pcluster: bool = True
) -> str:
    """slurm.conf as the cookbook writes it (see the module's docstring for the deviations);
    ``pcluster`` False leaves out ParallelCluster's Prolog and Epilog globs (a PCS cluster's
    are only what its slurmCustomSettings say)."""
    lines = [
        "ClusterName=fmctl-standin",
        f"SlurmctldHost={head.hostname}(127.0.0.1)",
        "SlurmUser=root",
        f"SlurmctldPort={ctld_port}",
        "AuthType=auth/munge",
        "StateSaveLocation=/var/spool/slurm.state",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SwitchType=switch/none",
        "SlurmctldPidFile=/var/run/slurmctld.pid",
        "SlurmdPidFile=/var/run/slurmd.pid",
        "ReconfigFlags=KeepPartState",
        "PrivateData=cloud",
        *(
            ["Prolog=/opt/slurm/etc/scripts/prolog.d/*", "Epilog=/opt/slurm/etc/scripts/epilog.d/*"]
            if pcluster
            else []
        ),
        "SchedulerParameters=nohold_on_prolog_fail",
        "BatchStartTimeout=180",
        "SlurmctldTimeout=300",
        "SlurmdTimeout=180",
        "InactiveLimit=0",
        "MinJobAge=300",
        "KillWait=30",
        "Waittime=0",
        "MessageTimeout=60",
        "EnforcePartLimits=ALL",
        "SchedulerType=sched/backfill",
        "ProctrackType=proctrack/linuxproc",  # the cookbook: proctrack/cgroup
        "MpiDefault=none",
        "ReturnToService=1",
        "TaskPlugin=task/none",  # the cookbook: task/affinity,task/cgroup
        "SelectType=select/cons_tres",
        "SlurmctldLogFile=/var/log/slurmctld.log",
        "SlurmdLogFile=/var/log/slurmd.log",
        "SlurmdDebug=info",
        "JobCompType=jobcomp/none",
        # The p5 shape is configured; this machine has 2 cores: slurmd takes the config's.
        "SlurmdParameters=config_overrides",
        "include slurm_parallelcluster.conf",
        "include pcluster/custom_slurm_settings_include_file_slurm.conf",
    ]
    return "\n".join(lines) + "\n"


def nodes_conf(
    computes: list[ComputeNode],
    ports: dict[str, int],
    declared: Sequence[tuple[str, str]] = (),
) -> str:
    """slurm_parallelcluster.conf: the nodes and partitions (ParallelCluster writes these).
    ``declared``: (hostlist, partition) of nodes slurmctld knows but no slurmd serves, as a
    queue's nodes are before their instances boot; one named in ``ports`` gets that port,
    for the slurmd that will serve it later."""
    lines = []
    parts: dict[str, list[str]] = {}
    for hostlist, partition in declared:
        port = f" Port={ports[hostlist]}" if hostlist in ports else ""
        lines.append(f"NodeName={hostlist} NodeAddr=127.0.0.1{port} CPUs=1 State=UNKNOWN")
        parts.setdefault(partition, []).append(hostlist)
    for c in computes:
        lines.append(
            f"NodeName={c.name} NodeAddr={c.addr} NodeHostname={c.node.hostname} "
            f"Port={ports[c.name]} Sockets={c.sockets} CoresPerSocket={c.cores_per_socket} "
            f"ThreadsPerCore={c.threads_per_core} State=UNKNOWN"
        )
        parts.setdefault(c.partition, []).append(c.name)
    for name, members in parts.items():
        lines.append(f"PartitionName={name} Nodes={','.join(members)} Default=YES State=UP")
    return "\n".join(lines) + "\n"


class StandinSlurm:
    """munged everywhere, slurmctld on the head node, slurmd on each compute node."""

    def __init__(
        self,
        head: StandinNode,
        computes: list[ComputeNode],
        settings: list[tuple[str, str]],
        declared: Sequence[tuple[str, str]] = (),
        declared_ports: Mapping[str, int] | None = None,
        pcluster: bool = True,
    ) -> None:
        self.head, self.computes = head, computes
        ctld_port = free_port()
        ports = {c.name: free_port() for c in computes} | dict(declared_ports or {})
        key = os.urandom(1024)
        conf = slurm_conf(head, ctld_port, settings, pcluster)
        # pcluster_custom_slurm_settings_include_file_generator.py starts the file with its
        # header, settings or none (an empty include makes every Slurm command say so on
        # stderr, which clustermgtd reads with the output).
        include = "# This file is automatically generated by pcluster\n" + "".join(
            f"{k}={v}\n" for k, v in settings
        )
        # /opt/slurm is the head node's, shared with the compute nodes (StandinNode).
        head.write("/opt/slurm/etc/slurm.conf", conf)
        head.write(
            "/opt/slurm/etc/slurm_parallelcluster.conf", nodes_conf(computes, ports, declared)
        )
        head.write("/opt/slurm/etc/pcluster/custom_slurm_settings_include_file_slurm.conf", include)
        # No cgroup hierarchy of the node's own here (ParallelCluster's cgroup.conf
        # constrains cores and devices through it).
        head.write("/opt/slurm/etc/cgroup.conf", "CgroupPlugin=disabled\n")
        self._key = key
        for node in [head, *(c.node for c in computes)]:
            self._munge(node)
        for node in [head, *(c.node for c in computes)]:
            self._wait(node, "/run/munge/munge.socket.2")
        head.daemon(["/opt/slurm/sbin/slurmctld", "-D", "-i"])
        self._wait_cmd(head, ["/opt/slurm/bin/scontrol", "ping"], "UP")

    def _munge(self, node: StandinNode) -> None:
        node.write("/etc/munge/munge.key", "", 0o400)
        node.path("/etc/munge/munge.key").write_bytes(self._key)
        node.run(["chown", "munge:munge", "/etc/munge/munge.key"], env=SSM_ENV)
        for d in ("/var/spool/slurm.state", "/var/spool/slurmd"):
            node.path(d).mkdir(parents=True, exist_ok=True)
        node.run(["install", "-d", "-o", "munge", "-g", "munge", "/run/munge"], env=SSM_ENV)
        node.daemon(["/usr/sbin/runuser", "-u", "munge", "--", "/usr/sbin/munged", "-F"])

    def join(self, node: StandinNode) -> None:
        """A node that boots later (a replacement instance): the cluster's munge key and
        munged, as its bootstrap configures them, before its slurmd starts."""
        self._munge(node)
        self._wait(node, "/run/munge/munge.socket.2")

    def start_slurmd(self, names: Sequence[str] | None = None) -> None:
        """slurmd on every compute node (``names``: on those only; ParallelCluster starts it
        once the node is configured), then wait for the nodes to register idle."""
        chosen = [c for c in self.computes if names is None or c.name in names]
        for c in chosen:
            c.node.daemon(["/opt/slurm/sbin/slurmd", "-D", "-N", c.name])
        for c in chosen:
            self.wait_state(c.name, ("IDLE",), timeout=30)

    def scontrol(self, *args: str) -> str:
        """scontrol on the head node (its full path: Slurm's bin is not on PATH)."""
        return self.head.run(["/opt/slurm/bin/scontrol", *args], env=SSM_ENV).stdout

    def node_state(self, name: str) -> str:
        """The node's State= from `scontrol show node`."""
        for word in self.scontrol("show", "node", name, "-o").split():
            if word.startswith("State="):
                return word[len("State=") :]
        return ""

    def wait_state(self, name: str, wanted: tuple[str, ...], timeout: float = 60) -> str:
        """Wait until the node's state starts with one of ``wanted``; return it."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.node_state(name)
            if state.startswith(wanted):
                return state
            time.sleep(0.3)
        raise AssertionError(f"{name} stayed {state!r}, not {wanted}; slurmctld log:\n{self.log()}")

    def log(self) -> str:
        """slurmctld's log (and each slurmd's)."""
        text = self.head.path("/var/log/slurmctld.log")
        parts = [text.read_text() if text.exists() else ""]
        for c in self.computes:
            log = c.node.path("/var/log/slurmd.log")
            parts.append(log.read_text() if log.exists() else "")
        return "\n".join(p[-4000:] for p in parts)

    @staticmethod
    def _wait(node: StandinNode, inside: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.run(["test", "-e", inside], env=SSM_ENV).returncode == 0:
                return
            time.sleep(0.05)
        raise AssertionError(f"{inside} never appeared on {node.hostname}")

    @staticmethod
    def _wait_cmd(node: StandinNode, argv: list[str], text: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            out = node.run(argv, env=SSM_ENV).stdout
            if text in out:
                return
            time.sleep(0.2)
        raise AssertionError(f"{argv} never said {text!r}: {out}")


@dataclass
class LoginCluster:
    """A cluster shaped as PCS's: a login node running slurmctld and the `slurm/` tree
    fmctl uploads (at /opt/fmctl/slurm), and compute nodes ``POOL-1..N`` of one partition."""

    login: StandinNode
    computes: list[ComputeNode]
    slurm: StandinSlurm


@contextlib.contextmanager
def login_cluster(image: Path, pool: str, subnet: int, nodes: int = 2) -> Iterator[LoginCluster]:
    """Start the login node ``ip-10-0-0-SUBNET`` and ``nodes`` compute nodes
    ``ip-10-0-SUBNET-N`` (each at 127.0.SUBNET.N), with ParallelCluster's prolog and epilog
    folders (PrologFlags=Alloc), slurmd running on each; stop them all at the end."""
    from tests.conftest import ROOT

    login = StandinNode(image, f"ip-10-0-0-{subnet}")
    members = [
        StandinNode(
            image, f"ip-10-0-{subnet}-{subnet + i}", shared_from=login, shares=("opt/slurm",)
        )
        for i in range(1, nodes + 1)
    ]
    try:
        shutil.copytree(ROOT / "slurm", login.path("/opt/fmctl/slurm"), dirs_exist_ok=True)
        for kind in ("prolog.d", "epilog.d"):
            shutil.copytree(
                ROOT / "slurm" / kind,
                login.path(f"/opt/slurm/etc/scripts/{kind}"),
                dirs_exist_ok=True,
            )
        computes = [
            ComputeNode(node, f"{pool}-{i}", pool, 1, 2, 1, addr=f"127.0.{subnet}.{subnet + i}")
            for i, node in enumerate(members, 1)
        ]
        slurm = StandinSlurm(login, computes, [("PrologFlags", "Alloc")])
        slurm.start_slurmd()
        yield LoginCluster(login, computes, slurm)
    finally:
        login.stop()
        for node in members:
            node.stop()
