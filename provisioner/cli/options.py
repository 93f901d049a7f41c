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


def state_option(fn: F) -> F:
    """--state s3://BUCKET/PREFIX (env FMCTL_STATE): where the cluster's state and lock live."""
    return click.option(
        "--state",
        "state_url",
        envvar="FMCTL_STATE",
        metavar="URL",
        help="Team state: s3://BUCKET/PREFIX (env FMCTL_STATE; a spec's `state:` says it too).",
    )(fn)


def wait_option(fn: F) -> F:
    """--wait: wait for another run's lock instead of refusing."""
    return click.option(
        "--wait",
        is_flag=True,
        help="When another run holds the cluster's lock, wait for it (or its lease to end).",
    )(fn)


def _cluster_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from provisioner.ops.validate import name_refusal

    refused = None if value is None else name_refusal(value)
    if refused is not None:
        message, rule = refused
        # Exit 1 with the error and the rule, as for a bad spec (click's usage errors exit 2).
        click.echo(f"error: NAME: {message}\nhint: {rule}", err=True)
        ctx.exit(1)
    return value


def name_argument(required: bool = True) -> Callable[[F], F]:
    """The cluster NAME argument, checked before anything reaches AWS."""
    return click.argument("name", required=required, callback=_cluster_name)
