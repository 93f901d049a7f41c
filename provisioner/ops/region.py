"""Which region a command about a named cluster runs in, when ``--region`` does not say.

The order: ``--region``; the region recorded for that cluster on this machine (the spec
last applied, else the region of a first `up` cut short before it applied one); the same
record in the team's state, when the cluster's state is shared (``--state`` /
FMCTL_STATE, or this machine's note of where it lives: a teammate's cluster, or one this
machine pushed); ``AWS_REGION``, then ``AWS_DEFAULT_REGION``; the region of the profile in
use (botocore's own lookup, so ``AWS_PROFILE`` and ``--profile`` count); else an error
saying how to set one. Never a silent us-east-1: a `down` or `status`
in the wrong region finds nothing and says so, which reads like a cluster that is gone.

In the sandbox the profile is not read: its runs touch none of the user's AWS settings.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from provisioner.drivers.aws import AwsError


class RegionUnknown(AwsError):
    """No region was given, recorded or configured."""


class Unresolved(str):
    """The region of a command that found none: empty, and carrying why. Commands that
    need no AWS call (local state) run on; the first AWS client raises ``error``, so the
    problems found without AWS (a bad name, a bad state URL) are still said first."""

    error: RegionUnknown

    def __new__(cls, error: RegionUnknown) -> Unresolved:
        made = super().__new__(cls, "")
        made.error = error
        return made


def recorded_region(home: Path, name: str) -> str | None:
    """The region recorded for ``name`` in this machine's folder (``ClusterState.region``)."""
    from provisioner.state.store import ClusterState

    try:
        return ClusterState(home, name).region()
    except OSError:
        return None


def profile_region() -> str | None:
    """The configured region of the profile botocore would use (AWS_PROFILE, else default)."""
    import botocore.session
    from botocore.exceptions import BotoCoreError

    try:
        region = botocore.session.Session().get_config_variable("region")
    except BotoCoreError:  # an unknown profile: no region from it
        return None
    return str(region) if region else None


def resolve_region(
    explicit: str | None,
    name: str | None,
    home: Path,
    sandbox: bool,
    shared: Callable[[], str | None] = lambda: None,
) -> str:
    """The region to use (see the module's docstring for the order); ``shared`` reads the
    record in the cluster's team state (``ops.team.team_region``), asked only when this
    machine has none."""
    if explicit:
        return explicit
    if name:
        recorded = recorded_region(home, name) or shared()
        if recorded:
            return recorded
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(variable):
            return os.environ[variable]
    configured = None if sandbox else profile_region()
    if configured:
        return configured
    subject = f"cluster {name}" if name else "this command"
    raise RegionUnknown(
        f"no region for {subject}: no --region, "
        + ("no record of it on this machine or in its team state, " if name else "")
        + "no AWS_REGION or AWS_DEFAULT_REGION, and no region in the AWS profile",
        hint="pass --region REGION (or export AWS_REGION=REGION, or `aws configure set "
        "region REGION`)",
    )
