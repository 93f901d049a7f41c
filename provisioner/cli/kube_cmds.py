"""`fmctl token`: the kubeconfig's credential plugin (kubectl runs it)."""

from __future__ import annotations

import json

import click

from provisioner.cli.engine_cmds import GuardedCommand, _target
from provisioner.cli.options import region_option, target_options


@click.command("token", cls=GuardedCommand)
@click.option("--cluster", "cluster", required=True, help="The EKS cluster's name.")
@region_option
@target_options
def token(cluster: str, region: str, sandbox: bool, state_dir: str | None) -> None:
    """Print an ExecCredential for the cluster's API (kubectl runs this; it lasts ~15 min)."""
    from provisioner.ops.target import exec_credential

    target = _target(region, state_dir, sandbox)
    click.echo(json.dumps(exec_credential(target, cluster)))
