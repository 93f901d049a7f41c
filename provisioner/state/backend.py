"""The contract between a cluster's state and where it is kept (the local folder or S3)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from provisioner.state.records import Holder


@dataclass(frozen=True)
class Stored:
    """An object's text and its version (S3's ETag; None locally)."""

    text: str
    version: str | None = None


@dataclass(frozen=True)
class LockView:
    """The lock as another run sees it: its holder and how long its lease still runs."""

    holder: Holder | None
    #: Seconds until the lease ends by the store's clock (<= 0: ended); None: no lease
    #: (a local lock lasts as long as its process).
    remaining_s: float | None
    version: str | None = None

    @property
    def who(self) -> str:
        """The holder, described (or that its lock cannot be read)."""
        return self.holder.describe() if self.holder else "a run fmctl cannot read"


class RunLock(Protocol):
    """A held lock: the fence every change passes, and its release."""

    #: The run whose expired lease this one took over, if it did.
    took_over: Holder | None
    #: Called after each renewal of a lease (the state flushes its event log then).
    on_renew: Callable[[], None]

    @property
    def lost(self) -> bool:
        """True once the lock may be another run's."""

    def fence(self) -> None:
        """Raise LeaseLost when the lock may no longer be this run's."""

    def release(self) -> None:
        """Give the lock up (a lost lock is left alone: it is someone else's now)."""


class Backend(Protocol):
    """One cluster's objects, by name (``spec.yaml``, ``audit/…``), and its lock."""

    @property
    def where(self) -> str:
        """A person's name for the place (a folder, s3://…)."""

    def read(self, name: str) -> Stored | None:
        """An object, or None when there is none."""

    def write(self, name: str, text: str) -> None:
        """Replace an object: compare-and-swap against the version last seen, where the
        store has versions (StateConflict when it changed)."""

    def add(self, name: str, text: str) -> None:
        """Write an object only this run writes (its event log, its audit entry)."""

    def names(self, prefix: str) -> list[str]:
        """The objects under ``prefix``, sorted."""

    def remember(self, names: tuple[str, ...]) -> None:
        """Note the versions of ``names`` now, so later writes compare against them."""

    def guard(self, fence: Callable[[], None]) -> None:
        """Check ``fence`` as each later write is sent (see ``S3Backend.guard``)."""

    def lock(self, holder: Holder, wait: bool, notice: Callable[[str], None]) -> RunLock:
        """Take the lock (LockHeld when another run has it and ``wait`` is False)."""

    def peek(self) -> LockView | None:
        """The lock, if any run holds it; reads only."""

    def break_lock(self, view: LockView) -> bool:
        """Remove the lock ``view`` saw (only if it is still that one); True when removed."""
