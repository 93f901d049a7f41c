"""A stand-in node: the cached root filesystem under an overlay of its own, in a mount and
PID namespace of its own (its daemons die with it), entered with chroot and an environment
that is exactly the one the real node gives the code (``env -i``).

The network namespace is the machine's: nodes reach each other, and the tests' loopback
servers, on 127.0.0.1 at ports the tests choose free.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The environment ParallelCluster's custom actions run in: cloud-init starts cinc-client as
#: root without a login shell, and the cookbook's custom_action_executor.py passes its own
#: environment on; chef-utils' default_paths gives PATH the system directories plus cinc's
#: embedded ruby. No /opt/slurm/bin: that comes only from /etc/profile.d/slurm.sh.
CLOUD_INIT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/cinc/embedded/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
#: SSM Run Command (AWS-RunShellScript): the agent, a systemd service, runs the commands with
#: /bin/sh and its own environment: systemd's default PATH, no profile read.
SSM_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}


class StandinNode:
    """One node; ``run`` executes a command inside it as the node would."""

    def __init__(
        self,
        rootfs: Path,
        hostname: str,
        shared_from: StandinNode | None = None,
        shares: tuple[str, ...] = ("opt/slurm", "home"),
    ) -> None:
        """``shared_from``: the head node whose ``shares`` this node mounts: by default
        /opt/slurm and /home, as ParallelCluster's compute nodes mount them over NFS from the
        head node (the cookbook's shared directories): the same slurm.conf, topology.conf,
        prolog.d and home folders. A PCS cluster shares no /home: its nodes share what the
        spec mounts on all of them (FSx)."""
        self.hostname = hostname
        self._binds: list[Path] = []
        self.scratch = Path(tempfile.mkdtemp(prefix=f"fmctl-standin-{hostname}-", dir="/tmp"))
        self.root = self.scratch / "root"
        for sub in ("upper", "work", "root"):
            (self.scratch / sub).mkdir()
        subprocess.run(
            [
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                f"lowerdir={rootfs},upperdir={self.scratch / 'upper'},"
                f"workdir={self.scratch / 'work'}",
                str(self.root),
            ],
            check=True,
        )
        if shared_from is not None:
            for inside in shares:
                (shared_from.root / inside).mkdir(parents=True, exist_ok=True)
                target = self.root / inside
                target.mkdir(parents=True, exist_ok=True)
                subprocess.run(
                    ["mount", "--bind", str(shared_from.root / inside), str(target)], check=True
                )
                self._binds.append(target)
        (self.root / "etc/hostname").write_text(hostname + "\n")
        hosts = (self.root / "etc/hosts").read_text() if (self.root / "etc/hosts").exists() else ""
        (self.root / "etc/hosts").write_text(f"127.0.0.1 localhost\n{hosts}")
        r = self.root
        setup = (
            f"mount --bind /dev {r}/dev && mount -t tmpfs -o mode=1777 tmpfs {r}/dev/shm"
            f" && mount -t tmpfs -o mode=755 tmpfs {r}/run"
            f" && mount -t tmpfs -o mode=1777 tmpfs {r}/tmp && mount -t sysfs sysfs {r}/sys"
            f" && hostname {hostname} && echo ready && exec sleep infinity"
        )
        # A UTS namespace too: `hostname -s` on the node answers the node's name.
        self._holder = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--uts",
                "--pid",
                "--fork",
                f"--mount-proc={r}/proc",
                "/bin/sh",
                "-c",
                setup,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._holder.stdout is not None
        if self._holder.stdout.readline().strip() != "ready":
            raise RuntimeError(f"stand-in node {hostname} did not start")
        self.pid = self._init_pid()

    def _init_pid(self) -> int:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            children = Path(f"/proc/{self._holder.pid}/task/{self._holder.pid}/children")
            text = children.read_text().split() if children.exists() else []
            if text:
                return int(text[0])
            time.sleep(0.02)
        raise RuntimeError("no init process in the stand-in node")

    def _argv(self, argv: Sequence[str], env: Mapping[str, str], user: str | None) -> list[str]:
        inner = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        if user is not None:
            inner = ["/usr/sbin/runuser", "-u", user, "--", *inner]
        return [
            "nsenter",
            "-t",
            str(self.pid),
            "-m",
            "-u",
            "-p",
            "--",
            "chroot",
            str(self.root),
            *inner,
        ]

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] = CLOUD_INIT_ENV,
        user: str | None = None,
        stdin: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the node with exactly ``env`` (as root, or as ``user``)."""
        return subprocess.run(
            self._argv(argv, env, user),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def daemon(
        self, argv: Sequence[str], env: Mapping[str, str] = SSM_ENV
    ) -> subprocess.Popen[bytes]:
        """Start a long-running process on the node (it ends with the node)."""
        return subprocess.Popen(
            self._argv(argv, env, None), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def entry(self, script: Path, program: str, env: Mapping[str, str] = SSM_ENV) -> None:
        """A script of this machine's at ``script`` that runs ``program`` on the node with its
        own arguments (as a caller elsewhere reaches the node's commands); nsenter and chroot
        by their full paths, for a caller whose PATH lacks them (Run Command's)."""
        argv = self._argv([program], env, None)
        argv = [shutil.which(a) or a if a in ("nsenter", "chroot") else a for a in argv]
        line = " ".join(f"'{a}'" for a in argv)
        script.write_text(f'#!/bin/sh\nexec {line} "$@"\n')
        script.chmod(0o755)

    def path(self, inside: str) -> Path:
        """The host's path of a file on the node (not for /run, /tmp, /dev/shm: the node's own)."""
        return self.root / inside.lstrip("/")

    def write(self, inside: str, text: str, mode: int = 0o644) -> None:
        """Put a file on the node."""
        path = self.path(inside)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)

    def stop(self) -> None:
        """End every process of the node and remove its overlay."""
        subprocess.run(["kill", "-KILL", str(self.pid)], check=False, capture_output=True)
        try:
            self._holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._holder.kill()
        for target in reversed(self._binds):
            subprocess.run(["umount", "-l", str(target)], check=False, capture_output=True)
        for _ in range(50):
            if subprocess.run(["umount", str(self.root)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        shutil.rmtree(self.scratch, ignore_errors=True)
