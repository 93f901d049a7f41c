"""Options shared by the commands that reach AWS (or the sandbox)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import click

F = Callable[..., Any]


def _profile(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # botocore reads AWS_PROFILE for credentials and region alike, and so does every
    # subprocess fmctl starts (ParallelCluster's pcluster): one setting for all of them.
    if value:
        os.environ["AWS_PROFILE"] = value
    return value


def target_options(fn: F) -> F:
    """--sandbox, --state-dir and --profile."""
    fn = click.option(
        "--profile",
        callback=_profile,
        expose_value=False,
        metavar="NAME",
        help="AWS profile for credentials and region (env AWS_PROFILE; ignored by --sandbox).",
    )(fn)
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
    """--region; without it, the cluster's recorded region, then the AWS environment and
    profile (``ops.region``), else an error: never a silent default."""

    @functools.wraps(fn)
    def resolved(*args: Any, **kwargs: Any) -> Any:
        from provisioner.ops.region import RegionUnknown, Unresolved, resolve_region
        from provisioner.ops.target import home_of
        from provisioner.ops.team import team_region

        home = home_of(kwargs.get("state_dir"))
        name, sandbox = kwargs.get("name"), bool(kwargs.get("sandbox"))
        try:
            kwargs["region"] = resolve_region(
                kwargs.get("region"),
                name,
                home,
                sandbox,
                lambda: team_region(home, str(name), sandbox, kwargs.get("state_url")),
            )
        except RegionUnknown as exc:
            if kwargs.get("all_regions"):
                from provisioner.catalog.regions import REGIONS

                kwargs["region"] = REGIONS[0]  # every region is read; this one only starts
            else:
                # Said by the first AWS client this command makes: what needs no AWS runs.
                kwargs["region"] = Unresolved(exc)
        return fn(*args, **kwargs)

    return click.option(
        "--region",
        default=None,
        metavar="REGION",
        help="AWS region (default: the cluster's region recorded by `up` on this machine "
        "or in its team state, else AWS_REGION / AWS_DEFAULT_REGION, else the profile's).",
    )(resolved)


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


def cluster_name_check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: a cluster name no cluster can have never reaches AWS."""
    from provisioner.ops.validate import name_refusal

    refused = None if value is None else name_refusal(value)
    if refused is not None:
        message, rule = refused
        label = "NAME" if isinstance(param, click.Argument) else f"--{param.name}"
        # Exit 1 with the error and the rule, as for a bad spec (click's usage errors exit 2).
        click.echo(f"error: {label}: {message}\nhint: {rule}", err=True)
        ctx.exit(1)
    return value


def known_clusters(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of NAME: the clusters this machine keeps state of (folders under
    FMCTL_HOME/clusters, or --state-dir's), nothing read from AWS."""
    from provisioner.ops.target import home_of

    given = ctx.params.get("state_dir")
    folder = home_of(given if isinstance(given, str) else None) / "clusters"
    try:
        names = sorted(p.name for p in folder.iterdir() if p.is_dir())
    except OSError:
        return []
    return [n for n in names if n.startswith(incomplete)]


def name_argument(required: bool = True) -> Callable[[F], F]:
    """The cluster NAME argument, checked before anything reaches AWS; the shell completes
    it from the clusters this machine knows."""
    return click.argument(
        "name", required=required, callback=cluster_name_check, shell_complete=known_clusters
    )


def output_option(fn: F) -> F:
    """-o text|json (json: data on stdout, errors too; see ``cli.jsonout``)."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="json: JSON lines of events and a summary on stdout (errors as JSON too).",
    )(fn)
