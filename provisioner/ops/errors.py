"""What went wrong, for a person: every runtime failure the commands can meet, as a message
and a hint (AWS's errors translated, fmctl's own carrying theirs)."""

from __future__ import annotations

from provisioner.drivers.aws import AwsError, translate
from provisioner.drivers.endpoint_pace import BadTimeScale
from provisioner.sandbox.daemon import SandboxError
from provisioner.state.errors import LeaseLost, LockHeld, StateConflict, StateError
from provisioner.state.location import BadStateUrl

__all__ = [
    "AwsError",
    "BadStateUrl",
    "BadTimeScale",
    "LeaseLost",
    "LockHeld",
    "SandboxError",
    "StateConflict",
    "StateError",
    "explain",
]


def explain(exc: BaseException, doing: str) -> tuple[str, str | None]:
    """(message, hint) for ``exc`` met while ``doing``."""
    if isinstance(exc, StateError):
        return str(exc), exc.hint
    error = translate(exc, doing)
    return str(error), error.hint
