"""Options shared by the commands that reach AWS (or the sandbox)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

F = Callable[..., Any]


def target_options(fn: F) -> F:
    """--sandbox and --state-dir."""
    fn = click.option(
        "--state-dir",
        envvar="FMCTL_HOME",
        metavar="DIR",
        help="Local state folder (default ~/.fmctl; env FMCTL_HOME).",
    )(fn)
    return click.option(
        "--sandbox",
        is_flag=True,
        help="Run against the local AWS emulator fmctl starts (never real AWS).",
    )(fn)


def region_option(fn: F) -> F:
    """--region, defaulting to the standard AWS environment."""
    return click.option(
        "--region",
        default=lambda: (
            os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        ),
        show_default="AWS_REGION or us-east-1",
        help="AWS region.",
    )(fn)


def spec_options(fn: F) -> F:
    """-f/--file and --scheduler, for the commands that read a spec."""
    fn = click.option(
        "--scheduler",
        type=click.Choice(["slurm", "kubernetes"]),
        help="Override the spec's scheduler.",
    )(fn)
    return click.option(
        "-f", "--file", "path", required=True, metavar="FILE", help="The cluster spec."
    )(fn)
