"""`fmctl setup parallelcluster`: install ParallelCluster's CLI where fmctl can drive it."""

from __future__ import annotations

import subprocess

import click


@click.group("setup")
def setup() -> None:
    """Install the tools fmctl drives."""


@setup.command("parallelcluster")
@click.option("--version", "version", default=None, help="ParallelCluster version to install.")
@click.option("--state-dir", envvar="FMCTL_HOME", metavar="DIR")
def parallelcluster(version: str | None, state_dir: str | None) -> None:
    """ParallelCluster in a virtualenv of its own (it pins old libraries)."""
    from provisioner.ops.setup import PCLUSTER_VERSION, install
    from provisioner.ops.target import home_of

    home = home_of(state_dir)
    click.echo(
        f"installing aws-parallelcluster=={version or PCLUSTER_VERSION} into "
        f"{home / 'parallelcluster' / 'venv'} ..."
    )
    try:
        command, warnings = install(home, version or PCLUSTER_VERSION)
    except (subprocess.CalledProcessError, OSError) as exc:
        click.echo(
            f"error: the install failed: {exc}\nhint: check the network and the "
            "version (pip index versions aws-parallelcluster)",
            err=True,
        )
        raise SystemExit(1) from exc
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"ParallelCluster ready: {' '.join(command)}")
