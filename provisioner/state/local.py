"""The local backend: a folder per cluster under FMCTL_HOME (files 0600, folders 0700), and a
lock that is an flock(2): the kernel releases it when its process dies, so it never goes
stale, and it only ever guards runs on this machine."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from provisioner.state.backend import LockView, Stored
from provisioner.state.errors import LeaseLost, LockHeld
from provisioner.state.records import Holder


def private_dir(path: Path) -> Path:
    """A folder only its owner can enter."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, atomically."""
    private_dir(path.parent)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def append_private(path: Path, line: str) -> None:
    """Append a line to a file only its owner can read."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as fh:
        fh.write(line.rstrip("\n") + "\n")


class FileLock:
    """A held flock; nothing to renew, nothing to fence."""

    took_over: Holder | None = None
    lost = False

    def __init__(self, handle: TextIO) -> None:
        self._handle = handle
        self.on_renew: Callable[[], None] = lambda: None

    def fence(self) -> None:
        """Nothing while held (the kernel keeps the lock while this process lives); once
        released, every change is refused: threads of a run stopped by Ctrl-C may still
        be going."""
        if self.lost:
            raise LeaseLost(
                "this run released the cluster's lock: it makes no more changes",
                "run the command again to finish what it did not",
            )

    def release(self) -> None:
        """Close the file (the kernel drops the lock)."""
        self.lost = True
        self._handle.close()


class LocalBackend:
    """``HOME/clusters/NAME``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def where(self) -> str:
        """The folder."""
        return str(self.folder)

    def read(self, name: str) -> Stored | None:
        """The file's text, or None."""
        try:
            return Stored((self.folder / name).read_text())
        except OSError:
            return None

    def write(self, name: str, text: str) -> None:
        """Replace the file (the flock already keeps other runs out)."""
        write_private(self.folder / name, text)

    def add(self, name: str, text: str) -> None:
        """Write a file of this run's."""
        write_private(self.folder / name, text)

    def names(self, prefix: str) -> list[str]:
        """Files under the sub-folder ``prefix``."""
        folder = self.folder / prefix.rstrip("/")
        if not folder.is_dir():
            return []
        return sorted(f"{prefix.rstrip('/')}/{p.name}" for p in folder.iterdir() if p.is_file())

    def remember(self, names: tuple[str, ...]) -> None:
        """Nothing: files have no versions to compare."""

    def guard(self, fence: Callable[[], None]) -> None:
        """Nothing: a local lock is held until its process ends, it has no lease to lose."""

    def _open(self) -> TextIO:
        private_dir(self.folder)
        fd = os.open(self.folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        return os.fdopen(fd, "r+")

    def lock(self, holder: Holder, wait: bool, notice: Callable[[str], None]) -> FileLock:
        """flock the lock file and write the holder into it; with ``wait``, say whose run
        it waits for (as the S3 lock does), then wait for its end."""
        handle = self._open()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            found = Holder.parse(handle.read())
            who = found.describe() if found else "another fmctl process"
            if not wait:
                handle.close()
                raise LockHeld(
                    f"cluster {self.folder.name} is being changed by {who}",
                    "wait for it to finish (or stop it), or pass --wait to wait for it",
                    found,
                ) from None
            notice(
                f"waiting for the lock of cluster {self.folder.name}, held by {who} "
                "(a local lock: it is free when that process ends)"
            )
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(holder.body(holder.since))
        handle.flush()
        return FileLock(handle)

    def peek(self) -> LockView | None:
        """The holder when a live process has the flock (creates nothing)."""
        if not (self.folder / "lock").exists():
            return None
        handle = self._open()
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return LockView(Holder.parse(handle.read()), None)
        finally:
            handle.close()
        return None

    def break_lock(self, view: LockView) -> bool:
        """Never: the lock is its live process's until it exits (stop that process)."""
        return False
