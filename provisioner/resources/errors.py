"""The one error family of a run: what failed, and what to do about it."""

from __future__ import annotations

from provisioner import BUG_HINT
from provisioner.drivers.aws import AwsError


class ResourceError(AwsError):
    """A resource could not be read, made, changed or deleted; the message says which and why,
    the hint what to do."""


class WaitTimeout(ResourceError):
    """A wait ran out of time; the message says what it waited for."""


class Foreign(ResourceError):
    """Something with the name fmctl would use exists and is not the cluster's: fmctl never
    takes over what it did not make."""


class ReadOnly(ResourceError):
    """A write was attempted while planning (a bug: `plan` must never write)."""

    default_hint = BUG_HINT
