"""The per-cluster folder under FMCTL_HOME (default ~/.fmctl): files 0600, folders 0700."""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO


def fmctl_home(explicit: str | None = None) -> Path:
    """``--state-dir``, else ``FMCTL_HOME``, else ``~/.fmctl``."""
    return Path(explicit or os.environ.get("FMCTL_HOME") or Path.home() / ".fmctl")


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, atomically."""
    _private_dir(path.parent)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


class LockHeld(Exception):
    """Another fmctl run holds the cluster's lock."""


@dataclass
class ClusterState:
    """The local cache of one cluster."""

    home: Path
    name: str

    @property
    def folder(self) -> Path:
        """``HOME/clusters/NAME``."""
        return self.home / "clusters" / self.name

    def save_spec(self, text: str) -> None:
        """Keep the spec `up` ran with."""
        write_private(self.folder / "spec.yaml", text)

    def spec_text(self) -> str | None:
        """The spec `up` last ran with, or None."""
        try:
            return (self.folder / "spec.yaml").read_text()
        except OSError:
            return None

    def save_outputs(self, outputs: dict[str, Any]) -> None:
        """Keep the outputs of the last run."""
        write_private(self.folder / "outputs.json", json.dumps(outputs, indent=1, sort_keys=True))

    def outputs(self) -> dict[str, Any]:
        """Outputs of the last run, or {} when there are none."""
        try:
            data: dict[str, Any] = json.loads((self.folder / "outputs.json").read_text())
            return data
        except (OSError, ValueError):
            return {}

    def save_nccl_baselines(self, rows: list[dict[str, Any]]) -> None:
        """Keep the pools' NCCL baselines (`fmctl check --save-baseline`)."""
        write_private(self.folder / "nccl-baselines.json", json.dumps(rows, indent=1))

    def nccl_baselines(self) -> list[dict[str, Any]]:
        """The saved NCCL baselines, or [] when there are none."""
        try:
            rows: list[dict[str, Any]] = json.loads(
                (self.folder / "nccl-baselines.json").read_text()
            )
            return rows
        except (OSError, ValueError):
            return []

    def log(self, event: dict[str, Any]) -> None:
        """Append to the event log."""
        _private_dir(self.folder)
        path = self.folder / "events.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(json.dumps({"time": time.time(), **event}) + "\n")

    def lock(self) -> TextIO:
        """Take the run lock (released when the returned file is closed, or the process dies).

        Raises LockHeld naming the holder when another `up`/`down` runs on this cluster.
        """
        _private_dir(self.folder)
        path = self.folder / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fh = os.fdopen(fd, "r+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = fh.read().strip() or "another process"
            fh.close()
            raise LockHeld(
                f"cluster {self.name} is being changed by {holder}; wait for it to "
                "finish (or stop it) and run again"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"fmctl pid {os.getpid()}")
        fh.flush()
        return fh
