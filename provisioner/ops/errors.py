"""What went wrong, for a person: every runtime failure the commands can meet, as a message
and a hint (AWS's errors translated, fmctl's own carrying theirs)."""

from __future__ import annotations

from provisioner.drivers.aws import AwsError, translate
from provisioner.sandbox.daemon import SandboxError
from provisioner.state.store import LockHeld

__all__ = ["AwsError", "LockHeld", "SandboxError", "explain"]


def explain(exc: BaseException, doing: str) -> tuple[str, str | None]:
    """(message, hint) for ``exc`` met while ``doing``."""
    error = translate(exc, doing)
    return str(error), error.hint
