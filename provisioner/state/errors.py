"""The state's runtime failures: each says what happened and what to do."""

from __future__ import annotations

from provisioner import FmctlError
from provisioner.state.records import Holder


class StateError(FmctlError):
    """A failure of the state or its lock; ``hint`` says what to do."""


class LockHeld(StateError):
    """Another run holds the cluster's lock (``holder``, when it is known)."""

    def __init__(self, message: str, hint: str | None = None, holder: Holder | None = None):
        super().__init__(message, hint)
        self.holder = holder


class LeaseLost(StateError):
    """This run's lease ended (paused, asleep, cut off) and may have been taken over: it
    stops before its next change."""


class StateConflict(StateError):
    """A state object changed since this run read it: another run wrote it."""
