"""A stand-in of NVIDIA's CUDA network repository for the stand-in node's OS, laid out as the
real one is so that the node's own apt installs from it through the release mirror:

- a flat repository (``deb URL /``) at ``developer.download.nvidia.com/compute/cuda/repos/
  <distro>/<arch>/`` (CUDA's Linux installation guide, network repository), with ``Packages``
  and a ``Release`` whose ``InRelease`` is signed: apt refuses an unsigned or mis-signed one,
  so a key or source set up wrong fails the test;
- ``cuda-keyring_1.1-1_all.deb``, the package the guide has users install first: the
  repository's key in ``/usr/share/keyrings/cuda-archive-keyring.gpg`` and its source in
  ``/etc/apt/sources.list.d/cuda-<distro>-<arch>.list``, ``signed-by`` that key;
- ``datacenter-gpu-manager-exporter``: what NVIDIA's exporter package installs (its release
  tooling, NVIDIA/dcgm-exporter Makefile ``package-build`` at d5e5f51: ``/usr/bin/dcgm-exporter``,
  ``/etc/dcgm-exporter/``, ``/lib/systemd/system/nvidia-dcgm-exporter.service``), versioned as
  the exporter (NVIDIA's "Install DCGM Exporter": package versions are the exporter's), its
  binary a stand-in that answers ``--version`` with the DCGM and exporter versions it pairs
  (``<dcgm>-<exporter>``, the Makefile's BuildVersion) and otherwise runs until stopped.

The key is made per test session (gpg, no passphrase) and signs nothing else. What is left
out: the exporter package's dependency on DCGM 4's packages (the stand-in node's DCGM is not a
dpkg package), and every other package of the repository.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from email.utils import formatdate
from pathlib import Path

#: NVIDIA/dcgm-exporter hack/VERSION at d5e5f51: the exporter release and its DCGM.
EXPORTER_VERSION = "4.8.2"
PAIRED_DCGM = "4.5.3"
HOST = "developer.download.nvidia.com"

#: nvidia-dcgm-exporter.service as NVIDIA's package ships it (packaging/config-files/systemd).
_UNIT = """[Unit]
Description=NVIDIA DCGM-exporter service
Wants=nvidia-dcgm.service
After=nvidia-dcgm.service

[Service]
User=root
PrivateTmp=false
StandardOutput=append:/var/log/dcgm-exporter.log
StandardError=append:/var/log/dcgm-exporter.log
ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv
Restart=on-abort

[Install]
WantedBy=multi-user.target
"""


def repository_path(distro: str, arch: str) -> str:
    """The repository's path under the mirror (the upstream URL without ``https://``)."""
    return f"{HOST}/compute/cuda/repos/{distro}/{arch}"


def _deb(root: Path, out: Path, control: dict[str, str], files: dict[str, tuple[str, int]]) -> None:
    """Build a .deb with dpkg-deb from ``files`` (path -> (text, mode))."""
    for path, (text, mode) in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)
    (root / "DEBIAN").mkdir(parents=True, exist_ok=True)
    fields = {"Maintainer": "fmctl stand-in <standin@fmctl.invalid>", **control}
    (root / "DEBIAN/control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)],
        check=True,
        capture_output=True,
    )


def _packages(folder: Path) -> str:
    """The flat repository's Packages index: each .deb's control fields with its Filename
    (relative to the repository), Size and SHA256, as apt reads them."""
    stanzas = []
    for deb in sorted(folder.glob("*.deb")):
        control = subprocess.run(
            ["dpkg-deb", "--field", str(deb)], check=True, capture_output=True, text=True
        ).stdout.strip()
        blob = deb.read_bytes()
        stanzas.append(
            f"{control}\nFilename: ./{deb.name}\nSize: {len(blob)}\n"
            f"SHA256: {hashlib.sha256(blob).hexdigest()}\n"
        )
    return "\n".join(stanzas)


def build(mirror: Path, distro: str, arch: str, dpkg_arch: str) -> Path:
    """Lay the repository out under ``mirror`` for ``distro``/``arch`` (packages built for
    ``dpkg_arch``); returns its folder."""
    folder = mirror / repository_path(distro, arch)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        gnupg = Path(tmp) / "gnupg"
        gnupg.mkdir(mode=0o700)
        env = {**os.environ, "GNUPGHOME": str(gnupg)}
        gpg = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
        try:
            subprocess.run(
                [*gpg, "--quick-gen-key", "fmctl stand-in of NVIDIA's CUDA repository",
                 "rsa3072", "sign", "never"],
                check=True, capture_output=True, env=env,
            )  # fmt: skip
            key = subprocess.run(
                ["gpg", "--batch", "--export"], check=True, capture_output=True, env=env
            ).stdout
            keyring = Path(tmp) / "cuda-archive-keyring.gpg"
            keyring.write_bytes(key)
            source = (
                "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
                f"https://{repository_path(distro, arch)}/ /\n"
            )
            # The keyring's bytes are binary: copied in after the text files.
            _keyring_deb(Path(tmp) / "keyring", folder, keyring, distro, arch, source)
            exporter = (
                "#!/bin/sh\n"
                "# Stand-in of NVIDIA's dcgm-exporter (tests/tools/standin/nvidia_repo.py).\n"
                'if [ "${1:-}" = --version ]; then\n'
                f"  echo 'dcgm-exporter version {PAIRED_DCGM}-{EXPORTER_VERSION}'\n"
                "  exit 0\n"
                "fi\n"
                "exec sleep infinity\n"
            )
            _deb(
                Path(tmp) / "exporter",
                folder / f"datacenter-gpu-manager-exporter_{EXPORTER_VERSION}-1_{dpkg_arch}.deb",
                {
                    "Package": "datacenter-gpu-manager-exporter",
                    "Version": f"{EXPORTER_VERSION}-1",
                    "Architecture": dpkg_arch,
                    "Description": "NVIDIA DCGM exporter (stand-in)",
                },
                {
                    "/usr/bin/dcgm-exporter": (exporter, 0o755),
                    "/etc/dcgm-exporter/default-counters.csv": (
                        "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n",
                        0o644,
                    ),
                    "/lib/systemd/system/nvidia-dcgm-exporter.service": (_UNIT, 0o644),
                },
            )
            packages = _packages(folder)
            (folder / "Packages").write_text(packages)
            digest = hashlib.sha256(packages.encode()).hexdigest()
            release = (
                "Origin: fmctl stand-in of NVIDIA's CUDA repository\n"
                "Label: cuda\n"
                f"Date: {formatdate(usegmt=True)}\n"
                f"Architectures: {dpkg_arch} all\n"
                "SHA256:\n"
                f" {digest} {len(packages.encode())} Packages\n"
            )
            (folder / "Release").write_text(release)
            subprocess.run(
                [*gpg, "--yes", "--digest-algo", "SHA512", "--clearsign",
                 "-o", str(folder / "InRelease"), str(folder / "Release")],
                check=True, capture_output=True, env=env,
            )  # fmt: skip
        finally:
            subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True)
    return folder


def _keyring_deb(
    root: Path, folder: Path, keyring: Path, distro: str, arch: str, source: str
) -> None:
    target = root / "usr/share/keyrings/cuda-archive-keyring.gpg"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(keyring.read_bytes())
    _deb(
        root,
        folder / "cuda-keyring_1.1-1_all.deb",
        {
            "Package": "cuda-keyring",
            "Version": "1.1-1",
            "Architecture": "all",
            "Description": "NVIDIA CUDA repository keyring (stand-in)",
        },
        {f"/etc/apt/sources.list.d/cuda-{distro}-{arch}.list": (source, 0o644)},
    )
