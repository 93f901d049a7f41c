"""`fmctl token`: the kubeconfig's credential plugin (kubectl runs it); `fmctl kubeconfig`:
the entry that runs it."""

from __future__ import annotations

import json

import click

from provisioner.cli.common import GuardedCommand, _target
from provisioner.cli.options import (
    cluster_name_check,
    name_argument,
    region_option,
    target_options,
)


@click.command("token", cls=GuardedCommand)
@click.option(
    "--cluster",
    "cluster",
    required=True,
    callback=cluster_name_check,
    help="The EKS cluster's name.",
)
@region_option
@target_options
def token(cluster: str, region: str, sandbox: bool, state_dir: str | None) -> None:
    """Print an ExecCredential for the cluster's API (kubectl runs this; it lasts ~15 min)."""
    from provisioner.ops.target import exec_credential

    target = _target(region, state_dir, sandbox)
    click.echo(json.dumps(exec_credential(target, cluster)))


@click.command("kubeconfig", cls=GuardedCommand)
@name_argument()
@click.option("--print", "print_only", is_flag=True, help="Print it instead; write nothing.")
@region_option
@target_options
def kubeconfig(
    name: str, print_only: bool, region: str, sandbox: bool, state_dir: str | None
) -> None:
    """Write EKS cluster NAME's kubeconfig entry again (merged, 0600, its context current),
    as `up` wrote it: an exec credential that runs `fmctl token`, no secret in the file."""
    from provisioner.ops.kubeconfig import kubeconfig_text, write_kubeconfig

    target = _target(region, state_dir, sandbox)
    if print_only:
        click.echo(kubeconfig_text(target, name), nl=False)
        return
    path = write_kubeconfig(target, name)
    click.echo(f"{name}: kubeconfig entry written to {path} (context now current)")
