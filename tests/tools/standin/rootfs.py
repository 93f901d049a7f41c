"""The stand-in node's root filesystem: Debian 13 from its packages (mmdebstrap), laid out by
layout.sh as the ParallelCluster cookbook lays out its AMI. Built once per machine into a
cache folder keyed by what goes into it, and reused (read-only: each node is an overlay)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
SUITE = "trixie"  # Debian 13: Slurm 24.11, as ParallelCluster 3.1x ships the 24.11 series
MIRROR = "http://deb.debian.org/debian"
#: What the AMI has that Debian packages: Slurm's daemons and commands, munge, Python (for
#: topology.py and the stand-in tools), curl/tar/openssl (releases), rdma-core's verbs and EFA
#: provider (ibverbs-providers: /etc/libibverbs.d/efa.driver, libefa), systemd (units are
#: verified with systemd-analyze), util-linux (runuser, logger).
PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "munge",
    "python3",
    "curl",
    "ca-certificates",
    "openssl",
    "tar",
    "gzip",
    "gawk",
    "procps",
    "iproute2",
    "systemd",
    "util-linux",
    "bsdutils",
    "passwd",
    "libibverbs1",
    "ibverbs-providers",
)


def cache_root() -> Path:
    """Where built root filesystems live: $FMCTL_STANDIN_CACHE, else /var/cache/fmctl-standin."""
    return Path(os.environ.get("FMCTL_STANDIN_CACHE", "/var/cache/fmctl-standin"))


def required() -> Any:
    """The stand-in tests' marker: skipped (with the reason) where no stand-in node can run,
    never in CI, where `make tools` made one possible and a skip would hide the node tests."""
    import pytest

    why = unavailable()
    return pytest.mark.skipif(
        why is not None and not os.environ.get("CI"), reason=f"no stand-in node: {why}"
    )


def unavailable() -> str | None:
    """Why no stand-in node can run here, or None."""
    if os.geteuid() != 0:
        return "the stand-in node needs root (chroot, mounts); CI runs as root"
    if shutil.which("gcc") is None and not _built().exists():
        return "gcc is missing (it builds the stand-in's pyxis plugin)"
    if shutil.which("mmdebstrap") is None and not _built().exists():
        return "mmdebstrap is missing (make tools installs it)"
    for tool in ("unshare", "nsenter", "chroot", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    return None


def _key() -> str:
    digest = hashlib.sha256(f"{SUITE} {' '.join(PACKAGES)}".encode())
    for path in sorted(
        [HERE / "layout.sh", HERE / "spank_pyxis_standin.c", *(HERE / "bin").iterdir()]
    ):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _built() -> Path:
    return cache_root() / f"{SUITE}-{_key()}"


def ensure() -> Path:
    """The built root filesystem, building it first if this machine has none (about 40 s)."""
    target = _built()
    if (target / ".standin-complete").exists():
        return target
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test workers build it once
        if (target / ".standin-complete").exists():
            return target
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(
            [
                "mmdebstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                "--skip=check/empty",
                SUITE,
                str(partial),
                MIRROR,
            ],
            check=True,
            capture_output=True,
        )
        _build_pyxis(partial)
        shutil.copytree(HERE / "bin", partial / "tmp/standin-bin")
        shutil.copy(HERE / "layout.sh", partial / "tmp/standin-layout.sh")
        subprocess.run(
            ["chroot", str(partial), "/bin/bash", "/tmp/standin-layout.sh"],
            check=True,
            capture_output=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        shutil.rmtree(partial / "tmp/standin-bin")
        (partial / "tmp/standin-layout.sh").unlink()
        (partial / ".standin-complete").write_text(_key() + "\n")
        partial.rename(target)
    return target


def _build_pyxis(root: Path) -> None:
    """The pyxis stand-in, built on the host for the image's Slurm (plugin_version must be
    that Slurm's version number: the loader refuses another)."""
    version = subprocess.run(
        ["chroot", str(root), "/usr/sbin/slurmd", "-V"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    major, minor, micro = (int(x) for x in version.split(".")[:3])
    number = (major << 16) | (minor << 8) | micro
    out = root / "usr/local/lib/slurm/spank_pyxis.so"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O2",
            f"-DSLURM_VERSION_NUMBER={number:#x}",
            "-o",
            str(out),
            str(HERE / "spank_pyxis_standin.c"),
        ],
        check=True,
        capture_output=True,
    )
