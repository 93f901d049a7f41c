"""What went wrong, for a person: every failure the commands can meet as one of fmctl's
errors (``provisioner.FmctlError``), each with its message and hint. fmctl's own kinds come
as they are; an SDK's failure is translated (``drivers.aws.translate``: what fmctl was doing,
what AWS said, what to try); anything else is ``Unexpected``."""

from __future__ import annotations

from provisioner import BUG_HINT, FmctlBug, FmctlError
from provisioner.drivers.aws import AwsError, translate
from provisioner.drivers.endpoint_pace import BadTimeScale
from provisioner.ops.sandbox_link import SandboxMissing, SandboxUnavailable, is_sandbox_error
from provisioner.state.errors import LeaseLost, LockHeld, StateConflict, StateError
from provisioner.state.location import BadStateUrl

__all__ = [
    "BUG_HINT",
    "AwsError",
    "BadStateUrl",
    "BadTimeScale",
    "FmctlBug",
    "FmctlError",
    "LeaseLost",
    "LockHeld",
    "SandboxMissing",
    "SandboxUnavailable",
    "StateConflict",
    "StateError",
    "Unexpected",
    "as_error",
    "explain",
]


class Unexpected(FmctlError):
    """A failure none of fmctl's kinds describes: a bug, or the machine's (a full disk, a
    file it may not read); the message names the Python exception."""

    default_hint = "FMCTL_DEBUG=1 shows the traceback; please report it if it looks like fmctl's"


def as_error(exc: BaseException, doing: str) -> FmctlError:
    """``exc``, met while ``doing``, as one of fmctl's errors."""
    if isinstance(exc, FmctlError) and not isinstance(exc, AwsError):
        return exc
    if is_sandbox_error(exc):
        return SandboxUnavailable(str(exc))
    translated = translate(exc, doing)
    if isinstance(exc, AwsError) or translated.code is not None or translated.hint is not None:
        return translated
    return Unexpected(f"{doing}: {type(exc).__name__}: {exc}")


def explain(exc: BaseException, doing: str) -> tuple[str, str | None]:
    """(message, hint) of ``exc`` met while ``doing``."""
    error = as_error(exc, doing)
    return str(error), error.hint
